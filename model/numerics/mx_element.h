// The element formats of OCP MX v1.0 blocks behind one enum, so that mx.h's scale rules and block
// loops serve MXFP8 (E4M3, E5M2), MXFP6 (E2M3, E3M2) and MXFP4 (E2M1) alike. Each element code is
// one byte: fp8 codes fill it, fp6 and fp4 codes sit in its low bits (fp4_fp6.h).
#pragma once

#include <cstdint>

#include "model/numerics/float_formats.h"
#include "model/numerics/fp4_fp6.h"
#include "model/numerics/fp8.h"
#include "model/numerics/host_device.h"

namespace gemtb::numerics {

enum class MxElement { kE4M3, kE5M2, kE2M1, kE2M3, kE3M2 };

GEMTB_HD constexpr bool MxElementIsFp8(MxElement e) {
  return e == MxElement::kE4M3 || e == MxElement::kE5M2;
}
// The family member of e; only meaningful for formats of that family.
GEMTB_HD constexpr Fp8Format MxElementFp8(MxElement e) {
  return e == MxElement::kE4M3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2;
}
GEMTB_HD constexpr Fp4Fp6Format MxElementFp4Fp6(MxElement e) {
  return e == MxElement::kE2M1 ? Fp4Fp6Format::kE2M1
                               : (e == MxElement::kE2M3 ? Fp4Fp6Format::kE2M3 : Fp4Fp6Format::kE3M2);
}

// emax, the exponent of the largest normal binade: 8, 15, 2, 2, 4 (the FLOOR rule subtracts it).
GEMTB_HD inline int MxElementEmax(MxElement e) {
  return MxElementIsFp8(e) ? Fp8Emax(MxElementFp8(e)) : Fp4Fp6Emax(MxElementFp4Fp6(e));
}
// Largest finite magnitude code and its value: 448, 57344, 6, 7.5, 28.
GEMTB_HD inline uint8_t MxElementMaxFiniteCode(MxElement e) {
  return MxElementIsFp8(e) ? Fp8MaxFiniteCode(MxElementFp8(e)) : Fp4Fp6MaxFiniteCode(MxElementFp4Fp6(e));
}
GEMTB_HD inline float MxElementMaxFinite(MxElement e) {
  return MxElementIsFp8(e) ? Fp8MaxFinite(MxElementFp8(e)) : Fp4Fp6MaxFinite(MxElementFp4Fp6(e));
}
// Bits of one code: 8, 8, 4, 6, 6.
GEMTB_HD inline int MxElementBits(MxElement e) {
  return MxElementIsFp8(e) ? 8 : Fp4Fp6Bits(MxElementFp4Fp6(e));
}
// The code NaN converts to: fp8's canonical NaN 0x7F; fp6 and fp4 have no NaN and give +max.
GEMTB_HD inline uint8_t MxElementNanCode(MxElement e) {
  return MxElementIsFp8(e) ? detail::kFp8CanonicalNan : Fp4Fp6MaxFiniteCode(MxElementFp4Fp6(e));
}

GEMTB_HD inline float MxElementToFloat(uint8_t code, MxElement e) {
  return MxElementIsFp8(e) ? Fp8ToFloat(code, MxElementFp8(e)) : Fp4Fp6ToFloat(code, MxElementFp4Fp6(e));
}

namespace detail {

// RNE (sr == false) or stochastic rounding with r (sr == true), satfinite.
GEMTB_HD inline uint8_t EncodeMxElement(const ExactValue& v, MxElement e, bool sr, uint32_t r) {
  return MxElementIsFp8(e) ? EncodeFp8(v, MxElementFp8(e), sr, r) : EncodeFp4Fp6(v, MxElementFp4Fp6(e), sr, r);
}

}  // namespace detail

GEMTB_HD inline uint8_t FloatToMxElementRne(float x, MxElement e) {
  return detail::EncodeMxElement(detail::SplitFloat(x), e, false, 0);
}
// From fp64 with one rounding (no intermediate fp32).
GEMTB_HD inline uint8_t DoubleToMxElementRne(double x, MxElement e) {
  return detail::EncodeMxElement(detail::SplitDouble(x), e, false, 0);
}
GEMTB_HD inline uint8_t FloatToMxElementSr(float x, MxElement e, uint16_t r) {
  return detail::EncodeMxElement(detail::SplitFloat(x), e, true, r);
}

}  // namespace gemtb::numerics
