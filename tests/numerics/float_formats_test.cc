// bf16 / fp16 / fp32 codecs (model/numerics/float_formats.h) against the format definitions.
#include "model/numerics/float_formats.h"

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

using testing::kRefBf16;
using testing::kRefFp16;
using testing::RefDecode;
using testing::RefNearestCode;
using testing::RefPositiveFiniteTable;

bool IsBf16Nan(uint16_t b) { return (b & 0x7FFFu) > 0x7F80u; }
bool IsFp16Nan(uint16_t h) { return (h & 0x7FFFu) > 0x7C00u; }

// Same value and same sign bit (so -0 and +0 differ); NaN by class.
void ExpectSameValue(double expected, float actual, uint32_t code) {
  if (std::isnan(expected)) {
    EXPECT_TRUE(std::isnan(actual)) << std::hex << code;
    return;
  }
  EXPECT_EQ(expected, static_cast<double>(actual)) << std::hex << code;
  EXPECT_EQ(std::signbit(expected), std::signbit(actual)) << std::hex << code;
}

TEST(FloatFormats, AllBf16PatternsDecodeToDefinition) {
  for (uint32_t c = 0; c < 65536; ++c) {
    ExpectSameValue(RefDecode(c, kRefBf16), Bf16BitsToFloat(static_cast<uint16_t>(c)), c);
  }
}

TEST(FloatFormats, AllFp16PatternsDecodeToDefinition) {
  for (uint32_t c = 0; c < 65536; ++c) {
    ExpectSameValue(RefDecode(c, kRefFp16), Fp16BitsToFloat(static_cast<uint16_t>(c)), c);
  }
}

TEST(FloatFormats, AllBf16PatternsRoundTrip) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const auto b = static_cast<uint16_t>(c);
    const float f = Bf16BitsToFloat(b);
    const uint16_t back = FloatToBf16BitsRne(f);
    const uint16_t back_d = DoubleToBf16BitsRne(static_cast<double>(f));
    if (IsBf16Nan(b)) {
      EXPECT_TRUE(IsBf16Nan(back)) << std::hex << c;
      EXPECT_TRUE(IsBf16Nan(back_d)) << std::hex << c;
    } else {
      EXPECT_EQ(back, b) << std::hex << c;
      EXPECT_EQ(back_d, b) << std::hex << c;
    }
  }
}

TEST(FloatFormats, AllFp16PatternsRoundTrip) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const auto h = static_cast<uint16_t>(c);
    const float f = Fp16BitsToFloat(h);
    const uint16_t back = FloatToFp16BitsRne(f);
    const uint16_t back_d = DoubleToFp16BitsRne(static_cast<double>(f));
    if (IsFp16Nan(h)) {
      EXPECT_TRUE(IsFp16Nan(back)) << std::hex << c;
      EXPECT_TRUE(IsFp16Nan(back_d)) << std::hex << c;
    } else {
      EXPECT_EQ(back, h) << std::hex << c;
      EXPECT_EQ(back_d, h) << std::hex << c;
    }
  }
}

TEST(FloatFormats, Bf16TieCases) {
  struct Case {
    uint32_t fp32;
    uint16_t bf16;
  };
  for (const Case& c : {Case{0x3F808000u, 0x3F80u}, Case{0x3F818000u, 0x3F82u},
                        Case{0x7F7F8000u, 0x7F80u}, Case{0x00008000u, 0x0000u},
                        Case{0xBF808000u, 0xBF80u}, Case{0xFF7F8000u, 0xFF80u},
                        Case{0x80008000u, 0x8000u}}) {
    const float x = std::bit_cast<float>(c.fp32);
    EXPECT_EQ(FloatToBf16BitsRne(x), c.bf16) << std::hex << c.fp32;
    EXPECT_EQ(DoubleToBf16BitsRne(static_cast<double>(x)), c.bf16) << std::hex << c.fp32;
  }
  // Just off the ties, the rounding direction follows the distance.
  EXPECT_EQ(FloatToBf16BitsRne(std::bit_cast<float>(0x3F808001u)), 0x3F81u);
  EXPECT_EQ(FloatToBf16BitsRne(std::bit_cast<float>(0x3F817FFFu)), 0x3F81u);
  EXPECT_EQ(FloatToBf16BitsRne(std::bit_cast<float>(0x7F7F7FFFu)), 0x7F7Fu);
}

