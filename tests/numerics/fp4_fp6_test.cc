// FP4 E2M1 and FP6 E2M3 / E3M2 codecs (model/numerics/fp4_fp6.h) against the OCP MX v1.0 tables.
#include "model/numerics/fp4_fp6.h"

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

using testing::RefDecode;
using testing::RefNearestCode;
using testing::RefPositiveFiniteTable;

// The non-negative values by magnitude code, written out from the OCP MX v1.0 element definitions
// (subnormals 0.M·2^(1-bias), normals 1.M·2^(e-bias); no inf or NaN codes).
const std::vector<double> kE2m1Values = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
const std::vector<double> kE2m3Values = {
    0.0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875,  // subnormals, step 2^-3
    1.0, 1.125, 1.25, 1.375, 1.5, 1.625, 1.75, 1.875,  // 2^0
    2.0, 2.25,  2.5,  2.75,  3.0, 3.25,  3.5,  3.75,   // 2^1
    4.0, 4.5,   5.0,  5.5,   6.0, 6.5,   7.0,  7.5};   // 2^2
const std::vector<double> kE3m2Values = {
    0.0,  0.0625, 0.125, 0.1875,  // subnormals, step 2^-4
    0.25, 0.3125, 0.375, 0.4375,  // 2^-2
    0.5,  0.625,  0.75,  0.875,   // 2^-1
    1.0,  1.25,   1.5,   1.75,    // 2^0
    2.0,  2.5,    3.0,   3.5,     // 2^1
    4.0,  5.0,    6.0,   7.0,     // 2^2
    8.0,  10.0,   12.0,  14.0,    // 2^3
    16.0, 20.0,   24.0,  28.0};   // 2^4

struct Target {
  const char* name;
  Fp4Fp6Format format;
  const std::vector<double>* values;
  testing::FieldFormat fields;
  uint32_t sign_bit;
};

std::vector<Target> Targets() {
  return {{"e2m1", Fp4Fp6Format::kE2M1, &kE2m1Values, testing::kRefE2m1, 0x8u},
          {"e2m3", Fp4Fp6Format::kE2M3, &kE2m3Values, testing::kRefE2m3, 0x20u},
          {"e3m2", Fp4Fp6Format::kE3M2, &kE3m2Values, testing::kRefE3m2, 0x20u}};
}

uint32_t MaxCode(const Target& t) { return static_cast<uint32_t>(t.values->size() - 1); }

void ExpectBits(float got, double expected, const char* name, uint32_t code) {
  EXPECT_EQ(static_cast<double>(got), expected) << name << " code " << std::hex << code;
  EXPECT_EQ(std::signbit(got), std::signbit(expected)) << name << " code " << std::hex << code;
}

TEST(Fp4Fp6, EveryCodeDecodesToTheOcpTable) {
  for (const Target& t : Targets()) {
    ASSERT_EQ(t.values->size(), t.sign_bit);
    for (uint32_t mag = 0; mag < t.sign_bit; ++mag) {
      const double v = (*t.values)[mag];
      for (const uint32_t code : {mag, mag | t.sign_bit}) {
        const double expected = code == mag ? v : -v;  // -0.0 for the negative zero code
        ExpectBits(Fp4Fp6ToFloat(static_cast<uint8_t>(code), t.format), expected, t.name, code);
        // The field-by-field reference agrees with the written table.
        EXPECT_EQ(RefDecode(code, t.fields), expected) << t.name << " " << code;
      }
    }
  }
  EXPECT_EQ(E2m1ToFloat(0x7), 6.0f);
  EXPECT_EQ(E2m1ToFloat(0xF), -6.0f);
  EXPECT_EQ(E2m3ToFloat(0x1F), 7.5f);
  EXPECT_EQ(E2m3ToFloat(0x01), 0.125f);
  EXPECT_EQ(E3m2ToFloat(0x1F), 28.0f);
  EXPECT_EQ(E3m2ToFloat(0x01), 0.0625f);
  EXPECT_EQ(std::bit_cast<uint32_t>(E2m1ToFloat(0x8)), 0x80000000u);  // negative zero
}

// Codes live in the low bits of a byte; whatever the high bits hold is not part of the code.
TEST(Fp4Fp6, DecodeIgnoresUnusedHighBits) {
  for (const Target& t : Targets()) {
    for (uint32_t code = 0; code < 2 * t.sign_bit; ++code) {
      for (const uint32_t high : {2 * t.sign_bit, 0x80u, 0xFFu & ~(2 * t.sign_bit - 1)}) {
        const float a = Fp4Fp6ToFloat(static_cast<uint8_t>(code), t.format);
        const float b = Fp4Fp6ToFloat(static_cast<uint8_t>(code | high), t.format);
        EXPECT_EQ(std::bit_cast<uint32_t>(a), std::bit_cast<uint32_t>(b)) << t.name << " " << code;
      }
    }
  }
}

