// The OCP MX v1.0 sub-byte element formats FP4 E2M1, FP6 E2M3 and FP6 E3M2, bit-exact.
//
// None has inf or NaN; all have subnormals and a signed zero:
//   E2M1: bias 1, emax 2, max 6.0  (code 0x7),  min subnormal 0.5.
//   E2M3: bias 1, emax 2, max 7.5  (code 0x1F), min subnormal 2^-3.
//   E3M2: bias 3, emax 4, max 28.0 (code 0x1F), min subnormal 2^-4.
// Codes are stored one per byte in the low bits (sign at bit 3 for FP4, bit 5 for FP6), the layout
// ml_dtypes' float4_e2m1fn / float6_e2m3fn / float6_e3m2fn and CUDA's __nv_fp4_storage_t /
// __nv_fp6_storage_t use; decoders ignore the unused high bits.
//
// Encoders are RNE (or stochastic rounding, stochastic_rounding.h's rule) + satfinite, the mode of
// PTX's cvt.rn.satfinite.{e2m1x2,e2m3x2,e3m2x2}.f32: finite values beyond max and ±inf give ±max;
// the sign of zero is kept. NaN has no code; it gives +max, as cuda_fp4.hpp / cuda_fp6.hpp's
// __nv_cvt_float_to_fp4/fp6 do (ml_dtypes gives a zero instead: a convention named in
// tests/conformance/test_formats_ml_dtypes.py).
#pragma once

#include <cstdint>

#include "model/numerics/float_formats.h"
#include "model/numerics/host_device.h"

namespace gemtb::numerics {

enum class Fp4Fp6Format { kE2M1, kE2M3, kE3M2 };

namespace detail {

// Satfinite: codes above max_finite (the next binade up, which these formats do not have) saturate.
GEMTB_HD constexpr BinaryFormat E2m1Format() { return {1, 1, 2, 3, 0x7u, 0x7u}; }
GEMTB_HD constexpr BinaryFormat E2m3Format() { return {3, 1, 2, 5, 0x1Fu, 0x1Fu}; }
GEMTB_HD constexpr BinaryFormat E3m2Format() { return {2, 3, 4, 5, 0x1Fu, 0x1Fu}; }

GEMTB_HD constexpr BinaryFormat Fp4Fp6BinaryFormat(Fp4Fp6Format f) {
  return f == Fp4Fp6Format::kE2M1 ? E2m1Format() : (f == Fp4Fp6Format::kE2M3 ? E2m3Format() : E3m2Format());
}

// RNE (sr == false) or stochastic rounding with r (sr == true) of a split IEEE value, satfinite;
// NaN gives +max.
GEMTB_HD inline uint8_t EncodeFp4Fp6(const ExactValue& v, Fp4Fp6Format f, bool sr, uint32_t r) {
  const BinaryFormat fmt = Fp4Fp6BinaryFormat(f);
  return static_cast<uint8_t>(EncodeSatfinite(v, fmt, fmt.max_finite, sr, r));
}

}  // namespace detail

// ---- decode (exact: every value is an fp32 value) ----

GEMTB_HD inline float Fp4Fp6ToFloat(uint8_t c, Fp4Fp6Format f) {
  const detail::BinaryFormat fmt = detail::Fp4Fp6BinaryFormat(f);
  const uint32_t sign = static_cast<uint32_t>((c >> fmt.sign_shift) & 1u) << 31;
  const uint32_t mag = c & ((1u << fmt.sign_shift) - 1u);
  if (mag == 0) return BitsToFloat(sign);
  const uint32_t exp_field = mag >> fmt.mant_bits;
  const uint32_t frac = mag & ((1u << fmt.mant_bits) - 1u);
  // value = (exp_field ? 2^M + frac : frac) · 2^(max(exp_field, 1) - bias - M), exact in fp32.
  const uint64_t m = exp_field != 0 ? ((1u << fmt.mant_bits) | frac) : frac;
  const int k = (exp_field != 0 ? static_cast<int>(exp_field) : 1) - fmt.bias - fmt.mant_bits;
  return BitsToFloat(sign | detail::RoundMagnitude(m, k, detail::Fp32Format(), false, 0));
}

GEMTB_HD inline float E2m1ToFloat(uint8_t c) { return Fp4Fp6ToFloat(c, Fp4Fp6Format::kE2M1); }
GEMTB_HD inline float E2m3ToFloat(uint8_t c) { return Fp4Fp6ToFloat(c, Fp4Fp6Format::kE2M3); }
GEMTB_HD inline float E3m2ToFloat(uint8_t c) { return Fp4Fp6ToFloat(c, Fp4Fp6Format::kE3M2); }

// ---- encode: RNE + satfinite, from fp32 or with one rounding from fp64 ----

GEMTB_HD inline uint8_t FloatToFp4Fp6Rne(float x, Fp4Fp6Format f) {
  return detail::EncodeFp4Fp6(detail::SplitFloat(x), f, false, 0);
}
GEMTB_HD inline uint8_t DoubleToFp4Fp6Rne(double x, Fp4Fp6Format f) {
  return detail::EncodeFp4Fp6(detail::SplitDouble(x), f, false, 0);
}
GEMTB_HD inline uint8_t FloatToE2m1Rne(float x) { return FloatToFp4Fp6Rne(x, Fp4Fp6Format::kE2M1); }
GEMTB_HD inline uint8_t FloatToE2m3Rne(float x) { return FloatToFp4Fp6Rne(x, Fp4Fp6Format::kE2M3); }
GEMTB_HD inline uint8_t FloatToE3m2Rne(float x) { return FloatToFp4Fp6Rne(x, Fp4Fp6Format::kE3M2); }

// ---- properties ----

// Largest finite magnitude code (0x7 / 0x1F / 0x1F), its value (6 / 7.5 / 28), exponent (2 / 2 / 4)
// and the storage width in bits (4 / 6 / 6).
GEMTB_HD inline uint8_t Fp4Fp6MaxFiniteCode(Fp4Fp6Format f) {
  return static_cast<uint8_t>(detail::Fp4Fp6BinaryFormat(f).max_finite);
}
GEMTB_HD inline float Fp4Fp6MaxFinite(Fp4Fp6Format f) {
  return f == Fp4Fp6Format::kE2M1 ? 6.0f : (f == Fp4Fp6Format::kE2M3 ? 7.5f : 28.0f);
}
GEMTB_HD inline int Fp4Fp6Emax(Fp4Fp6Format f) { return detail::Fp4Fp6BinaryFormat(f).emax; }
GEMTB_HD inline int Fp4Fp6Bits(Fp4Fp6Format f) { return detail::Fp4Fp6BinaryFormat(f).sign_shift + 1; }

}  // namespace gemtb::numerics
