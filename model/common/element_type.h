// Storage formats of tensor elements. Shared by every executor; see spec/attention.md §7.
#ifndef GEMTB_MODEL_COMMON_ELEMENT_TYPE_H_
#define GEMTB_MODEL_COMMON_ELEMENT_TYPE_H_

namespace gemtb {

enum class ElementType { kFloat64, kFloat32, kFloat16, kBFloat16 };

}  // namespace gemtb

#endif  // GEMTB_MODEL_COMMON_ELEMENT_TYPE_H_
