// MX block scaling (model/numerics/mx.h) against the format definitions.
#include "model/numerics/mx.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "model/numerics/fp8.h"
#include "model/numerics/stochastic_rounding.h"
#include "tests/numerics/independent_reference.h"

namespace gemtb::numerics {
namespace {

using testing::RefNearestCode;
using testing::RefPositiveFiniteTable;

constexpr MxElement kFormats[] = {MxElement::kE4M3, MxElement::kE5M2, MxElement::kE2M3, MxElement::kE3M2,
                                  MxElement::kE2M1};
constexpr MxScaleRule kRules[] = {MxScaleRule::kRceil, MxScaleRule::kFloor};

// Written from the format definitions (OFP8, OCP MX v1.0), not read from the code under test.
double MaxOf(MxElement f) {
  switch (f) {
    case MxElement::kE4M3: return 448.0;
    case MxElement::kE5M2: return 57344.0;
    case MxElement::kE2M3: return 7.5;
    case MxElement::kE3M2: return 28.0;
    case MxElement::kE2M1: return 6.0;
  }
  return 0.0;
}
int EmaxOf(MxElement f) {
  switch (f) {
    case MxElement::kE4M3: return 8;
    case MxElement::kE5M2: return 15;
    case MxElement::kE2M3: return 2;
    case MxElement::kE3M2: return 4;
    case MxElement::kE2M1: return 2;
  }
  return 0;
}
testing::FieldFormat FieldsOf(MxElement f) {
  switch (f) {
    case MxElement::kE4M3: return testing::kRefE4m3;
    case MxElement::kE5M2: return testing::kRefE5m2;
    case MxElement::kE2M3: return testing::kRefE2m3;
    case MxElement::kE3M2: return testing::kRefE3m2;
    case MxElement::kE2M1: return testing::kRefE2m1;
  }
  return testing::kRefE4m3;
}
// Whether a code decodes to NaN by the format definition (fp6 and fp4 have no NaN).
bool IsNanCode(uint8_t code, MxElement f) { return std::isnan(testing::RefDecode(code, FieldsOf(f))); }
bool HasNan(MxElement f) { return FieldsOf(f).specials != testing::Specials::kNone; }
// The largest finite magnitude code and the sign bit, by the field layout.
uint8_t MaxCodeOf(MxElement f) { return static_cast<uint8_t>(RefPositiveFiniteTable(FieldsOf(f)).size() - 1); }
uint32_t SignBitOf(MxElement f) { return 1u << (FieldsOf(f).exp_bits + FieldsOf(f).mant_bits); }

// Independent scale rules: log2 read with std::frexp (x = m·2^ex, m in [0.5, 1)), not from bits.
int ClampE(int e) { return std::clamp(e, -127, 127); }
uint8_t RefRceil(float amax, MxElement f) {
  if (!std::isfinite(amax)) return 0xFF;
  const float inv = static_cast<float>(1.0 / MaxOf(f));  // fp32(1/max): see InverseMaxIsTheFp32Reciprocal
  const float r = std::fabs(amax) * inv;
  if (r == 0.0f) return 0;
  int ex = 0;
  const float m = std::frexp(r, &ex);
  const int ceil_log2 = m > 0.5f ? ex : ex - 1;
  return static_cast<uint8_t>(ClampE(ceil_log2) + 127);
}
uint8_t RefFloor(float amax, MxElement f) {
  if (!std::isfinite(amax)) return 0xFF;
  if (amax == 0.0f) return 0;
  int ex = 0;
  std::frexp(std::fabs(amax), &ex);
  return static_cast<uint8_t>(ClampE((ex - 1) - EmaxOf(f)) + 127);
}

TEST(Mx, AllE8m0CodesDecode) {
  for (int c = 0; c < 255; ++c) {
    EXPECT_EQ(E8m0ToFloat(static_cast<uint8_t>(c)), std::ldexp(1.0f, c - 127)) << c;
    EXPECT_EQ(E8m0ToDouble(static_cast<uint8_t>(c)), std::ldexp(1.0, c - 127)) << c;
  }
  EXPECT_TRUE(std::isnan(E8m0ToFloat(0xFF)));
  EXPECT_TRUE(std::isnan(E8m0ToDouble(0xFF)));
  EXPECT_EQ(std::bit_cast<uint32_t>(E8m0ToFloat(0)), 0x00400000u);  // 2^-127 is an fp32 subnormal
}

// fp32(1/max) for max = 448, 57344, 7.5, 28, 6: 1/7, 2/15 and 1/3 are repeating binary fractions
// that round once in fp64 far from an fp32 tie, so (float)(1.0/max) is the correctly rounded fp32
// reciprocal; a runtime fp32 division agrees.
TEST(Mx, InverseMaxIsTheFp32Reciprocal) {
  for (const MxElement f : kFormats) {
    volatile float max = static_cast<float>(MaxOf(f));
    EXPECT_EQ(MxInvMax(f), 1.0f / max) << MaxOf(f);
    EXPECT_EQ(MxInvMax(f), static_cast<float>(1.0 / MaxOf(f))) << MaxOf(f);
  }
}

// amax = max·2^k exactly and ±1 ulp. Since max·fp32(1/max) is 1 + 3·2^-26 (448, 57344, 28),
// 1 + 7·2^-27 (7.5) or 1 + 2^-25 (6), which round to 1 in fp32, RCEIL gives E = k at max·2^k and
// below, and k+1 one ulp above (r becomes 1 + 2^-23 > 1).
// FLOOR gives k for all three (floor(log2) stays emax + k). Hand-derived; valid while r is normal.
TEST(Mx, ScalesAtMaxTimesPowersOfTwo) {
  for (const MxElement f : kFormats) {
    for (int k = -126; k <= 127; ++k) {
      const double exact = std::ldexp(MaxOf(f), k);
      if (exact > std::numeric_limits<float>::max()) break;
      const float amax = static_cast<float>(exact);
      ASSERT_EQ(static_cast<double>(amax), exact);
      const float up = std::nextafter(amax, std::numeric_limits<float>::infinity());
      const float down = std::nextafter(amax, 0.0f);
      const auto code = [](int e) { return static_cast<uint8_t>(ClampE(e) + 127); };
      EXPECT_EQ(E8m0ScaleRceil(amax, f), code(k)) << k;
      EXPECT_EQ(E8m0ScaleRceil(down, f), code(k)) << k;
      EXPECT_EQ(E8m0ScaleRceil(up, f), code(k + 1)) << k;
      EXPECT_EQ(E8m0ScaleFloor(amax, f), code(k)) << k;
      EXPECT_EQ(E8m0ScaleFloor(down, f), code(k)) << k;
      EXPECT_EQ(E8m0ScaleFloor(up, f), code(k)) << k;
      for (const float a : {amax, up, down}) {
        EXPECT_EQ(E8m0ScaleRceil(a, f), RefRceil(a, f)) << k;
        EXPECT_EQ(E8m0ScaleFloor(a, f), RefFloor(a, f)) << k;
      }
      // The block maximum then encodes to max (or saturates to it) and nothing overflows.
      EXPECT_EQ(MxEncodeElement(amax, E8m0ScaleRceil(amax, f), f), MaxCodeOf(f)) << k;
      EXPECT_EQ(MxEncodeElement(amax, E8m0ScaleFloor(amax, f), f), MaxCodeOf(f)) << k;
    }
  }
}

TEST(Mx, ZeroAndSubnormalAmax) {
  for (const MxElement f : kFormats) {
    for (const float zero : {0.0f, -0.0f}) {
      EXPECT_EQ(E8m0ScaleRceil(zero, f), 0u);
      EXPECT_EQ(E8m0ScaleFloor(zero, f), 0u);
    }
    EXPECT_EQ(E8m0ScaleRceil(0x1p-149f, f), 0u);  // r underflows to 0
    EXPECT_EQ(E8m0ScaleFloor(0x1p-149f, f), 0u);  // -149 - emax clamps to -127
    EXPECT_EQ(E8m0ScaleFloor(std::ldexp(1.0f, -127 + EmaxOf(f)), f), 0u);
    EXPECT_EQ(E8m0ScaleFloor(std::ldexp(1.0f, -126 + EmaxOf(f)), f), 1u);
    const auto max_times = [&](double m, int k) { return static_cast<float>(std::ldexp(m * MaxOf(f), k)); };
    // r = 2^-127 exactly (subnormal): code 0; r just above 2^-127: E = -126, code 1.
    EXPECT_EQ(E8m0ScaleRceil(max_times(1.0, -127), f), 0u);
    EXPECT_EQ(E8m0ScaleRceil(max_times(449.0 / 448.0, -127), f), 1u);
    EXPECT_EQ(E8m0ScaleRceil(max_times(1.0, -126), f), 1u);
    // Every subnormal amax and the subnormal/normal seam, against the frexp reference.
    for (uint32_t bits = 1; bits < 0x00800000u; bits = bits * 3 + 1) {
      const float a = std::bit_cast<float>(bits);
      EXPECT_EQ(E8m0ScaleRceil(a, f), RefRceil(a, f)) << std::hex << bits;
      EXPECT_EQ(E8m0ScaleFloor(a, f), RefFloor(a, f)) << std::hex << bits;
    }
  }
}

// Every exponent field with fraction patterns around the RCEIL rounding seams, plus random.
TEST(Mx, ScalesMatchFrexpReferenceAcrossTheRange) {
  std::mt19937 rng(31);
  for (const MxElement f : kFormats) {
    for (uint32_t be = 0; be < 255; ++be) {
      for (const uint32_t frac : {0u, 1u, 2u, 0x124925u, 0x124926u, 0x3FFFFFu, 0x400000u, 0x400001u,
                                  0x600000u, 0x7FFFFEu, 0x7FFFFFu, static_cast<uint32_t>(rng() & 0x7FFFFFu)}) {
        const float a = std::bit_cast<float>((be << 23) | frac);
        ASSERT_EQ(E8m0ScaleRceil(a, f), RefRceil(a, f)) << std::hexfloat << a;
        ASSERT_EQ(E8m0ScaleFloor(a, f), RefFloor(a, f)) << std::hexfloat << a;
        ASSERT_EQ(E8m0ScaleRceil(-a, f), RefRceil(a, f)) << std::hexfloat << a;
      }
    }
  }
}

TEST(Mx, NanOrInfBlockGetsNanScale) {
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()};
  for (const MxElement f : kFormats) {
    for (const MxScaleRule rule : kRules) {
      EXPECT_EQ(E8m0Scale(std::numeric_limits<float>::infinity(), f, rule), 0xFFu);
      EXPECT_EQ(E8m0Scale(std::numeric_limits<float>::quiet_NaN(), f, rule), 0xFFu);
      for (const float special : specials) {
        std::vector<float> x(32, 1.5f);
        x[17] = special;
        std::vector<uint8_t> codes(32);
        ASSERT_EQ(MxQuantizeBlock(x.data(), 32, f, rule, codes.data()), 0xFFu);
        std::vector<float> back(32);
        MxDequantizeBlock(codes.data(), 32, 0xFF, f, back.data());
        for (int i = 0; i < 32; ++i) {
          // fp8: the NaN code; fp6/fp4 have none and store +max, which the NaN scale overrides.
          if (HasNan(f)) {
            EXPECT_TRUE(IsNanCode(codes[i], f));
          } else {
            EXPECT_EQ(codes[i], MaxCodeOf(f));
          }
          EXPECT_TRUE(std::isnan(back[i]));
        }
      }
    }
  }
}

// Inputs for FP8: N(0,1) + N(0,100)·Bernoulli(0.001), plus a block of tiny values.
std::vector<float> Fa3Inputs(int n, std::mt19937_64& rng) {
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::normal_distribution<float> n100(0.0f, 100.0f);
  std::bernoulli_distribution outlier(0.001);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = n01(rng) + (outlier(rng) ? n100(rng) : 0.0f);
  return x;
}

// Each element is the one RNE_satfinite rounding of x·2^-E (exact in fp64), by nearest search on
// the fp8 table; and dequantise(quantise(x)) is within half a step of x (or saturated to max).
TEST(Mx, ElementsRoundOnceAndDequantizeWithinHalfAStep) {
  std::mt19937_64 rng(41);
  for (const MxElement f : kFormats) {
    const std::vector<double> table = RefPositiveFiniteTable(FieldsOf(f));
    const int mant = FieldsOf(f).mant_bits;
    const double min_sub = table[1];
    for (const MxScaleRule rule : kRules) {
      for (int blk = 0; blk < 3000; ++blk) {
        std::vector<float> x = Fa3Inputs(32, rng);
        const double scale_mul = std::ldexp(1.0, static_cast<int>(rng() % 160) - 80);
        for (float& v : x) v = static_cast<float>(v * scale_mul);
        const int n = 1 + static_cast<int>(rng() % 32);  // partial blocks too
        std::vector<uint8_t> codes(32);
        const uint8_t scale = MxQuantizeBlock(x.data(), n, f, rule, codes.data());
        ASSERT_NE(scale, 0xFFu);
        const int e = static_cast<int>(scale) - 127;
        std::vector<float> back(32);
        MxDequantizeBlock(codes.data(), n, scale, f, back.data());
        for (int i = 0; i < n; ++i) {
          const double scaled = std::ldexp(static_cast<double>(x[i]), -e);
          uint32_t mag = RefNearestCode(std::fabs(scaled), table);
          const bool saturated = mag >= table.size() - 1 && std::fabs(scaled) > table.back();
          if (mag >= table.size()) mag = static_cast<uint32_t>(table.size() - 1);
          const uint8_t expected = static_cast<uint8_t>(mag | (std::signbit(x[i]) ? SignBitOf(f) : 0u));
          ASSERT_EQ(codes[i], expected) << std::hexfloat << x[i] << " E=" << std::dec << e;
          const double err = std::fabs(static_cast<double>(back[i]) - static_cast<double>(x[i]));
          const double a = std::fabs(static_cast<double>(x[i]));
          if (saturated) {
            EXPECT_EQ(std::fabs(static_cast<double>(back[i])), std::ldexp(table.back(), e));
          } else {
            // half a step: relative 2^-(mant+1) for normals, half the min subnormal below
            const double bound = std::max(a * std::ldexp(1.0, -(mant + 1)), std::ldexp(min_sub / 2, e));
            EXPECT_LE(err, bound) << std::hexfloat << x[i];
          }
        }
        // RCEIL never saturates by more than its fp32 rounding of r; FLOOR's max element lies in
        // [2^emax, 2^(emax+1)) before saturation. Either way the largest code is near the top.
        uint8_t top = 0;
        for (int i = 0; i < n; ++i) top = std::max<uint8_t>(top, static_cast<uint8_t>(codes[i] & (SignBitOf(f) - 1)));
        if (n > 0 && std::bit_cast<uint32_t>(MxBlockAmax(x.data(), n, 1)) != 0) {
          EXPECT_GE(testing::RefDecode(top, FieldsOf(f)), MaxOf(f) / 2.0) << "scale too coarse";
        }
      }
    }
  }
}

TEST(Mx, PartialBlockTailCountsAsZero) {
  std::mt19937_64 rng(51);
  for (const MxElement f : kFormats) {
    for (const MxScaleRule rule : kRules) {
      for (int n = 0; n <= 32; ++n) {
        std::vector<float> x = Fa3Inputs(32, rng);
        std::vector<float> padded(32, 0.0f);
        std::copy(x.begin(), x.begin() + n, padded.begin());
        std::vector<uint8_t> a(32, 0xAA);
        std::vector<uint8_t> b(32, 0xAA);
        EXPECT_EQ(MxQuantizeBlock(x.data(), n, f, rule, a.data()),
                  MxQuantizeBlock(padded.data(), 32, f, rule, b.data()));
        for (int i = 0; i < n; ++i) EXPECT_EQ(a[i], b[i]);
        for (int i = n; i < 32; ++i) EXPECT_EQ(a[i], 0xAA) << "absent elements are not written";
      }
    }
  }
}

TEST(Mx, StridedBlockEqualsGatheredBlock) {
  std::mt19937_64 rng(52);
  std::vector<float> m = Fa3Inputs(32 * 7, rng);  // column 3 of a [32, 7] row-major matrix
  std::vector<float> col(32);
  for (int i = 0; i < 32; ++i) col[static_cast<size_t>(i)] = m[static_cast<size_t>(i * 7 + 3)];
  std::vector<uint8_t> strided(32 * 7, 0);
  std::vector<uint8_t> gathered(32);
  const uint8_t s1 = MxQuantizeBlockStrided(m.data() + 3, 32, 7, MxElement::kE4M3,
                                            MxScaleRule::kRceil, strided.data() + 3, 7);
  const uint8_t s2 = MxQuantizeBlock(col.data(), 32, MxElement::kE4M3, MxScaleRule::kRceil,
                                     gathered.data());
  EXPECT_EQ(s1, s2);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(strided[static_cast<size_t>(i * 7 + 3)], gathered[static_cast<size_t>(i)]);
}

// A 32×32 tile and its transpose: transposed codes, the same scale; tails partial.
TEST(Mx, SquareBlocksOfTransposeGiveTransposedCodesAndSameScales) {
  std::mt19937_64 rng(61);
  const int rows = 70;
  const int cols = 45;
  std::vector<float> x = Fa3Inputs(rows * cols, rng);
  // Make tiles differ in magnitude so that scales differ between tiles.
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; ++j) x[static_cast<size_t>(i * cols + j)] *= static_cast<float>(1 << ((i / 32) * 3 + (j / 32)));
  }
  std::vector<float> xt(x.size());
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; ++j) xt[static_cast<size_t>(j * rows + i)] = x[static_cast<size_t>(i * cols + j)];
  }
  for (const MxElement f : kFormats) {
    for (const MxScaleRule rule : kRules) {
      const int nbr = MxNumBlocks(rows);
      const int nbc = MxNumBlocks(cols);
      ASSERT_EQ(nbr, 3);
      ASSERT_EQ(nbc, 2);
      std::vector<uint8_t> codes(x.size()), codes_t(x.size());
      std::vector<uint8_t> scales(static_cast<size_t>(nbr * nbc)), scales_t(scales.size());
      MxQuantizeSquareBlocks(x.data(), rows, cols, f, rule, codes.data(), scales.data());
      MxQuantizeSquareBlocks(xt.data(), cols, rows, f, rule, codes_t.data(), scales_t.data());
      for (int i = 0; i < rows; ++i) {
        for (int j = 0; j < cols; ++j) {
          ASSERT_EQ(codes[static_cast<size_t>(i * cols + j)], codes_t[static_cast<size_t>(j * rows + i)]);
        }
      }
      for (int bi = 0; bi < nbr; ++bi) {
        for (int bj = 0; bj < nbc; ++bj) {
          EXPECT_EQ(scales[static_cast<size_t>(bi * nbc + bj)], scales_t[static_cast<size_t>(bj * nbr + bi)]);
          // and the scale is the rule applied to the tile's amax
          float amax = 0.0f;
          for (int i = bi * 32; i < std::min(rows, bi * 32 + 32); ++i) {
            for (int j = bj * 32; j < std::min(cols, bj * 32 + 32); ++j) {
              amax = std::max(amax, std::fabs(x[static_cast<size_t>(i * cols + j)]));
            }
          }
          EXPECT_EQ(scales[static_cast<size_t>(bi * nbc + bj)], E8m0Scale(amax, f, rule));
        }
      }
      // Distinct tiles got distinct scales (otherwise the check above is weak).
      EXPECT_NE(scales[0], scales[static_cast<size_t>(nbr * nbc - 1)]);
      // Dequantise: each element uses its tile's scale.
      std::vector<float> back(x.size());
      MxDequantizeSquareBlocks(codes.data(), scales.data(), rows, cols, f, back.data());
      for (int i = 0; i < rows; ++i) {
        for (int j = 0; j < cols; ++j) {
          const size_t idx = static_cast<size_t>(i * cols + j);
          EXPECT_EQ(back[idx], MxDecodeElement(codes[idx], scales[static_cast<size_t>((i / 32) * nbc + j / 32)], f));
        }
      }
    }
  }
}

