// The dense parameters of the reference model as one flat array with named slices, and their
// initialisation keyed by (seed, parameter index, element) through Philox ("dense
// init keyed by (seed, param, element)"), so that the same seed gives the same bits everywhere.
#ifndef GEMTB_REFERENCE_MODEL_PARAMS_H_
#define GEMTB_REFERENCE_MODEL_PARAMS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gemtb::reference::model {

// A slice [offset, offset + size) of the flat parameter (and gradient) array.
struct ParamRef {
  size_t offset = 0;
  size_t size = 0;
};

enum class ParamInit {
  kZero,        // biases, LayerNorm beta
  kOne,         // LayerNorm gamma
  kFanIn,       // uniform in +-1/sqrt(fan_in) (PyTorch's nn.Linear default bound)
};

struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;
  ParamInit init = ParamInit::kZero;
  int64_t fan_in = 1;
  ParamRef ref;
};

class ParamLayout {
 public:
  ParamRef Add(std::string name, std::vector<int64_t> shape, ParamInit init, int64_t fan_in = 1);
  const std::vector<ParamInfo>& params() const { return params_; }
  size_t total() const { return total_; }

 private:
  std::vector<ParamInfo> params_;
  size_t total_ = 0;
};

// Element e of parameter p: kFanIn draws u = u24(Philox(seed, S(INIT, 2^32 + p, 0), e)) and sets
// (2u - 1) / sqrt(fan_in), fp32 ops; the 2^32 offset keeps these streams apart from the tables'.
std::vector<float> InitParams(const ParamLayout& layout, uint64_t seed);

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
