// FP8 E4M3fn / E5M2 codecs (model/numerics/fp8.h) against the format definitions.
#include "model/numerics/fp8.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tests/numerics/independent_reference.h"

namespace gemtb::numerics {
namespace {

using testing::kRefE4m3;
using testing::kRefE5m2;
using testing::RefDecode;
using testing::RefNearestCode;
using testing::RefPositiveFiniteTable;

void ExpectDecodesTo(double expected, float got, uint32_t code) {
  if (std::isnan(expected)) {
    EXPECT_TRUE(std::isnan(got)) << std::hex << code;
    return;
  }
  EXPECT_EQ(static_cast<double>(got), expected) << std::hex << code;
  EXPECT_EQ(std::signbit(got), std::signbit(expected)) << std::hex << code;
}

TEST(Fp8, AllE4m3CodesDecodeToTable) {
  int nans = 0;
  for (uint32_t c = 0; c < 256; ++c) {
    const double expected = RefDecode(c, kRefE4m3);
    nans += std::isnan(expected) ? 1 : 0;
    ExpectDecodesTo(expected, E4m3ToFloat(static_cast<uint8_t>(c)), c);
    ExpectDecodesTo(expected, Fp8ToFloat(static_cast<uint8_t>(c), Fp8Format::kE4M3), c);
    EXPECT_EQ(Fp8IsNan(static_cast<uint8_t>(c), Fp8Format::kE4M3), std::isnan(expected));
  }
  EXPECT_EQ(nans, 2);  // 0x7F and 0xFF only
  EXPECT_EQ(E4m3ToFloat(0x7E), 448.0f);
  EXPECT_EQ(E4m3ToFloat(0x01), 0x1p-9f);
  EXPECT_EQ(E4m3ToFloat(0x08), 0x1p-6f);
}

TEST(Fp8, AllE5m2CodesDecodeToTable) {
  int nans = 0;
  int infs = 0;
  for (uint32_t c = 0; c < 256; ++c) {
    const double expected = RefDecode(c, kRefE5m2);
    nans += std::isnan(expected) ? 1 : 0;
    infs += std::isinf(expected) ? 1 : 0;
    ExpectDecodesTo(expected, E5m2ToFloat(static_cast<uint8_t>(c)), c);
    ExpectDecodesTo(expected, Fp8ToFloat(static_cast<uint8_t>(c), Fp8Format::kE5M2), c);
    EXPECT_EQ(Fp8IsNan(static_cast<uint8_t>(c), Fp8Format::kE5M2), std::isnan(expected));
  }
  EXPECT_EQ(nans, 6);
  EXPECT_EQ(infs, 2);
  EXPECT_EQ(E5m2ToFloat(0x7B), 57344.0f);
  EXPECT_EQ(E5m2ToFloat(0x01), 0x1p-16f);
  EXPECT_EQ(E5m2ToFloat(0x7C), std::numeric_limits<float>::infinity());
}

// Every finite code re-encodes to itself (from fp32 and from fp64), NaN to NaN. Under satfinite,
// E5M2's ±inf codes re-encode to ±max: that is the one intended exception.
TEST(Fp8, AllCodesReencodeToSameCode) {
  for (const Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    for (uint32_t c = 0; c < 256; ++c) {
      const auto code = static_cast<uint8_t>(c);
      const float v = Fp8ToFloat(code, f);
      const uint8_t back = FloatToFp8Rne(v, f);
      const uint8_t back_d = DoubleToFp8Rne(static_cast<double>(v), f);
      if (std::isnan(v)) {
        EXPECT_TRUE(Fp8IsNan(back, f)) << std::hex << c;
        EXPECT_TRUE(Fp8IsNan(back_d, f)) << std::hex << c;
      } else if (std::isinf(v)) {
        EXPECT_EQ(back, (code & 0x80u) | 0x7Bu) << std::hex << c;
        EXPECT_EQ(back_d, (code & 0x80u) | 0x7Bu) << std::hex << c;
      } else {
        EXPECT_EQ(back, code) << std::hex << c;
        EXPECT_EQ(back_d, code) << std::hex << c;
      }
    }
  }
}

TEST(Fp8, E4m3Edges) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToE4m3Rne(0x1p-10f), 0x00u);      // half the min subnormal: tie to even 0
  EXPECT_EQ(FloatToE4m3Rne(-0x1p-10f), 0x80u);     // sign of zero kept
  EXPECT_EQ(FloatToE4m3Rne(3 * 0x1p-10f), 0x02u);  // 1.5 min subnormals: tie to even 2
  EXPECT_EQ(FloatToE4m3Rne(0x1p-10f + 0x1p-30f), 0x01u);
  EXPECT_EQ(FloatToE4m3Rne(464.0f), 0x7Eu);  // tie between 448 and the NaN slot's 480
  EXPECT_EQ(FloatToE4m3Rne(1e6f), 0x7Eu);
  EXPECT_EQ(FloatToE4m3Rne(inf), 0x7Eu);
  EXPECT_EQ(FloatToE4m3Rne(-464.0f), 0xFEu);
  EXPECT_EQ(FloatToE4m3Rne(-inf), 0xFEu);
  EXPECT_EQ(FloatToE4m3Rne(std::numeric_limits<float>::max()), 0x7Eu);
  EXPECT_EQ(DoubleToE4m3Rne(1e300), 0x7Eu);
  EXPECT_EQ(FloatToE4m3Rne(448.0f), 0x7Eu);
  EXPECT_EQ(FloatToE4m3Rne(432.0f), 0x7Eu);  // tie 416/448 → 448 (even mantissa 110)
  EXPECT_EQ(FloatToE4m3Rne(0x1p-6f), 0x08u);
  EXPECT_EQ(FloatToE4m3Rne(std::numeric_limits<float>::quiet_NaN()), 0x7Fu);
  EXPECT_TRUE(Fp8IsNan(FloatToE4m3Rne(-std::numeric_limits<float>::quiet_NaN()), Fp8Format::kE4M3));
}