TEST(FloatFormats, Fp16TieCases) {
  struct Case {
    double x;
    uint16_t fp16;
  };
  for (const Case& c : {Case{1.0 + 0x1p-11, 0x3C00u}, Case{1.0 + 3 * 0x1p-11, 0x3C02u},
                        Case{0x1p-25, 0x0000u}, Case{3 * 0x1p-25, 0x0002u}, Case{65520.0, 0x7C00u},
                        Case{-65520.0, 0xFC00u}, Case{-0x1p-25, 0x8000u}}) {
    EXPECT_EQ(FloatToFp16BitsRne(static_cast<float>(c.x)), c.fp16) << c.x;
    EXPECT_EQ(DoubleToFp16BitsRne(c.x), c.fp16) << c.x;
  }
  // Largest finite and the neighbourhood of the overflow threshold.
  EXPECT_EQ(FloatToFp16BitsRne(65504.0f), 0x7BFFu);
  EXPECT_EQ(FloatToFp16BitsRne(std::nextafter(65520.0f, 0.0f)), 0x7BFFu);
  EXPECT_EQ(DoubleToFp16BitsRne(std::nextafter(65520.0, 0.0)), 0x7BFFu);
  // Smallest subnormal and the subnormal/normal seam.
  EXPECT_EQ(FloatToFp16BitsRne(0x1p-24f), 0x0001u);
  EXPECT_EQ(FloatToFp16BitsRne(0x1p-14f - 0x1p-25f), 0x0400u);  // tie between 0x3FF and 0x400
  EXPECT_EQ(DoubleToFp16BitsRne(0x1p-25 + 0x1p-60), 0x0001u);
}

TEST(FloatFormats, SpecialValuesKeepClassAndSign) {
  const float inf = std::numeric_limits<float>::infinity();
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  const float snan = std::numeric_limits<float>::signaling_NaN();
  EXPECT_EQ(FloatToBf16BitsRne(inf), 0x7F80u);
  EXPECT_EQ(FloatToBf16BitsRne(-inf), 0xFF80u);
  EXPECT_EQ(FloatToFp16BitsRne(inf), 0x7C00u);
  EXPECT_EQ(FloatToFp16BitsRne(-inf), 0xFC00u);
  EXPECT_EQ(DoubleToBf16BitsRne(-static_cast<double>(inf)), 0xFF80u);
  EXPECT_EQ(DoubleToFp16BitsRne(static_cast<double>(inf)), 0x7C00u);
  EXPECT_EQ(FloatToBf16BitsRne(-0.0f), 0x8000u);
  EXPECT_EQ(FloatToFp16BitsRne(-0.0f), 0x8000u);
  EXPECT_EQ(DoubleToBf16BitsRne(-0.0), 0x8000u);
  EXPECT_EQ(DoubleToFp16BitsRne(-0.0), 0x8000u);
  EXPECT_EQ(DoubleToFp16BitsRne(-0x1p-1074), 0x8000u);  // fp64 subnormal underflows, sign kept
  for (const float nan : {qnan, -qnan, snan, -snan, std::bit_cast<float>(0x7F800001u)}) {
    const uint16_t b = FloatToBf16BitsRne(nan);
    const uint16_t h = FloatToFp16BitsRne(nan);
    EXPECT_TRUE(IsBf16Nan(b)) << std::hex << b;
    EXPECT_TRUE(IsFp16Nan(h)) << std::hex << h;
    EXPECT_NE(b & 0x0040u, 0u) << "quiet bit";
    EXPECT_NE(h & 0x0200u, 0u) << "quiet bit";
    EXPECT_EQ(b >> 15, std::bit_cast<uint32_t>(nan) >> 31);
    EXPECT_TRUE(IsBf16Nan(DoubleToBf16BitsRne(static_cast<double>(nan))));
    EXPECT_TRUE(IsFp16Nan(DoubleToFp16BitsRne(static_cast<double>(nan))));
    EXPECT_TRUE(std::isnan(DoubleToFloatRne(static_cast<double>(nan))));
  }
}

