// The parameters of the GEM-like model's layer kinds, named and shaped in one place: the adders
// build the flat layout (gem_geometry.cc), the binders find a layer's slices in it by the same names
// (the oracle's layers, reference/model/layers.h, and the GPU model, gpu/train/gem_model.cc). A
// linear layer "<n>" owns "<n>.w" [in, out] and "<n>.b" [out]; a LayerNorm "<n>.gamma", "<n>.beta";
// a token mix "<n>.m" [n_out, n_in]; an attention block the linear layers "<n>.wq", ".wk", ".wv",
// ".wo", each [d, d].
#ifndef GEMTB_MODEL_DESCRIPTION_LAYER_PARAMS_H_
#define GEMTB_MODEL_DESCRIPTION_LAYER_PARAMS_H_

#include <string>

#include "model/description/param_layout.h"

namespace gemtb::model {

struct LinearSlices {
  ParamRef w, b;
  int in = 0, out = 0;
};
struct LayerNormSlices {
  ParamRef gamma, beta;
  int width = 0;
};
struct TokenMixSlices {
  ParamRef m;
  int n_in = 0, n_out = 0;
};
struct AttentionSlices {
  LinearSlices wq, wk, wv, wo;
};

void AddLinear(ParamLayout& layout, const std::string& name, int in, int out);
void AddLayerNorm(ParamLayout& layout, const std::string& name, int width);
void AddTokenMix(ParamLayout& layout, const std::string& name, int n_in, int n_out);
void AddAttention(ParamLayout& layout, const std::string& name, int d);

// The slices of a layer that the layout holds with exactly these shapes (ParamLayout::Ref CHECKs).
LinearSlices LinearAt(const ParamLayout& layout, const std::string& name, int in, int out);
LayerNormSlices LayerNormAt(const ParamLayout& layout, const std::string& name, int width);
TokenMixSlices TokenMixAt(const ParamLayout& layout, const std::string& name, int n_in, int n_out);
AttentionSlices AttentionAt(const ParamLayout& layout, const std::string& name, int d);

}  // namespace gemtb::model

#endif  // GEMTB_MODEL_DESCRIPTION_LAYER_PARAMS_H_
