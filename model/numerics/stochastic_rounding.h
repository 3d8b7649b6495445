// Stochastic rounding from fp32 to bf16 / fp16 / E4M3 / E5M2 / E2M1 / E2M3 / E3M2 with an injected
// 16-bit random r.
// Rule: lo = |x| truncated to the target, u = the spacing above lo,
// f = floor((|x| - lo) / u · 2^16), computed exactly; the result is lo + u iff f + r >= 2^16, with the
// sign restored. So over all 2^16 values of r exactly f round away, and E[result] = x up to 2^-16 u.
// r is meant to be PhiloxSrBits(seed, stream, element) (philox.h), so CPU and GPU agree bitwise.
//
// Overflow: bf16/fp16 go to ±inf (also when lo + u passes the largest finite value); fp8, fp6 and fp4
// saturate to ±max, as their RNE encoders do. Zero keeps its sign; inf stays inf (fp8/fp6/fp4: ±max);
// NaN stays NaN (bf16/fp16: quiet, sign and payload kept; fp8: canonical 0x7F; fp6/fp4, which have
// no NaN: +max, as fp4_fp6.h's RNE encoders).
#pragma once

#include <cstdint>

#include "model/numerics/float_formats.h"
#include "model/numerics/fp4_fp6.h"
#include "model/numerics/fp8.h"
#include "model/numerics/host_device.h"

namespace gemtb::numerics {

// bf16 is fp32 with the low 16 bits cut, so f is exactly those bits: adding r to them and
// truncating rounds up iff f + r >= 2^16; a carry out of the fraction bumps the exponent (or
// reaches inf from the largest finite value).
GEMTB_HD inline uint16_t FloatToBf16BitsSr(float x, uint16_t r) {
  const uint32_t u = FloatToBits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  if ((u & 0x7FFFFFFFu) == 0x7F800000u) return static_cast<uint16_t>(u >> 16);
  return static_cast<uint16_t>((u + r) >> 16);
}

GEMTB_HD inline uint16_t FloatToFp16BitsSr(float x, uint16_t r) {
  return static_cast<uint16_t>(detail::EncodeIeee(detail::SplitFloat(x), detail::Fp16Format(), true, r));
}

GEMTB_HD inline uint8_t FloatToE4m3Sr(float x, uint16_t r) {
  return detail::EncodeFp8(detail::SplitFloat(x), Fp8Format::kE4M3, true, r);
}

GEMTB_HD inline uint8_t FloatToE5m2Sr(float x, uint16_t r) {
  return detail::EncodeFp8(detail::SplitFloat(x), Fp8Format::kE5M2, true, r);
}

GEMTB_HD inline uint8_t FloatToFp8Sr(float x, Fp8Format f, uint16_t r) {
  return detail::EncodeFp8(detail::SplitFloat(x), f, true, r);
}

GEMTB_HD inline uint8_t FloatToFp4Fp6Sr(float x, Fp4Fp6Format f, uint16_t r) {
  return detail::EncodeFp4Fp6(detail::SplitFloat(x), f, true, r);
}

}  // namespace gemtb::numerics