// A double just past a bf16 (fp16) tie that fp32 rounds onto the tie: rounding through fp32 would
// then resolve the tie to even, i.e. the wrong way. Direct rounding must follow the true distance.
TEST(FloatFormats, DoubleToBf16NeverDoubleRounds) {
  std::mt19937_64 rng(1);
  int double_rounding_cases = 0;
  for (int i = 0; i < 20000; ++i) {
    // A random positive normal bf16 value b and its ulp; go to b + ulp/2 ± 2^-40·ulp.
    const auto b = static_cast<uint16_t>(0x0080u + rng() % (0x7F7Fu - 0x0080u));
    const double v = static_cast<double>(Bf16BitsToFloat(b));
    const double ulp = static_cast<double>(Bf16BitsToFloat(static_cast<uint16_t>(b + 1))) - v;
    const bool above = (rng() & 1) != 0;
    const double d = v + ulp / 2 + (above ? 1 : -1) * std::ldexp(ulp, -40);
    const uint16_t expected = above ? static_cast<uint16_t>(b + 1) : b;
    EXPECT_EQ(DoubleToBf16BitsRne(d), expected) << std::hex << b;
    EXPECT_EQ(DoubleToBf16BitsRne(-d), expected | 0x8000u) << std::hex << b;
    // The double-rounding path goes wrong whenever the tie-to-even disagrees with the distance.
    if (FloatToBf16BitsRne(static_cast<float>(d)) != expected) ++double_rounding_cases;
  }
  EXPECT_GT(double_rounding_cases, 5000) << "the constructed cases must expose double rounding";
}

TEST(FloatFormats, DoubleToFp16NeverDoubleRounds) {
  std::mt19937_64 rng(2);
  int double_rounding_cases = 0;
  for (int i = 0; i < 20000; ++i) {
    // Any positive finite fp16 below the largest (subnormals included).
    const auto h = static_cast<uint16_t>(rng() % 0x7BFFu);
    const double v = static_cast<double>(Fp16BitsToFloat(h));
    const double ulp = static_cast<double>(Fp16BitsToFloat(static_cast<uint16_t>(h + 1))) - v;
    const bool above = (rng() & 1) != 0;
    const double d = v + ulp / 2 + (above ? 1 : -1) * std::ldexp(ulp, -40);
    const uint16_t expected = above ? static_cast<uint16_t>(h + 1) : h;
    EXPECT_EQ(DoubleToFp16BitsRne(d), expected) << std::hex << h;
    EXPECT_EQ(DoubleToFp16BitsRne(-d), expected | 0x8000u) << std::hex << h;
    if (FloatToFp16BitsRne(static_cast<float>(d)) != expected) ++double_rounding_cases;
  }
  EXPECT_GT(double_rounding_cases, 5000) << "the constructed cases must expose double rounding";
}

