// Storage formats of tensor elements that the executors (reference/, gpu/) compute with: a subset
// of the named formats of dtype.h, which gives their names and sizes.
#ifndef GEMTB_MODEL_COMMON_ELEMENT_TYPE_H_
#define GEMTB_MODEL_COMMON_ELEMENT_TYPE_H_

#include <optional>

#include "model/common/dtype.h"

namespace gemtb {

enum class ElementType { kFloat64, kFloat32, kFloat16, kBFloat16 };

constexpr Dtype DtypeOf(ElementType type) {
  switch (type) {
    case ElementType::kFloat64: return Dtype::kFp64;
    case ElementType::kFloat32: return Dtype::kFp32;
    case ElementType::kFloat16: return Dtype::kFp16;
    case ElementType::kBFloat16: return Dtype::kBf16;
  }
  return Dtype::kFp32;
}

// The executor type of a named format, or nullopt for one only the simulator prices.
constexpr std::optional<ElementType> ElementTypeOf(Dtype dtype) {
  for (ElementType t : {ElementType::kFloat64, ElementType::kFloat32, ElementType::kFloat16,
                        ElementType::kBFloat16}) {
    if (DtypeOf(t) == dtype) return t;
  }
  return std::nullopt;
}

}  // namespace gemtb

#endif  // GEMTB_MODEL_COMMON_ELEMENT_TYPE_H_
