// MX block scaling (OCP MX v1.0) for MXFP8, MXFP6 and MXFP4, bit-exact.
//
// A block of 32 elements (or a 32×32 square tile) shares one E8M0 scale 2^E (code E + 127; 0xFF =
// NaN). Elements are stored as RNE_satfinite(x · 2^-E) in E4M3, E5M2, E2M3, E3M2 or E2M1
// (mx_element.h), rounded once: the scaling only moves the exponent of the exact value m·2^k, so no
// intermediate fp32 (which could go subnormal and round twice) is formed. Absent tail elements of a
// partial block count as 0, i.e. they do not contribute to amax. A block holding NaN or ±inf gets
// scale 0xFF, and its element codes are all the code NaN converts to (fp8: the NaN code 0x7F; fp6 and
// fp4, which have no NaN: +max); every element of a NaN-scaled block decodes to NaN anyway.
//
// Two scale rules, with max the element format's largest finite value (448, 57344, 7.5, 28, 6):
// - RCEIL (NVIDIA/TransformerEngine default): r = fp32(amax · fp32(1/max)), E = clamp(ceil(log2 r),
//   -127, 127) read from r's bits; amax = 0 gives code 0. No flush-to-zero.
// - FLOOR (OCP): E = clamp(floor(log2 amax) - emax, -127, 127), emax = 8 (E4M3) / 15 (E5M2) /
//   2 (E2M3) / 4 (E3M2) / 2 (E2M1); elements beyond max saturate. amax = 0 gives code 0 (the clamp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "model/numerics/float_formats.h"
#include "model/numerics/host_device.h"
#include "model/numerics/mx_element.h"

