// bf16 / fp16 / fp32 encode and decode, bit-exact, plus the generic
// "round an exact value m·2^k once to a binary format" core that fp8.h, mx.h and
// stochastic_rounding.h reuse. Every result is computed with integer logic, so it is the same on
// every host and device, independent of rounding mode and FTZ/DAZ.
//
// Conventions (all encoders): round to nearest, ties to even; overflow to ±inf (fp16: 65520 → inf);
// subnormals kept; the sign of zero kept; NaN stays NaN: sign and the leading payload bits kept,
// quiet bit set (NaN is compared by class only).
#pragma once

#include <cstdint>

#include "model/numerics/host_device.h"

namespace gemtb::numerics {
namespace detail {

// A binary floating-point target: `mant_bits` stored fraction bits, exponent `bias`, `emax` the
// largest unbiased exponent that holds a finite value; codes are sign-magnitude with the sign at
// bit `sign_shift`. `max_finite` is the largest finite magnitude code; codes above it overflow to
// `overflow_code` (inf for IEEE formats, max_finite for the satfinite fp8 encoders).
struct BinaryFormat {
  int mant_bits;
  int bias;
  int emax;
  int sign_shift;
  uint32_t max_finite;
  uint32_t overflow_code;
};

// Functions rather than constexpr variables: device code may not reference host objects.
GEMTB_HD constexpr BinaryFormat Fp32Format() { return {23, 127, 127, 31, 0x7F7FFFFFu, 0x7F800000u}; }
GEMTB_HD constexpr BinaryFormat Bf16Format() { return {7, 127, 127, 15, 0x7F7Fu, 0x7F80u}; }
GEMTB_HD constexpr BinaryFormat Fp16Format() { return {10, 15, 15, 15, 0x7BFFu, 0x7C00u}; }

// An IEEE fp32/fp64 input split into class, sign and (for finite non-zero values) the exact value
// m·2^k with 0 < m < 2^53.
enum class ValueClass { kZero, kFinite, kInf, kNaN };
struct ExactValue {
  ValueClass cls;
  bool negative;
  uint64_t m;
  int k;
  uint64_t payload;  // fraction bits of a NaN, left-aligned to bit 63 (for payload-keeping NaN)
};

GEMTB_HD inline ExactValue SplitFloat(float x) {
  const uint32_t u = FloatToBits(x);
  const bool neg = (u >> 31) != 0;
  const uint32_t be = (u >> 23) & 0xFFu;
  const uint32_t frac = u & 0x7FFFFFu;
  if (be == 0xFFu) {
    return {frac != 0 ? ValueClass::kNaN : ValueClass::kInf, neg, 0, 0,
            static_cast<uint64_t>(frac) << 41};
  }
  if (be == 0) {
    if (frac == 0) return {ValueClass::kZero, neg, 0, 0, 0};
    return {ValueClass::kFinite, neg, frac, -149, 0};
  }
  return {ValueClass::kFinite, neg, frac | 0x800000u, static_cast<int>(be) - 150, 0};
}

GEMTB_HD inline ExactValue SplitDouble(double x) {
  const uint64_t u = DoubleToBits(x);
  const bool neg = (u >> 63) != 0;
  const uint32_t be = static_cast<uint32_t>(u >> 52) & 0x7FFu;
  const uint64_t frac = u & 0xFFFFFFFFFFFFFull;
  if (be == 0x7FFu) {
    return {frac != 0 ? ValueClass::kNaN : ValueClass::kInf, neg, 0, 0, frac << 12};
  }
  if (be == 0) {
    if (frac == 0) return {ValueClass::kZero, neg, 0, 0, 0};
    return {ValueClass::kFinite, neg, frac, -1074, 0};
  }
  return {ValueClass::kFinite, neg, frac | (1ull << 52), static_cast<int>(be) - 1075, 0};
}

// Magnitude code of m·2^k (m > 0, m < 2^64) in `fmt`: either round to nearest even (sr == false) or
// stochastically round with the 16-bit random r (sr == true: with lo = |x| truncated, u the
// spacing above lo and f = floor((|x|-lo)/u·2^16), the result is lo+u iff f + r >= 2^16).
// Values beyond the finite range give fmt.overflow_code. The code is built as
// ((e+bias-1) << mant_bits) + q with q the value in units of the quantum, hidden bit included, so
// that a carry out of the fraction increments the exponent, and a subnormal rounding up to 2^mant_bits
// becomes the smallest normal.
GEMTB_HD inline uint32_t RoundMagnitude(uint64_t m, int k, BinaryFormat fmt, bool sr,
                                        uint32_t r) {
  const int msb = 63 - CountLeadingZeros64(m);
  const int e = k + msb;  // floor(log2(value))
  if (e > fmt.emax) return fmt.overflow_code;
  const int emin = 1 - fmt.bias;
  const int q = (e < emin ? emin : e) - fmt.mant_bits;  // log2 of the quantum at this value
  const int shift = q - k;                               // low bits of m below the quantum
  uint64_t qint;
  bool up;
  if (shift <= 0) {
    qint = m << (-shift);  // exact; < 2^(mant_bits+1)
    up = false;
  } else if (shift > 80) {
    // value < 2^(64-shift) <= 2^-16 quanta: RNE and SR (f = 0) both give 0.
    qint = 0;
    up = false;
  } else {
    qint = shift >= 64 ? 0 : (m >> shift);
    const uint64_t rem = shift >= 64 ? m : (m & ((1ull << shift) - 1));
    if (!sr) {
      if (shift > 64) {
        up = false;  // value <= 2^63·2^-65 quanta < 1/2
      } else {
        const uint64_t half = 1ull << (shift - 1);
        up = rem > half || (rem == half && (qint & 1u) != 0);
      }
    } else {
      // f = floor(rem / 2^shift · 2^16), exact in integers.
      uint64_t f;
      if (shift >= 16) {
        f = (shift - 16) >= 64 ? 0 : (rem >> (shift - 16));
      } else {
        f = rem << (16 - shift);
      }
      up = f + r >= 65536u;
    }
  }
  qint += up ? 1u : 0u;
  const uint64_t code =
      e >= emin ? (static_cast<uint64_t>(e + fmt.bias - 1) << fmt.mant_bits) + qint : qint;
  return code > fmt.max_finite ? fmt.overflow_code : static_cast<uint32_t>(code);
}

// Encode an IEEE input (already split) into an IEEE-style target with inf (bf16, fp16, fp32):
// RNE or SR, overflow to inf, NaN keeps sign and leading payload with the quiet bit set.
GEMTB_HD inline uint32_t EncodeIeee(const ExactValue& v, BinaryFormat fmt, bool sr,
                                    uint32_t r) {
  const uint32_t sign = v.negative ? (1u << fmt.sign_shift) : 0u;
  const uint32_t inf = fmt.max_finite + 1u;
  switch (v.cls) {
    case ValueClass::kZero:
      return sign;
    case ValueClass::kInf:
      return sign | inf;
    case ValueClass::kNaN: {
      const uint32_t payload = static_cast<uint32_t>(v.payload >> (64 - fmt.mant_bits));
      return sign | inf | payload | (1u << (fmt.mant_bits - 1));
    }
    case ValueClass::kFinite:
      break;
  }
  return sign | RoundMagnitude(v.m, v.k, fmt, sr, r);
}

// Encode an IEEE input (already split) into a format without inf (fp8, fp6, fp4): RNE or SR,
// satfinite (finite values or ±inf beyond max give ±max, the sign of zero kept), NaN -> nan_code.
GEMTB_HD inline uint32_t EncodeSatfinite(const ExactValue& v, BinaryFormat fmt, uint32_t nan_code, bool sr,
                                         uint32_t r) {
  const uint32_t sign = v.negative ? (1u << fmt.sign_shift) : 0u;
  switch (v.cls) {
    case ValueClass::kNaN:
      return nan_code;
    case ValueClass::kZero:
      return sign;
    case ValueClass::kInf:
      return sign | fmt.max_finite;
    case ValueClass::kFinite:
      break;
  }
  return sign | RoundMagnitude(v.m, v.k, fmt, sr, r);
}

// Exact decode of an IEEE-style code (bf16, fp16) to fp32 bits: the target is wider in both
// exponent range and precision, so no rounding happens. NaNs keep sign and payload, quiet bit set.
GEMTB_HD inline uint32_t WidenIeeeToFp32Bits(uint32_t code, BinaryFormat fmt) {
  const int exp_bits = fmt.sign_shift - fmt.mant_bits;
  const uint32_t sign = ((code >> fmt.sign_shift) & 1u) << 31;
  const uint32_t exp_field = (code >> fmt.mant_bits) & ((1u << exp_bits) - 1u);
  const uint32_t frac = code & ((1u << fmt.mant_bits) - 1u);
  const int frac_shift = 23 - fmt.mant_bits;
  if (exp_field == (1u << exp_bits) - 1u) {  // inf or NaN
    return sign | 0x7F800000u | (frac << frac_shift) | (frac != 0 ? 0x400000u : 0u);
  }
  if (exp_field == 0) {
    if (frac == 0) return sign;
    // Subnormal frac·2^(1-bias-mant_bits): exact in fp32 (normal or subnormal) by RoundMagnitude.
    return sign | RoundMagnitude(frac, 1 - fmt.bias - fmt.mant_bits, Fp32Format(), false, 0);
  }
  const uint32_t fp32_exp = exp_field - static_cast<uint32_t>(fmt.bias) + 127u;
  return sign | (fp32_exp << 23) | (frac << frac_shift);
}

}  // namespace detail

// ---- bf16 ----

GEMTB_HD inline float Bf16BitsToFloat(uint16_t b) {
  return BitsToFloat(static_cast<uint32_t>(b) << 16);
}

// The classic carry trick: adding 0x7FFF plus the lowest kept bit rounds to nearest even, and a
// carry out of the fraction correctly bumps the exponent (max finite + half ulp → inf).
GEMTB_HD inline uint16_t FloatToBf16BitsRne(float x) {
  const uint32_t u = FloatToBits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN: keep sign/payload, set quiet bit
  }
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// One rounding straight from fp64: going through fp32 could double-round.
GEMTB_HD inline uint16_t DoubleToBf16BitsRne(double x) {
  return static_cast<uint16_t>(
      detail::EncodeIeee(detail::SplitDouble(x), detail::Bf16Format(), false, 0));
}

// ---- fp16 ----

GEMTB_HD inline float Fp16BitsToFloat(uint16_t h) {
  return BitsToFloat(detail::WidenIeeeToFp32Bits(h, detail::Fp16Format()));
}

GEMTB_HD inline uint16_t FloatToFp16BitsRne(float x) {
  return static_cast<uint16_t>(
      detail::EncodeIeee(detail::SplitFloat(x), detail::Fp16Format(), false, 0));
}

GEMTB_HD inline uint16_t DoubleToFp16BitsRne(double x) {
  return static_cast<uint16_t>(
      detail::EncodeIeee(detail::SplitDouble(x), detail::Fp16Format(), false, 0));
}

// ---- fp32 from fp64 (integer logic, so it does not depend on the FPU rounding mode) ----

GEMTB_HD inline float DoubleToFloatRne(double x) {
  return BitsToFloat(detail::EncodeIeee(detail::SplitDouble(x), detail::Fp32Format(), false, 0));
}

// ---- fp32 → fp64, exact, in integers (a cvt.f64.f32 would flush fp32 subnormals under -ftz=true) ----

GEMTB_HD inline double FloatToDoubleExact(float x) {
  const uint32_t u = FloatToBits(x);
  const uint64_t sign = static_cast<uint64_t>(u >> 31) << 63;
  const uint32_t be = (u >> 23) & 0xFFu;
  const uint64_t frac = u & 0x7FFFFFu;
  if (be == 0xFFu) {  // inf / NaN: payload kept, quiet bit set for NaN
    return BitsToDouble(sign | 0x7FF0000000000000ull | (frac << 29) |
                        (frac != 0 ? 0x0008000000000000ull : 0ull));
  }
  if (be == 0) {
    if (frac == 0) return BitsToDouble(sign);
    // frac·2^-149 with frac < 2^23: normalise so that the leading 1 lands on bit 52.
    const int msb = 63 - CountLeadingZeros64(frac);
    const uint64_t exp_field = static_cast<uint64_t>(msb - 149 + 1023);
    return BitsToDouble(sign | (exp_field << 52) | ((frac << (52 - msb)) & 0xFFFFFFFFFFFFFull));
  }
  return BitsToDouble(sign | (static_cast<uint64_t>(be - 127 + 1023) << 52) | (frac << 29));
}

// ---- convenience: round a double once and return the rounded value as a double ----

GEMTB_HD inline double RoundDoubleToBf16(double x) {
  return FloatToDoubleExact(Bf16BitsToFloat(DoubleToBf16BitsRne(x)));
}

GEMTB_HD inline double RoundDoubleToFp16(double x) {
  return FloatToDoubleExact(Fp16BitsToFloat(DoubleToFp16BitsRne(x)));
}

GEMTB_HD inline double RoundDoubleToFloat(double x) {
  return FloatToDoubleExact(DoubleToFloatRne(x));
}

}  // namespace gemtb::numerics
