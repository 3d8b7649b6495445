#include "model/description/layer_params.h"

namespace gemtb::model {
namespace {

constexpr const char* kAttentionLinears[4] = {".wq", ".wk", ".wv", ".wo"};

}  // namespace

void AddLinear(ParamLayout& layout, const std::string& name, int in, int out) {
  layout.Add(name + ".w", {in, out}, ParamInit::kFanIn, in);
  layout.Add(name + ".b", {out}, ParamInit::kZero);
}

void AddLayerNorm(ParamLayout& layout, const std::string& name, int width) {
  layout.Add(name + ".gamma", {width}, ParamInit::kOne);
  layout.Add(name + ".beta", {width}, ParamInit::kZero);
}

void AddTokenMix(ParamLayout& layout, const std::string& name, int n_in, int n_out) {
  layout.Add(name + ".m", {n_out, n_in}, ParamInit::kFanIn, n_in);
}

void AddAttention(ParamLayout& layout, const std::string& name, int d) {
  for (const char* w : kAttentionLinears) AddLinear(layout, name + w, d, d);
}

LinearSlices LinearAt(const ParamLayout& layout, const std::string& name, int in, int out) {
  return LinearSlices{layout.Ref(name + ".w", {in, out}), layout.Ref(name + ".b", {out}), in, out};
}

LayerNormSlices LayerNormAt(const ParamLayout& layout, const std::string& name, int width) {
  return LayerNormSlices{layout.Ref(name + ".gamma", {width}), layout.Ref(name + ".beta", {width}), width};
}

TokenMixSlices TokenMixAt(const ParamLayout& layout, const std::string& name, int n_in, int n_out) {
  return TokenMixSlices{layout.Ref(name + ".m", {n_out, n_in}), n_in, n_out};
}

AttentionSlices AttentionAt(const ParamLayout& layout, const std::string& name, int d) {
  return AttentionSlices{LinearAt(layout, name + kAttentionLinears[0], d, d),
                         LinearAt(layout, name + kAttentionLinears[1], d, d),
                         LinearAt(layout, name + kAttentionLinears[2], d, d),
                         LinearAt(layout, name + kAttentionLinears[3], d, d)};
}

}  // namespace gemtb::model
