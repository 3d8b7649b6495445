// The dense parameters of the GEM-like model as one flat fp32 array with named slices, and their
// initialisation keyed by (seed, parameter index, element) through Philox, so that the same seed
// gives the same bits in every executor (the oracle's trainer, the GPU trainer).
#ifndef GEMTB_MODEL_DESCRIPTION_PARAM_LAYOUT_H_
#define GEMTB_MODEL_DESCRIPTION_PARAM_LAYOUT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gemtb::model {

// A slice [offset, offset + size) of the flat parameter (and gradient) array.
struct ParamRef {
  size_t offset = 0;
  size_t size = 0;
};

enum class ParamInit {
  kZero,   // biases, LayerNorm beta
  kOne,    // LayerNorm gamma
  kFanIn,  // uniform in +-1/sqrt(fan_in) (PyTorch's nn.Linear default bound)
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
  // The slice of parameter `name`, which must exist with exactly `shape` (CHECKed: executors bind
  // the names that the layout's builder in gem_geometry.cc added).
  ParamRef Ref(const std::string& name, const std::vector<int64_t>& shape) const;
  const std::vector<ParamInfo>& params() const { return params_; }
  size_t total() const { return total_; }

 private:
  std::vector<ParamInfo> params_;
  size_t total_ = 0;
};

// Element e of parameter p: kFanIn draws u = u24(Philox(seed, S(INIT, 2^32 + p, 0), e)) and sets
// (2u - 1) / sqrt(fan_in), fp32 ops; the 2^32 offset keeps these streams apart from the tables'.
std::vector<float> InitParams(const ParamLayout& layout, uint64_t seed);

}  // namespace gemtb::model

#endif  // GEMTB_MODEL_DESCRIPTION_PARAM_LAYOUT_H_