TEST(Fp4Fp6, EveryCodeReencodesToItself) {
  for (const Target& t : Targets()) {
    for (uint32_t code = 0; code < 2 * t.sign_bit; ++code) {
      const float v = Fp4Fp6ToFloat(static_cast<uint8_t>(code), t.format);
      EXPECT_EQ(FloatToFp4Fp6Rne(v, t.format), code) << t.name;
      EXPECT_EQ(DoubleToFp4Fp6Rne(static_cast<double>(v), t.format), code) << t.name;
    }
  }
}

// Every midpoint between adjacent magnitudes (from zero/min subnormal up to max/max+step) rounds to
// the even code; one fp32 ulp either side goes to the nearer code. Past max the result saturates.
TEST(Fp4Fp6, EveryHalfwayCaseRoundsToEven) {
  int ties = 0;
  for (const Target& t : Targets()) {
    const std::vector<double>& v = *t.values;
    const uint32_t max = MaxCode(t);
    for (uint32_t lo = 0; lo <= max; ++lo) {
      // Above max: the step a next code would have (the binade's quantum), which satfinite clamps.
      const double hi_value = lo < max ? v[lo + 1] : v[max] + (v[max] - v[max - 1]);
      const double mid = (v[lo] + hi_value) / 2;
      const float midf = static_cast<float>(mid);
      ASSERT_EQ(static_cast<double>(midf), mid);
      const uint32_t even = (lo % 2 == 0) ? lo : lo + 1;
      const uint32_t hi = lo + 1;
      const auto sat = [&](uint32_t c) { return c > max ? max : c; };
      const float above = std::nextafter(midf, std::numeric_limits<float>::infinity());
      const float below = std::nextafter(midf, 0.0f);
      for (const bool neg : {false, true}) {
        const uint32_t s = neg ? t.sign_bit : 0u;
        const float sign = neg ? -1.0f : 1.0f;
        EXPECT_EQ(FloatToFp4Fp6Rne(sign * midf, t.format), s | sat(even)) << t.name << " mid " << mid;
        EXPECT_EQ(DoubleToFp4Fp6Rne(sign * mid, t.format), s | sat(even)) << t.name << " mid " << mid;
        EXPECT_EQ(FloatToFp4Fp6Rne(sign * above, t.format), s | sat(hi)) << t.name << " above " << mid;
        EXPECT_EQ(FloatToFp4Fp6Rne(sign * below, t.format), s | lo) << t.name << " below " << mid;
        ++ties;
      }
    }
  }
  EXPECT_EQ(ties, 2 * (8 + 32 + 32));
}

// From fp64 the encoder rounds once: a value a hair above a tie (too little for fp32 to hold)
// rounds up, where going through fp32 first would land on the tie and round to even.
TEST(Fp4Fp6, DoubleInputRoundsOnce) {
  const double hair = std::ldexp(1.0, -40);
  EXPECT_EQ(DoubleToFp4Fp6Rne(1.25 + hair, Fp4Fp6Format::kE2M1), 0x3u);   // 1.5, not 1.0
  EXPECT_EQ(FloatToFp4Fp6Rne(static_cast<float>(1.25 + hair), Fp4Fp6Format::kE2M1), 0x2u);
  EXPECT_EQ(DoubleToFp4Fp6Rne(5.25 + hair, Fp4Fp6Format::kE2M3), 0x1Bu);  // 5.5, not 5.0
  EXPECT_EQ(DoubleToFp4Fp6Rne(-(0.03125 + hair), Fp4Fp6Format::kE3M2), 0x21u);  // -1/16, not -0
}

TEST(Fp4Fp6, BeyondMaxAndInfinitySaturate) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const Target& t : Targets()) {
    const float max = static_cast<float>(t.values->back());
    const uint32_t max_code = MaxCode(t);
    for (const float x : {std::nextafter(max, inf), max * 1.1f, max * 2, 1e30f,
                          std::numeric_limits<float>::max(), inf}) {
      EXPECT_EQ(FloatToFp4Fp6Rne(x, t.format), max_code) << t.name << " " << x;
      EXPECT_EQ(FloatToFp4Fp6Rne(-x, t.format), t.sign_bit | max_code) << t.name << " " << x;
      EXPECT_EQ(DoubleToFp4Fp6Rne(static_cast<double>(x), t.format), max_code) << t.name;
    }
    EXPECT_EQ(DoubleToFp4Fp6Rne(1e300, t.format), max_code) << t.name;
    EXPECT_EQ(DoubleToFp4Fp6Rne(-std::numeric_limits<double>::infinity(), t.format), t.sign_bit | max_code);
    EXPECT_EQ(Fp4Fp6MaxFiniteCode(t.format), max_code);
    EXPECT_EQ(static_cast<double>(Fp4Fp6MaxFinite(t.format)), t.values->back());
  }
  EXPECT_EQ(Fp4Fp6Emax(Fp4Fp6Format::kE2M1), 2);
  EXPECT_EQ(Fp4Fp6Emax(Fp4Fp6Format::kE2M3), 2);
  EXPECT_EQ(Fp4Fp6Emax(Fp4Fp6Format::kE3M2), 4);
  EXPECT_EQ(Fp4Fp6Bits(Fp4Fp6Format::kE2M1), 4);
  EXPECT_EQ(Fp4Fp6Bits(Fp4Fp6Format::kE3M2), 6);
}

