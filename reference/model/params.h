// How the reference model reads the flat parameter array (model/description/param_layout.h): a
// view of values and gradients, and the values with 2-D parameters transposed.
#ifndef GEMTB_REFERENCE_MODEL_PARAMS_H_
#define GEMTB_REFERENCE_MODEL_PARAMS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/description/param_layout.h"

namespace gemtb::reference::model {

// The layout and its init are the model's (model/description/param_layout.h).
using gemtb::model::InitParams;
using gemtb::model::ParamInfo;
using gemtb::model::ParamInit;
using gemtb::model::ParamLayout;
using gemtb::model::ParamRef;

// Read-only values and the accumulating gradient of one parameter array; optionally `wt`, the same
// values with every 2-D parameter [a, b] stored transposed [b, a] at its offset (TransposedParams),
// made once per batch so that each sample's backward does not transpose its weights again.
template <typename T>
struct ParamView {
  const T* w = nullptr;
  T* g = nullptr;
  const T* wt = nullptr;
  const T* W(ParamRef r) const { return w + r.offset; }
  T* G(ParamRef r) const { return g + r.offset; }
  const T* WT(ParamRef r) const { return wt ? wt + r.offset : nullptr; }
};

// `params` with every 2-D parameter transposed in place of itself (others copied as they are).
template <typename T>
std::vector<T> TransposedParams(const ParamLayout& layout, const T* params) {
  std::vector<T> out(params, params + layout.total());
  for (const ParamInfo& info : layout.params()) {
    if (info.shape.size() != 2) continue;
    const int64_t a = info.shape[0], b = info.shape[1];
    const T* src = params + info.ref.offset;
    T* dst = out.data() + info.ref.offset;
    for (int64_t i = 0; i < a; ++i)
      for (int64_t j = 0; j < b; ++j) dst[j * a + i] = src[i * b + j];
  }
  return out;
}

}  // namespace gemtb::reference::model

#endif  // GEMTB_REFERENCE_MODEL_PARAMS_H_
