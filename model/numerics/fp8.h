// FP8 E4M3fn and E5M2 (arXiv 2209.05433), bit-exact.
//
// Encoders are RNE + satfinite, the mode Hopper's cvt.rn.satfinite.{e4m3,e5m2}x2.f32 implements:
// finite values or ±inf beyond the largest finite value give ±max (448 `0x7E` / 57344 `0x7B`);
// the sign of zero is kept; NaN gives the canonical code 0x7F for both formats (what the hardware
// conversion and cuda_fp8.hpp's __nv_cvt_float_to_fp8 return; NaN is compared by class anyway).
//
// E4M3fn: bias 7, no inf, NaN = S.1111.111, max 448, min subnormal 2^-9.
// E5M2:   bias 15, IEEE-like (it is the top byte of fp16), inf 0x7C, max 57344, min subnormal 2^-16.
#pragma once

#include <cstdint>

#include "model/numerics/float_formats.h"
#include "model/numerics/host_device.h"

namespace gemtb::numerics {

enum class Fp8Format { kE4M3, kE5M2 };

namespace detail {

// Satfinite: a code above max_finite (E4M3's NaN slot 0x7F, E5M2's inf 0x7C) saturates.
GEMTB_HD constexpr BinaryFormat E4m3Format() { return {3, 7, 8, 7, 0x7Eu, 0x7Eu}; }
GEMTB_HD constexpr BinaryFormat E5m2Format() { return {2, 15, 15, 7, 0x7Bu, 0x7Bu}; }
inline constexpr uint8_t kFp8CanonicalNan = 0x7Fu;

GEMTB_HD constexpr BinaryFormat Fp8BinaryFormat(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? E4m3Format() : E5m2Format();
}

// RNE (sr == false) or stochastic rounding with r (sr == true) of a split IEEE value, satfinite.
GEMTB_HD inline uint8_t EncodeFp8(const ExactValue& v, Fp8Format f, bool sr, uint32_t r) {
  return static_cast<uint8_t>(EncodeSatfinite(v, Fp8BinaryFormat(f), kFp8CanonicalNan, sr, r));
}

}  // namespace detail

// ---- decode (exact: every fp8 value is an fp32 value) ----

GEMTB_HD inline float E4m3ToFloat(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  const uint32_t mag = c & 0x7Fu;
  if (mag == 0x7Fu) return BitsToFloat(sign | 0x7FC00000u);
  if (mag == 0) return BitsToFloat(sign);
  const uint32_t exp_field = mag >> 3;
  const uint32_t frac = mag & 7u;
  // value = (exp_field ? 8+frac : frac) · 2^(max(exp_field,1) - 7 - 3), exact in fp32.
  const uint64_t m = exp_field != 0 ? (8u | frac) : frac;
  const int k = (exp_field != 0 ? static_cast<int>(exp_field) : 1) - 10;
  return BitsToFloat(sign | detail::RoundMagnitude(m, k, detail::Fp32Format(), false, 0));
}

GEMTB_HD inline float E5m2ToFloat(uint8_t c) {
  return Fp16BitsToFloat(static_cast<uint16_t>(c << 8));  // E5M2 is fp16 with 8 fraction bits cut
}

// ---- encode: RNE + satfinite ----

GEMTB_HD inline uint8_t FloatToE4m3Rne(float x) {
  return detail::EncodeFp8(detail::SplitFloat(x), Fp8Format::kE4M3, false, 0);
}
GEMTB_HD inline uint8_t FloatToE5m2Rne(float x) {
  return detail::EncodeFp8(detail::SplitFloat(x), Fp8Format::kE5M2, false, 0);
}
// From fp64 with one rounding (no intermediate fp32).
GEMTB_HD inline uint8_t DoubleToE4m3Rne(double x) {
  return detail::EncodeFp8(detail::SplitDouble(x), Fp8Format::kE4M3, false, 0);
}
GEMTB_HD inline uint8_t DoubleToE5m2Rne(double x) {
  return detail::EncodeFp8(detail::SplitDouble(x), Fp8Format::kE5M2, false, 0);
}

// ---- generic dispatch ----

GEMTB_HD inline float Fp8ToFloat(uint8_t c, Fp8Format f) {
  return f == Fp8Format::kE4M3 ? E4m3ToFloat(c) : E5m2ToFloat(c);
}
GEMTB_HD inline uint8_t FloatToFp8Rne(float x, Fp8Format f) {
  return detail::EncodeFp8(detail::SplitFloat(x), f, false, 0);
}
GEMTB_HD inline uint8_t DoubleToFp8Rne(double x, Fp8Format f) {
  return detail::EncodeFp8(detail::SplitDouble(x), f, false, 0);
}
GEMTB_HD inline bool Fp8IsNan(uint8_t c, Fp8Format f) {
  return f == Fp8Format::kE4M3 ? (c & 0x7Fu) == 0x7Fu : (c & 0x7Fu) > 0x7Cu;
}
// Largest finite magnitude code (0x7E / 0x7B), its value (448 / 57344) and exponent (8 / 15).
GEMTB_HD inline uint8_t Fp8MaxFiniteCode(Fp8Format f) {
  return static_cast<uint8_t>(detail::Fp8BinaryFormat(f).max_finite);
}
GEMTB_HD inline float Fp8MaxFinite(Fp8Format f) { return f == Fp8Format::kE4M3 ? 448.0f : 57344.0f; }
GEMTB_HD inline int Fp8Emax(Fp8Format f) { return detail::Fp8BinaryFormat(f).emax; }

}  // namespace gemtb::numerics