// Decoding is exact: code value (by the format definition) × 2^E.
TEST(Mx, DecodeIsExactScaling) {
  for (const MxElement f : kFormats) {
    for (const int scale : {0, 1, 20, 127, 130, 200, 254}) {
      for (uint32_t c = 0; c < 2 * SignBitOf(f); ++c) {
        const double v = testing::RefDecode(c, FieldsOf(f));
        const float got = MxDecodeElement(static_cast<uint8_t>(c), static_cast<uint8_t>(scale), f);
        if (std::isnan(v)) {
          EXPECT_TRUE(std::isnan(got));
          continue;
        }
        const double expected = std::ldexp(v, scale - 127);
        if (std::fabs(expected) > std::numeric_limits<float>::max()) {
          EXPECT_TRUE(std::isinf(got)) << c << " " << scale;
        } else {
          EXPECT_EQ(static_cast<double>(got), expected) << c << " " << scale;
          EXPECT_EQ(std::signbit(got), std::signbit(v));
        }
      }
    }
  }
}

// SR element encoding = the element format's SR of x·2^-E (exact here), for all r on a few elements.
TEST(Mx, StochasticElementEncodeScalesThenRounds) {
  for (const MxElement f : kFormats) {
    for (const float x : {1.3f, -0.0071f, 300.7f, 3.3e-5f}) {
      for (const int scale : {120, 127, 131}) {
        const float scaled = std::ldexp(x, -(scale - 127));
        for (uint32_t r = 0; r < 65536; r += 7) {
          ASSERT_EQ(MxEncodeElementSr(x, static_cast<uint8_t>(scale), f, static_cast<uint16_t>(r)),
                    FloatToMxElementSr(scaled, f, static_cast<uint16_t>(r)));
        }
      }
    }
    // Block form with per-element bits
    std::vector<float> x = {1.3f, -2.7f, 0.01f, 5.0f};
    std::vector<uint16_t> bits = {0, 0xFFFF, 0x8000, 0x1234};
    std::vector<uint8_t> codes(4);
    const uint8_t s = MxQuantizeBlockSr(x.data(), 4, f, MxScaleRule::kRceil, bits.data(), codes.data());
    for (int i = 0; i < 4; ++i) EXPECT_EQ(codes[static_cast<size_t>(i)], MxEncodeElementSr(x[static_cast<size_t>(i)], s, f, bits[static_cast<size_t>(i)]));
  }
}

}  // namespace
}  // namespace gemtb::numerics
