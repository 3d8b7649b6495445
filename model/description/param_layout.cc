#include "model/description/param_layout.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "model/numerics/fp32_ops.h"
#include "model/numerics/philox.h"
#include "model/random/splitmix64.h"

namespace gemtb::model {

ParamRef ParamLayout::Add(std::string name, std::vector<int64_t> shape, ParamInit init, int64_t fan_in) {
  size_t size = 1;
  for (int64_t s : shape) size *= static_cast<size_t>(s);
  ParamInfo info;
  info.name = std::move(name);
  info.shape = std::move(shape);
  info.init = init;
  info.fan_in = fan_in;
  info.ref = ParamRef{total_, size};
  total_ += size;
  params_.push_back(std::move(info));
  return params_.back().ref;
}

ParamRef ParamLayout::Ref(const std::string& name, const std::vector<int64_t>& shape) const {
  for (const ParamInfo& info : params_) {
    if (info.name != name) continue;
    if (info.shape != shape) {
      std::fprintf(stderr, "ParamLayout::Ref: %s bound with another shape than the layout's\n", name.c_str());
      std::abort();
    }
    return info.ref;
  }
  std::fprintf(stderr, "ParamLayout::Ref: no parameter %s in the layout\n", name.c_str());
  std::abort();
}

std::vector<float> InitParams(const ParamLayout& layout, uint64_t seed) {
  using numerics::DivRn;
  using numerics::MulRn;
  using numerics::SqrtRn;
  using numerics::SubRn;
  std::vector<float> w(layout.total(), 0.0f);
  for (size_t p = 0; p < layout.params().size(); ++p) {
    const ParamInfo& info = layout.params()[p];
    float* out = w.data() + info.ref.offset;
    switch (info.init) {
      case ParamInit::kZero:
        break;
      case ParamInit::kOne:
        for (size_t e = 0; e < info.ref.size; ++e) out[e] = 1.0f;
        break;
      case ParamInit::kFanIn: {
        const uint64_t stream = StreamId(StreamTag::kInit, (uint64_t{1} << 32) + p, 0);
        const float bound = DivRn(1.0f, SqrtRn(static_cast<float>(info.fan_in)));
        for (size_t e = 0; e < info.ref.size; ++e) {
          const float u = U24(numerics::PhiloxWord(seed, stream, e));
          out[e] = MulRn(SubRn(MulRn(2.0f, u), 1.0f), bound);
        }
        break;
      }
    }
  }
  return w;
}

}  // namespace gemtb::model