// Random doubles over the whole exponent range (incl. subnormal fp16/bf16 targets and overflow)
// against brute-force nearest-even search on the table of values.
TEST(FloatFormats, DoubleToBf16AndFp16MatchNearestSearch) {
  const std::vector<double> bf16 = RefPositiveFiniteTable(kRefBf16);
  const std::vector<double> fp16 = RefPositiveFiniteTable(kRefFp16);
  std::mt19937_64 rng(3);
  for (int i = 0; i < 400000; ++i) {
    // log-uniform magnitudes around each format's range, random 52-bit fractions
    const bool for_fp16 = (i % 2) != 0;
    const int lo_exp = for_fp16 ? -27 : -136;
    const int hi_exp = for_fp16 ? 17 : 129;
    const int e = lo_exp + static_cast<int>(rng() % static_cast<uint64_t>(hi_exp - lo_exp + 1));
    uint64_t frac = rng() & 0xFFFFFFFFFFFFFull;
    if (i % 7 == 0) frac &= ~0xFFFFFFFFull;  // fewer bits, so ties occur
    const double a = std::ldexp(1.0 + std::ldexp(static_cast<double>(frac), -52), e);
    const std::vector<double>& table = for_fp16 ? fp16 : bf16;
    const uint32_t code = RefNearestCode(a, table);
    const uint32_t inf_code = static_cast<uint32_t>(table.size());  // 0x7F80 / 0x7C00
    const uint16_t expected = static_cast<uint16_t>(code >= inf_code ? inf_code : code);
    const uint16_t got = for_fp16 ? DoubleToFp16BitsRne(a) : DoubleToBf16BitsRne(a);
    ASSERT_EQ(got, expected) << std::hexfloat << a;
    const uint16_t got_neg = for_fp16 ? DoubleToFp16BitsRne(-a) : DoubleToBf16BitsRne(-a);
    ASSERT_EQ(got_neg, expected | 0x8000u) << std::hexfloat << -a;
  }
}

// fp64 → fp32 by integer logic agrees with the FPU's conversion (round to nearest even).
TEST(FloatFormats, DoubleToFloatMatchesFpuConversion) {
  std::mt19937_64 rng(4);
  for (int i = 0; i < 1000000; ++i) {
    uint64_t bits = rng();
    if (i % 2 == 0) {
      // concentrate on fp32's range: exponents 1023-160 .. 1023+130
      const uint64_t e = 863 + rng() % 291;
      bits = (bits & 0x800FFFFFFFFFFFFFull) | (e << 52);
      if (i % 6 == 0) bits &= ~0x7FFFFFFull;  // short fractions hit the ties
    }
    const double d = std::bit_cast<double>(bits);
    const float expected = static_cast<float>(d);
    const float got = DoubleToFloatRne(d);
    if (std::isnan(d)) {
      ASSERT_TRUE(std::isnan(got));
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(expected))
          << std::hexfloat << d;
    }
  }
}

// The integer fp32 → fp64 widening equals the FPU's exact conversion: every subnormal and zero of
// both signs, and every 251st other pattern (all exponents, scattered fractions).
TEST(FloatFormats, FloatToDoubleExactMatchesFpuConversion) {
  const auto check = [](uint32_t bits) {
    const float x = std::bit_cast<float>(bits);
    const double got = FloatToDoubleExact(x);
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << bits;
      ASSERT_EQ(std::signbit(got), std::signbit(x)) << std::hex << bits;
    } else {
      ASSERT_EQ(std::bit_cast<uint64_t>(got), std::bit_cast<uint64_t>(static_cast<double>(x)))
          << std::hex << bits;
    }
  };
  for (uint32_t frac = 0; frac < 0x00800000u; ++frac) {
    check(frac);
    check(0x80000000u | frac);
  }
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 251) check(static_cast<uint32_t>(bits));
}

TEST(FloatFormats, RoundDoubleHelpersReturnTheRoundedValue) {
  EXPECT_EQ(RoundDoubleToBf16(1.0 + 0x1p-8 + 0x1p-30), 1.0 + 0x1p-7);
  EXPECT_EQ(RoundDoubleToFp16(1.0 + 0x1p-11 + 0x1p-30), 1.0 + 0x1p-10);
  EXPECT_EQ(RoundDoubleToFloat(1.0 + 0x1p-24 + 0x1p-52), 1.0 + 0x1p-23);
  EXPECT_EQ(RoundDoubleToFp16(1e6), std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::signbit(RoundDoubleToBf16(-0x1p-200)));
  EXPECT_EQ(RoundDoubleToBf16(-0x1p-200), 0.0);
}

}  // namespace
}  // namespace gemtb::numerics