namespace gemtb::numerics {

inline constexpr int kMxBlockSize = 32;
inline constexpr uint8_t kE8m0Nan = 0xFFu;

enum class MxScaleRule { kRceil, kFloor };

// ---- E8M0 ----

GEMTB_HD inline float E8m0ToFloat(uint8_t code) {
  if (code == kE8m0Nan) return BitsToFloat(0x7FC00000u);
  // 2^(code-127); code 0 is 2^-127, the fp32 subnormal 0x00400000.
  return BitsToFloat(code == 0 ? 0x00400000u : static_cast<uint32_t>(code) << 23);
}

GEMTB_HD inline double E8m0ToDouble(uint8_t code) {
  if (code == kE8m0Nan) return BitsToDouble(0x7FF8000000000000ull);
  return BitsToDouble(static_cast<uint64_t>(code - 127 + 1023) << 52);
}

// fp32(1/max): 1/448 = 0x3B124925, 1/57344 = 0x37924925 and 1/28 = 0x3D124925 (fp32(1/7) =
// 0x3E124925 scaled by 2^-6, 2^-13 and 2^-2), 1/6 = 0x3E2AAAAB, 1/7.5 = 0x3E088889; written as bits
// so host and device agree without relying on constant folding.
GEMTB_HD inline float MxInvMax(MxElement f) {
  switch (f) {
    case MxElement::kE4M3: return BitsToFloat(0x3B124925u);
    case MxElement::kE5M2: return BitsToFloat(0x37924925u);
    case MxElement::kE2M1: return BitsToFloat(0x3E2AAAABu);
    case MxElement::kE2M3: return BitsToFloat(0x3E088889u);
    case MxElement::kE3M2: break;
  }
  return BitsToFloat(0x3D124925u);
}

GEMTB_HD inline uint8_t E8m0ScaleRceil(float amax, MxElement f) {
  const uint32_t a = FloatToBits(amax) & 0x7FFFFFFFu;
  if (a >= 0x7F800000u) return kE8m0Nan;
  if (a == 0) return 0;
  // r = fp32(|amax| · fp32(1/max)): the exact product of the two significands (< 2^48) rounded once
  // to fp32, i.e. the IEEE fp32 product, computed in integers so that subnormal r stays exact even
  // in device code built with -ftz=true.
  const detail::ExactValue va = detail::SplitFloat(BitsToFloat(a));
  const detail::ExactValue vi = detail::SplitFloat(MxInvMax(f));
  const uint32_t rb =
      detail::RoundMagnitude(va.m * vi.m, va.k + vi.k, detail::Fp32Format(), false, 0);
  const int be = static_cast<int>(rb >> 23);
  const uint32_t mant = rb & 0x7FFFFFu;
  int e;  // ceil(log2 r), only as precise as the clamp at -127 needs
  if (be == 0) {
    e = mant > 0x400000u ? -126 : -127;  // r in (2^-127, 2^-126) → -126; r <= 2^-127 (or 0) → -127
  } else {
    e = be - 127 + (mant != 0 ? 1 : 0);
  }
  if (e > 127) e = 127;
  return static_cast<uint8_t>(e + 127);
}

GEMTB_HD inline uint8_t E8m0ScaleFloor(float amax, MxElement f) {
  const uint32_t a = FloatToBits(amax) & 0x7FFFFFFFu;
  if (a >= 0x7F800000u) return kE8m0Nan;
  if (a == 0) return 0;
  const int be = static_cast<int>(a >> 23);
  const int log2_floor = be != 0 ? be - 127 : -149 + (63 - CountLeadingZeros64(a));
  int e = log2_floor - MxElementEmax(f);
  if (e < -127) e = -127;
  if (e > 127) e = 127;
  return static_cast<uint8_t>(e + 127);
}

GEMTB_HD inline uint8_t E8m0Scale(float amax, MxElement f, MxScaleRule rule) {
  return rule == MxScaleRule::kRceil ? E8m0ScaleRceil(amax, f) : E8m0ScaleFloor(amax, f);
}

// ---- elements ----

// RNE_satfinite(x · 2^-E), one rounding. With sr, stochastic rounding with r instead
// (stochastic_rounding.h rule, saturating).
GEMTB_HD inline uint8_t MxEncodeElementImpl(float x, uint8_t scale, MxElement f, bool sr, uint16_t r) {
  if (scale == kE8m0Nan) return MxElementNanCode(f);
  detail::ExactValue v = detail::SplitFloat(x);
  v.k -= static_cast<int>(scale) - 127;
  return detail::EncodeMxElement(v, f, sr, r);
}

GEMTB_HD inline uint8_t MxEncodeElement(float x, uint8_t scale, MxElement f) {
  return MxEncodeElementImpl(x, scale, f, false, 0);
}

GEMTB_HD inline uint8_t MxEncodeElementSr(float x, uint8_t scale, MxElement f, uint16_t r) {
  return MxEncodeElementImpl(x, scale, f, true, r);
}

// element value · 2^E, exact in fp32 (element quanta times 2^-127 stay >= 2^-143), or ±inf beyond
// fp32 range, which a scale chosen by the rules above never produces.
GEMTB_HD inline float MxDecodeElement(uint8_t code, uint8_t scale, MxElement f) {
  if (scale == kE8m0Nan) return BitsToFloat(0x7FC00000u);
  const float v = MxElementToFloat(code, f);
  detail::ExactValue s = detail::SplitFloat(v);
  if (s.cls != detail::ValueClass::kFinite) return v;  // zero, inf, NaN are unchanged by scaling
  return BitsToFloat((s.negative ? 0x80000000u : 0u) |
                     detail::RoundMagnitude(s.m, s.k + static_cast<int>(scale) - 127,
                                            detail::Fp32Format(), false, 0));
}

// ---- 1-D blocks ----

// amax of n strided elements as fp32 magnitude bits: non-negative floats order like their bits,
// and any NaN (bits > 0x7F800000) or inf wins, which the scale rules map to 0xFF.
GEMTB_HD inline float MxBlockAmax(const float* x, int n, ptrdiff_t stride) {
  uint32_t amax = 0;
  for (int i = 0; i < n; ++i) {
    const uint32_t a = FloatToBits(x[i * stride]) & 0x7FFFFFFFu;
    amax = a > amax ? a : amax;
  }
  return BitsToFloat(amax);
}

// Quantise one block of n <= 32 elements x[i·stride] into codes[i·code_stride]; returns the scale.
// sr_bits (may be null) selects stochastic rounding with sr_bits[i] for element i.
GEMTB_HD inline uint8_t MxQuantizeBlockStrided(const float* x, int n, ptrdiff_t stride, MxElement f,
                                               MxScaleRule rule, uint8_t* codes,
                                               ptrdiff_t code_stride,
                                               const uint16_t* sr_bits = nullptr) {
  const uint8_t scale = E8m0Scale(MxBlockAmax(x, n, stride), f, rule);
  for (int i = 0; i < n; ++i) {
    codes[i * code_stride] = MxEncodeElementImpl(x[i * stride], scale, f, sr_bits != nullptr,
                                                 sr_bits != nullptr ? sr_bits[i] : uint16_t{0});
  }
  return scale;
}

GEMTB_HD inline uint8_t MxQuantizeBlock(const float* x, int n, MxElement f, MxScaleRule rule,
                                        uint8_t* codes) {
  return MxQuantizeBlockStrided(x, n, 1, f, rule, codes, 1);
}

GEMTB_HD inline uint8_t MxQuantizeBlockSr(const float* x, int n, MxElement f, MxScaleRule rule,
                                          const uint16_t* sr_bits, uint8_t* codes) {
  return MxQuantizeBlockStrided(x, n, 1, f, rule, codes, 1, sr_bits);
}

GEMTB_HD inline void MxDequantizeBlock(const uint8_t* codes, int n, uint8_t scale, MxElement f,
                                       float* out) {
  for (int i = 0; i < n; ++i) out[i] = MxDecodeElement(codes[i], scale, f);
}

// ---- 32×32 square blocks of a row-major [rows, cols] matrix ----
//
// Tile (bi, bj) covers rows [32·bi, min(32·bi+32, rows)) and the same for columns; tails are
// partial. codes has the matrix's layout; scales is row-major [ceil(rows/32), ceil(cols/32)].
// amax ignores the order of elements, so the transpose gets the transposed codes and scales.

GEMTB_HD inline int MxNumBlocks(int n) { return (n + kMxBlockSize - 1) / kMxBlockSize; }

GEMTB_HD inline uint8_t MxQuantizeSquareTile(const float* x, int rows, int cols, int bi, int bj,
                                             MxElement f, MxScaleRule rule, uint8_t* codes) {
  const int r0 = bi * kMxBlockSize;
  const int c0 = bj * kMxBlockSize;
  const int nr = rows - r0 < kMxBlockSize ? rows - r0 : kMxBlockSize;
  const int nc = cols - c0 < kMxBlockSize ? cols - c0 : kMxBlockSize;
  uint32_t amax = 0;
  for (int i = 0; i < nr; ++i) {
    const float* row = x + static_cast<ptrdiff_t>(r0 + i) * cols + c0;
    const uint32_t a = FloatToBits(MxBlockAmax(row, nc, 1));
    amax = a > amax ? a : amax;
  }
  const uint8_t scale = E8m0Scale(BitsToFloat(amax), f, rule);
  for (int i = 0; i < nr; ++i) {
    const ptrdiff_t base = static_cast<ptrdiff_t>(r0 + i) * cols + c0;
    for (int j = 0; j < nc; ++j) codes[base + j] = MxEncodeElement(x[base + j], scale, f);
  }
  return scale;
}

GEMTB_HD inline void MxQuantizeSquareBlocks(const float* x, int rows, int cols, MxElement f,
                                            MxScaleRule rule, uint8_t* codes, uint8_t* scales) {
  const int nbr = MxNumBlocks(rows);
  const int nbc = MxNumBlocks(cols);
  for (int bi = 0; bi < nbr; ++bi) {
    for (int bj = 0; bj < nbc; ++bj) {
      scales[bi * nbc + bj] = MxQuantizeSquareTile(x, rows, cols, bi, bj, f, rule, codes);
    }
  }
}

GEMTB_HD inline void MxDequantizeSquareBlocks(const uint8_t* codes, const uint8_t* scales, int rows,
                                              int cols, MxElement f, float* out) {
  const int nbc = MxNumBlocks(cols);
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; ++j) {
      const ptrdiff_t idx = static_cast<ptrdiff_t>(i) * cols + j;
      out[idx] = MxDecodeElement(codes[idx], scales[(i / kMxBlockSize) * nbc + j / kMxBlockSize], f);
    }
  }
}

}  // namespace gemtb::numerics
