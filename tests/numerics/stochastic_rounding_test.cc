// Stochastic rounding (model/numerics/stochastic_rounding.h): injecting every
// r < 2^16, exactly f = floor((|x|-lo)/u·2^16) of them round away from zero, and they are the r with
// r >= 2^16 - f. lo, u and f come from the table of the format's values (independent_reference.h)
// and exact double arithmetic, not from the bit manipulation under test.
#include "model/numerics/stochastic_rounding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "model/numerics/float_formats.h"
#include "model/numerics/fp4_fp6.h"
#include "model/numerics/fp8.h"
#include "tests/numerics/independent_reference.h"

namespace gemtb::numerics {
namespace {

using testing::FieldFormat;
using testing::RefPositiveFiniteTable;

struct SrTarget {
  const char* name;
  FieldFormat fields;
  bool saturates;  // fp8/fp6/fp4: overflow saturates; bf16/fp16: overflow to inf
  std::function<uint32_t(float, uint16_t)> sr;
  int sign_shift;
};

std::vector<SrTarget> Targets() {
  return {
      {"bf16", testing::kRefBf16, false, [](float x, uint16_t r) { return uint32_t{FloatToBf16BitsSr(x, r)}; }, 15},
      {"fp16", testing::kRefFp16, false, [](float x, uint16_t r) { return uint32_t{FloatToFp16BitsSr(x, r)}; }, 15},
      {"e4m3", testing::kRefE4m3, true, [](float x, uint16_t r) { return uint32_t{FloatToE4m3Sr(x, r)}; }, 7},
      {"e5m2", testing::kRefE5m2, true, [](float x, uint16_t r) { return uint32_t{FloatToE5m2Sr(x, r)}; }, 7},
      {"e2m3", testing::kRefE2m3, true,
       [](float x, uint16_t r) { return uint32_t{FloatToFp4Fp6Sr(x, Fp4Fp6Format::kE2M3, r)}; }, 5},
      {"e3m2", testing::kRefE3m2, true,
       [](float x, uint16_t r) { return uint32_t{FloatToFp4Fp6Sr(x, Fp4Fp6Format::kE3M2, r)}; }, 5},
      {"e2m1", testing::kRefE2m1, true,
       [](float x, uint16_t r) { return uint32_t{FloatToFp4Fp6Sr(x, Fp4Fp6Format::kE2M1, r)}; }, 3},
  };
}

// Representative magnitudes for a format whose positive finite values are `table`: just above
// values across the range (random fractions of a step, incl. tiny and near-1 fractions), exact
// values (f = 0), below the smallest subnormal (lo = 0), and in the last step below overflow.
std::vector<float> RepresentativeMagnitudes(const std::vector<double>& table, std::mt19937_64& rng) {
  std::vector<float> xs;
  const size_t n = table.size();
  const auto add_in_step = [&](size_t idx, double frac) {
    const double lo = table[idx];
    const double u = idx + 1 < n ? table[idx + 1] - lo : lo - table[idx - 1];
    const float x = static_cast<float>(lo + frac * u);
    if (static_cast<double>(x) >= lo && static_cast<double>(x) < lo + u) xs.push_back(x);
  };
  for (const size_t idx : {size_t{0}, size_t{1}, size_t{2}, n / 3, n / 2, n / 2 + 1, n - 3, n - 2,
                           n - 1}) {
    for (const double frac : {0.0, 0x1p-16, 0.25, 0.5, 0.75, 0.999, 1.0 / 3.0}) {
      add_in_step(idx, frac);
    }
  }
  for (int i = 0; i < 24; ++i) {
    add_in_step(rng() % n, std::ldexp(static_cast<double>(rng() % (1u << 20)), -20));
  }
  xs.push_back(static_cast<float>(table[1] / 1024));  // far below the smallest subnormal
  return xs;
}

TEST(StochasticRounding, ExactlyFOfAllRRoundAway) {
  std::mt19937_64 rng(21);
  for (const SrTarget& t : Targets()) {
    const std::vector<double> table = RefPositiveFiniteTable(t.fields);
    const size_t n = table.size();
    int cases_with_rounding = 0;
    for (const float mag : RepresentativeMagnitudes(table, rng)) {
      for (const float x : {mag, -mag}) {
        const double a = std::fabs(static_cast<double>(x));
        const size_t lo_idx =
            static_cast<size_t>(std::upper_bound(table.begin(), table.end(), a) - table.begin()) - 1;
        const double lo = table[lo_idx];
        const double u = lo_idx + 1 < n ? table[lo_idx + 1] - lo : lo - table[lo_idx - 1];
        ASSERT_LT(a, lo + u) << t.name;
        const auto f = static_cast<uint32_t>(std::floor((a - lo) / u * 65536.0));
        const uint32_t sign = std::signbit(x) ? (1u << t.sign_shift) : 0u;
        uint32_t up_idx = static_cast<uint32_t>(lo_idx + 1);  // n = inf code for bf16/fp16
        if (t.saturates && up_idx == n) up_idx = static_cast<uint32_t>(n - 1);
        const uint32_t lo_code = sign | static_cast<uint32_t>(lo_idx);
        const uint32_t up_code = sign | up_idx;
        uint32_t ups = 0;
        for (uint32_t r = 0; r < 65536; ++r) {
          const uint32_t got = t.sr(x, static_cast<uint16_t>(r));
          const bool expect_up = r >= 65536 - f;
          ASSERT_EQ(got, expect_up ? up_code : lo_code)
              << t.name << " x=" << std::hexfloat << x << " r=" << std::dec << r << " f=" << f;
          ups += (got != lo_code) ? 1u : 0u;
        }
        if (up_code != lo_code) {
          EXPECT_EQ(ups, f) << t.name << " x=" << std::hexfloat << x;
        }
        cases_with_rounding += (f > 0 && f < 65536) ? 1 : 0;
      }
    }
    EXPECT_GT(cases_with_rounding, 40) << t.name << ": the sample must contain inexact values";
  }
}

TEST(StochasticRounding, OverflowAndSpecials) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const uint16_t r : {uint16_t{0}, uint16_t{1}, uint16_t{0x8000}, uint16_t{0xFFFF}}) {
    // bf16/fp16: beyond the last step → inf; inf → inf; NaN → NaN; zero keeps its sign.
    EXPECT_EQ(FloatToBf16BitsSr(inf, r), 0x7F80u);
    EXPECT_EQ(FloatToBf16BitsSr(-inf, r), 0xFF80u);
    EXPECT_EQ(FloatToFp16BitsSr(70000.0f, r), 0x7C00u);
    EXPECT_EQ(FloatToFp16BitsSr(-65536.0f, r), 0xFC00u);
    EXPECT_EQ(FloatToFp16BitsSr(inf, r), 0x7C00u);
    EXPECT_GT(FloatToBf16BitsSr(nan, r) & 0x7FFFu, 0x7F80u);
    EXPECT_GT(FloatToFp16BitsSr(nan, r) & 0x7FFFu, 0x7C00u);
    EXPECT_EQ(FloatToBf16BitsSr(-0.0f, r), 0x8000u);
    EXPECT_EQ(FloatToFp16BitsSr(-0.0f, r), 0x8000u);
    // fp8 saturates.
    EXPECT_EQ(FloatToE4m3Sr(470.0f, r), 0x7Eu);
    EXPECT_EQ(FloatToE4m3Sr(1e6f, r), 0x7Eu);
    EXPECT_EQ(FloatToE4m3Sr(-inf, r), 0xFEu);
    EXPECT_EQ(FloatToE5m2Sr(60000.0f, r), 0x7Bu);
    EXPECT_EQ(FloatToE5m2Sr(inf, r), 0x7Bu);
    EXPECT_EQ(FloatToFp8Sr(-1e30f, Fp8Format::kE5M2, r), 0xFBu);
    EXPECT_TRUE(Fp8IsNan(FloatToE4m3Sr(nan, r), Fp8Format::kE4M3));
    EXPECT_TRUE(Fp8IsNan(FloatToE5m2Sr(nan, r), Fp8Format::kE5M2));
    EXPECT_EQ(FloatToE4m3Sr(-0.0f, r), 0x80u);
    // fp6/fp4 saturate too; NaN, which they cannot hold, gives +max.
    EXPECT_EQ(FloatToFp4Fp6Sr(7.9f, Fp4Fp6Format::kE2M1, r), 0x7u);
    EXPECT_EQ(FloatToFp4Fp6Sr(-inf, Fp4Fp6Format::kE2M1, r), 0xFu);
    EXPECT_EQ(FloatToFp4Fp6Sr(1e6f, Fp4Fp6Format::kE2M3, r), 0x1Fu);
    EXPECT_EQ(FloatToFp4Fp6Sr(-31.0f, Fp4Fp6Format::kE3M2, r), 0x3Fu);
    EXPECT_EQ(FloatToFp4Fp6Sr(nan, Fp4Fp6Format::kE2M1, r), 0x7u);
    EXPECT_EQ(FloatToFp4Fp6Sr(-nan, Fp4Fp6Format::kE3M2, r), 0x1Fu);
    EXPECT_EQ(FloatToFp4Fp6Sr(-0.0f, Fp4Fp6Format::kE2M3, r), 0x20u);
  }
  // The last finite step rounds up to inf for exactly f of the r: 65504 + 16 is halfway.
  uint32_t infs = 0;
  for (uint32_t r = 0; r < 65536; ++r) {
    infs += FloatToFp16BitsSr(65520.0f, static_cast<uint16_t>(r)) == 0x7C00u ? 1u : 0u;
  }
  EXPECT_EQ(infs, 32768u);
}

// SR is unbiased to within 2^-16 of a step: the mean over all r of the rounded value is
// lo + f/2^16·u. Checked for values whose exact f is known by construction.
TEST(StochasticRounding, MeanOverAllRIsTruncatedToSixteenBits) {
  // 1 + 0.3·2^-7 in bf16 steps: f = floor(0.3·2^16) for the fp32 nearest to it.
  const float x = 1.0f + 0.3f * 0x1p-7f;
  const double frac = (static_cast<double>(x) - 1.0) / 0x1p-7;
  const double f = std::floor(frac * 65536.0);
  double sum = 0;
  for (uint32_t r = 0; r < 65536; ++r) {
    sum += static_cast<double>(Bf16BitsToFloat(FloatToBf16BitsSr(x, static_cast<uint16_t>(r))));
  }
  EXPECT_EQ(sum / 65536.0, 1.0 + f / 65536.0 * 0x1p-7);
}

}  // namespace
}  // namespace gemtb::numerics