// These formats have no NaN: any NaN, whatever its sign or payload, gives +max (the CUDA
// conversion's choice).
TEST(Fp4Fp6, NanGivesPositiveMax) {
  for (const Target& t : Targets()) {
    for (const uint32_t bits : {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFFFFFFFu}) {
      EXPECT_EQ(FloatToFp4Fp6Rne(std::bit_cast<float>(bits), t.format), MaxCode(t)) << t.name;
    }
    EXPECT_EQ(DoubleToFp4Fp6Rne(-std::numeric_limits<double>::quiet_NaN(), t.format), MaxCode(t));
  }
}

TEST(Fp4Fp6, SubnormalsAndSignedZero) {
  for (const Target& t : Targets()) {
    const double tiny = (*t.values)[1];  // the smallest subnormal
    EXPECT_EQ(FloatToFp4Fp6Rne(0.0f, t.format), 0u);
    EXPECT_EQ(FloatToFp4Fp6Rne(-0.0f, t.format), t.sign_bit);
    EXPECT_EQ(DoubleToFp4Fp6Rne(-0.0, t.format), t.sign_bit);
    // Below half the smallest subnormal (and exactly half: ties to the even 0) gives a signed zero.
    for (const double x : {tiny / 2, tiny / 4, 1e-30, std::ldexp(1.0, -149)}) {
      EXPECT_EQ(FloatToFp4Fp6Rne(static_cast<float>(x), t.format), 0u) << t.name << " " << x;
      EXPECT_EQ(FloatToFp4Fp6Rne(static_cast<float>(-x), t.format), t.sign_bit) << t.name << " " << x;
    }
    EXPECT_EQ(FloatToFp4Fp6Rne(static_cast<float>(tiny * 0.75), t.format), 1u);
    EXPECT_EQ(FloatToFp4Fp6Rne(static_cast<float>(-tiny * 0.75), t.format), t.sign_bit | 1u);
    // The subnormal codes are the multiples of the smallest one below the smallest normal, 2^(1-bias).
    const double min_normal = std::ldexp(1.0, 1 - t.fields.bias);
    for (uint32_t c = 1; (*t.values)[c] < min_normal; ++c) {
      EXPECT_EQ((*t.values)[c], c * tiny);
      EXPECT_EQ(FloatToFp4Fp6Rne(static_cast<float>(c * tiny), t.format), c);
    }
  }
}

// Random fp32 inputs (all exponents, both signs) against brute-force nearest search on the table.
TEST(Fp4Fp6, RandomInputsMatchNearestSearch) {
  std::mt19937 rng(73);
  for (const Target& t : Targets()) {
    const std::vector<double> table = RefPositiveFiniteTable(t.fields);
    ASSERT_EQ(table, *t.values);
    for (int i = 0; i < 200000; ++i) {
      float x = std::bit_cast<float>(static_cast<uint32_t>(rng()));
      if (i % 2 == 0) {  // half of them near the format's range
        x = static_cast<float>(std::ldexp(static_cast<double>(rng()) / 4294967296.0, static_cast<int>(rng() % 12) - 6)) *
            ((rng() & 1) != 0 ? -1.0f : 1.0f);
      }
      if (!std::isfinite(x)) continue;
      uint32_t mag = RefNearestCode(std::fabs(static_cast<double>(x)), table);
      if (mag > MaxCode(t)) mag = MaxCode(t);
      const uint32_t expected = (std::signbit(x) ? t.sign_bit : 0u) | mag;
      ASSERT_EQ(FloatToFp4Fp6Rne(x, t.format), expected) << t.name << " " << std::hexfloat << x;
      ASSERT_EQ(DoubleToFp4Fp6Rne(static_cast<double>(x), t.format), expected) << t.name;
    }
  }
}

}  // namespace
}  // namespace gemtb::numerics