TEST(Fp8, E5m2EdgesSaturate) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToE5m2Rne(57344.0f), 0x7Bu);
  EXPECT_EQ(FloatToE5m2Rne(61440.0f), 0x7Bu);  // tie 57344/65536 would round to inf: saturates
  EXPECT_EQ(FloatToE5m2Rne(61439.0f), 0x7Bu);
  EXPECT_EQ(FloatToE5m2Rne(1e9f), 0x7Bu);
  EXPECT_EQ(FloatToE5m2Rne(inf), 0x7Bu);
  EXPECT_EQ(FloatToE5m2Rne(-inf), 0xFBu);
  EXPECT_EQ(FloatToE5m2Rne(0x1p-16f), 0x01u);
  EXPECT_EQ(FloatToE5m2Rne(0x1p-17f), 0x00u);
  EXPECT_EQ(FloatToE5m2Rne(-0x1p-17f), 0x80u);
  EXPECT_EQ(FloatToE5m2Rne(3 * 0x1p-17f), 0x02u);
  EXPECT_EQ(FloatToE5m2Rne(1.125f), 0x3Cu);  // tie 1/1.25 → 1 (even)
  EXPECT_EQ(FloatToE5m2Rne(1.375f), 0x3Eu);  // tie 1.25/1.5 → 1.5 (even)
  EXPECT_TRUE(Fp8IsNan(FloatToE5m2Rne(std::numeric_limits<float>::quiet_NaN()), Fp8Format::kE5M2));
  EXPECT_TRUE(Fp8IsNan(DoubleToE5m2Rne(-std::numeric_limits<double>::quiet_NaN()),
                       Fp8Format::kE5M2));
}

// Nearest-even by brute-force search over the value table, saturating. `a` >= 0.
uint8_t RefFp8(double a, const std::vector<double>& table) {
  const uint32_t code = RefNearestCode(a, table);
  return static_cast<uint8_t>(code >= table.size() ? table.size() - 1 : code);
}

// Floats that exercise every rounding decision: every fp32 binade from far below the smallest
// subnormal to far above max, every value of the fraction bits that survive plus the first two
// dropped bits, with the remaining 17 bits 0, 1, half-1, half, max; then random floats.
TEST(Fp8, RneMatchesNearestSearchOnStructuredAndRandomFloats) {
  for (const Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    const std::vector<double> table =
        RefPositiveFiniteTable(f == Fp8Format::kE4M3 ? kRefE4m3 : kRefE5m2);
    const auto check = [&](float x) {
      const uint8_t expected_mag = RefFp8(std::fabs(static_cast<double>(x)), table);
      const auto expected = static_cast<uint8_t>(expected_mag | (std::signbit(x) ? 0x80u : 0u));
      ASSERT_EQ(FloatToFp8Rne(x, f), expected) << std::hexfloat << x;
      ASSERT_EQ(DoubleToFp8Rne(static_cast<double>(x), f), expected) << std::hexfloat << x;
      ASSERT_EQ(f == Fp8Format::kE4M3 ? FloatToE4m3Rne(x) : FloatToE5m2Rne(x), expected);
    };
    for (uint32_t be = 0; be < 255; ++be) {
      // The top 6 fraction bits cover the kept bits (<= 3), the round bit and one more.
      for (uint32_t top = 0; top < 64; ++top) {
        for (const uint32_t low : {0u, 1u, 0xFFFFu, 0x10000u, 0x1FFFFu}) {
          const uint32_t bits = (be << 23) | (top << 17) | low;
          check(std::bit_cast<float>(bits));
          check(std::bit_cast<float>(bits | 0x80000000u));
        }
      }
    }
    std::mt19937 rng(11);
    for (int i = 0; i < 300000; ++i) {
      const uint32_t bits = rng();
      if (((bits >> 23) & 0xFFu) == 0xFFu) continue;
      check(std::bit_cast<float>(bits));
    }
  }
}

TEST(Fp8, ConstantsMatchFormats) {
  EXPECT_EQ(Fp8MaxFiniteCode(Fp8Format::kE4M3), 0x7Eu);
  EXPECT_EQ(Fp8MaxFiniteCode(Fp8Format::kE5M2), 0x7Bu);
  EXPECT_EQ(Fp8MaxFinite(Fp8Format::kE4M3), E4m3ToFloat(0x7E));
  EXPECT_EQ(Fp8MaxFinite(Fp8Format::kE5M2), E5m2ToFloat(0x7B));
  EXPECT_EQ(Fp8Emax(Fp8Format::kE4M3), 8);
  EXPECT_EQ(Fp8Emax(Fp8Format::kE5M2), 15);
}

}  // namespace
}  // namespace gemtb::numerics
