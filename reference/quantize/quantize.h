// Array-level quantisation with the bit-exact codecs of model/numerics:
// elementwise bf16 / fp16 / E4M3 / E5M2 / E2M3 / E3M2 / E2M1, MX blocks (32 along an axis, or 32x32 tiles of the last two
// axes) with E8M0 scales by RCEIL or FLOOR, round-to-nearest-even or stochastic rounding from Philox,
// and an optional randomized Hadamard transform before quantisation. What `gemtb ref quantize` runs.
#ifndef GEMTB_REFERENCE_QUANTIZE_QUANTIZE_H_
#define GEMTB_REFERENCE_QUANTIZE_QUANTIZE_H_

#include <cstdint>
#include <vector>

#include "model/common/enum_names.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/numerics/mx.h"

namespace gemtb::reference {

// fp8 E4M3 / E5M2 (numerics/fp8.h), fp6 E2M3 / E3M2 and fp4 E2M1 (numerics/fp4_fp6.h).
enum class QuantFormat { kBf16, kFp16, kE4M3, kE5M2, kE2M3, kE3M2, kE2M1 };
// The names `gemtb ref quantize --format` and the golden files use.
inline constexpr EnumName<QuantFormat> kQuantFormatNames[] = {
    {QuantFormat::kBf16, "bf16"}, {QuantFormat::kFp16, "fp16"}, {QuantFormat::kE4M3, "e4m3"},
    {QuantFormat::kE5M2, "e5m2"}, {QuantFormat::kE2M3, "e2m3"}, {QuantFormat::kE3M2, "e3m2"},
    {QuantFormat::kE2M1, "e2m1"}};
// What a bad --format is told it may be.
inline constexpr char kQuantFormatChoices[] = "bf16|fp16|e4m3|e5m2|e2m3|e3m2|e2m1";
enum class QuantBlock { kNone, kAxis32, kSquare32 };

struct QuantizeOptions {
  QuantFormat format = QuantFormat::kBf16;
  QuantBlock block = QuantBlock::kNone;
  int axis = -1;  // block axis (kAxis32) and RHT axis; negative counts from the end
  numerics::MxScaleRule scale_rule = numerics::MxScaleRule::kRceil;
  bool stochastic = false;  // r = low 16 bits of Philox word (seed, stream, flat element index)
  uint64_t seed = 0;
  uint64_t stream = 0;
  int rht = 0;  // 0 = off, else the Hadamard block size 32, 64 or 128 along `axis` (last for 32x32)
};

struct QuantizeResult {
  std::vector<uint16_t> codes;  // one per element; fp8 / fp6 / fp4 codes use the low 8 / 6 / 4 bits
  int code_bits = 16;           // 16 for bf16/fp16; 8 for fp8, fp6 and fp4 (one code per byte)
  std::vector<uint8_t> scales;  // E8M0 codes (MX only)
  std::vector<int64_t> scales_shape;
  std::vector<double> values;   // the decoded result (after RHT when one was applied)
};

// `x` holds values decoded exactly from the input file. Stochastic rounding, MX and RHT work on fp32
// inputs (as a kernel does), so they require every value to be exactly representable in fp32;
// round-to-nearest-even to bf16/fp16/fp8/fp6/fp4 rounds once from any input. fp8, fp6 and fp4 saturate
// (finite values beyond max and ±inf give ±max); NaN gives fp8's NaN code 0x7F, and +max in fp6 and
// fp4, which have no NaN (numerics/fp4_fp6.h).
absl::StatusOr<QuantizeResult> Quantize(absl::Span<const double> x, const std::vector<int64_t>& shape,
                                        const QuantizeOptions& options);

}  // namespace gemtb::reference

#endif  // GEMTB_REFERENCE_QUANTIZE_QUANTIZE_H_
