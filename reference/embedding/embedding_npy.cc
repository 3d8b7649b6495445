#include "reference/embedding/embedding_npy.h"

#include <utility>

namespace gemtb::reference {

io::NpyDType TableNpyDType(ElementType dtype) {
  switch (dtype) {
    case ElementType::kFloat16: return io::NpyDType::kFloat16;
    case ElementType::kBFloat16: return io::NpyDType::kBFloat16;
    default: return io::NpyDType::kFloat32;
  }
}

io::NpyArray FloatNpyArray(const std::vector<float>& values, std::vector<int64_t> shape, io::NpyDType dtype) {
  return io::EncodeFloat(std::vector<double>(values.begin(), values.end()), std::move(shape), dtype);
}

}  // namespace gemtb::reference
