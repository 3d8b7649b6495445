// Every number format gemtb names, with its name and storage cost: the formats tensors are stored
// and computed in (ElementType, element_type.h, is the subset executors run) and the formats the
// simulator prices for communication and saved activations (fp8, mx4).
#ifndef GEMTB_MODEL_COMMON_DTYPE_H_
#define GEMTB_MODEL_COMMON_DTYPE_H_

#include <optional>
#include <string_view>

#include "model/common/enum_names.h"

namespace gemtb {

enum class Dtype {
  kFp64,
  kFp32,
  kFp16,
  kBf16,
  kFp8E4M3,  // "fp8": OCP FP8 E4M3 (numerics/fp8.h), the FP8 of weights and activations
  kFp8E5M2,  // OCP FP8 E5M2, the FP8 of gradients
  kMx4,      // OCP MXFP4: E2M1 elements with one E8M0 scale per 32 (numerics/mx.h)
};

struct DtypeInfo {
  Dtype dtype;
  std::string_view name;   // the name in every JSON file and flag
  int element_bits;        // bits of one element
  int scale_block;         // elements sharing one 8-bit block scale; 0 = no block scale
};

inline constexpr DtypeInfo kDtypes[] = {
    {Dtype::kFp64, "fp64", 64, 0},   {Dtype::kFp32, "fp32", 32, 0},
    {Dtype::kFp16, "fp16", 16, 0},   {Dtype::kBf16, "bf16", 16, 0},
    {Dtype::kFp8E4M3, "fp8", 8, 0},  {Dtype::kFp8E5M2, "fp8_e5m2", 8, 0},
    {Dtype::kMx4, "mx4", 4, 32},
};

inline constexpr EnumName<Dtype> kDtypeNames[] = {
    {Dtype::kFp64, kDtypes[0].name},    {Dtype::kFp32, kDtypes[1].name},
    {Dtype::kFp16, kDtypes[2].name},    {Dtype::kBf16, kDtypes[3].name},
    {Dtype::kFp8E4M3, kDtypes[4].name}, {Dtype::kFp8E5M2, kDtypes[5].name},
    {Dtype::kMx4, kDtypes[6].name},
};

constexpr const DtypeInfo& InfoOf(Dtype dtype) {
  for (const DtypeInfo& row : kDtypes) {
    if (row.dtype == dtype) return row;
  }
  return kDtypes[1];
}

constexpr std::string_view DtypeName(Dtype dtype) { return InfoOf(dtype).name; }
constexpr std::optional<Dtype> ParseDtype(std::string_view name) { return ParseIn(kDtypeNames, name); }

// Bytes per element including its share of the block scale (mx4: 4/8 + 1/32).
constexpr double DtypeBytes(Dtype dtype) {
  const DtypeInfo& info = InfoOf(dtype);
  return static_cast<double>(info.element_bits) / 8.0 +
         (info.scale_block > 0 ? 1.0 / static_cast<double>(info.scale_block) : 0.0);
}

}  // namespace gemtb

#endif  // GEMTB_MODEL_COMMON_DTYPE_H_
