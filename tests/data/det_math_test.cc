// The deterministic transcendentals of model/numerics/det_math.h: special values, exactness where it
// is promised, and a few-ulp agreement with the platform libm (which is only a yardstick here).
#include "model/numerics/det_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

namespace gemtb::numerics {
namespace {

// Distance in units in the last place between two finite doubles of the same sign.
int64_t UlpDistance(double a, double b) {
  const int64_t ia = static_cast<int64_t>(DoubleToBits(a));
  const int64_t ib = static_cast<int64_t>(DoubleToBits(b));
  return ia > ib ? ia - ib : ib - ia;
}

TEST(DetMath, SpecialValues) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(DetLog(1.0), 0.0);
  EXPECT_EQ(DetLog(0.0), -inf);
  EXPECT_TRUE(std::isnan(DetLog(-1.0)));
  EXPECT_EQ(DetLog(inf), inf);
  EXPECT_EQ(DetExp(0.0), 1.0);
  EXPECT_EQ(DetExp(-inf), 0.0);
  EXPECT_EQ(DetExp(inf), inf);
  EXPECT_EQ(DetExp(710.0), inf);
  EXPECT_EQ(DetExp(-746.0), 0.0);
  EXPECT_EQ(DetLog1p(0.0), 0.0);
  EXPECT_EQ(DetLog1p(-1.0), -inf);
  EXPECT_TRUE(std::isnan(DetLog1p(-2.0)));
  EXPECT_EQ(DetSigmoid(0.0), 0.5);
  EXPECT_EQ(DetSigmoid(1000.0), 1.0);
  EXPECT_EQ(DetSigmoid(-1000.0), 0.0);
}

TEST(DetMath, Log2OfPowersOfTwoIsExact) {
  for (int e = -1074; e <= 1023; ++e) {
    EXPECT_EQ(DetLog2(std::ldexp(1.0, e)), static_cast<double>(e)) << e;
  }
}

TEST(DetMath, LogWithinTwoUlpOfLibm) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> exponent(-300.0, 300.0);
  for (int i = 0; i < 200000; ++i) {
    const double x = std::pow(10.0, exponent(rng));
    EXPECT_LE(UlpDistance(DetLog(x), std::log(x)), 2) << x;
    EXPECT_LE(UlpDistance(DetLog2(x), std::log2(x)), 2) << x;
  }
  // Near 1, where cancellation would show.
  for (int i = 1; i < 20000; ++i) {
    const double x = 1.0 + (i - 10000) * 1e-5;
    const double want = std::log(x);
    EXPECT_LE(std::abs(DetLog(x) - want), 4e-16 * std::abs(want) + 1e-300) << x;
  }
  EXPECT_LE(UlpDistance(DetLog(4.9406564584124654e-324), std::log(4.9406564584124654e-324)), 2);  // subnormal
}

TEST(DetMath, ExpWithinTwoUlpOfLibm) {
  std::mt19937_64 rng(8);
  std::uniform_real_distribution<double> x_dist(-700.0, 700.0);
  for (int i = 0; i < 200000; ++i) {
    const double x = x_dist(rng);
    EXPECT_LE(UlpDistance(DetExp(x), std::exp(x)), 2) << x;
  }
  for (double x : {-1e-300, 1e-17, -0.5, 0.34657359027997264, 1.0, 709.78, -708.0}) {
    EXPECT_LE(UlpDistance(DetExp(x), std::exp(x)), 2) << x;
  }
  // Subnormal results: within a relative 1e-12 (one rounding at the subnormal step).
  EXPECT_NEAR(DetExp(-740.0) / std::exp(-740.0), 1.0, 1e-12);
}

TEST(DetMath, Log1pWithinTwoUlpOfLibm) {
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<double> small(-0.3, 0.45);
  std::uniform_real_distribution<double> exponent(-20.0, 20.0);
  for (int i = 0; i < 200000; ++i) {
    const double a = small(rng);
    EXPECT_LE(UlpDistance(DetLog1p(a), std::log1p(a)), 2) << a;
    const double b = std::pow(10.0, exponent(rng));
    EXPECT_LE(UlpDistance(DetLog1p(b), std::log1p(b)), 2) << b;
  }
}

TEST(DetMath, SigmoidAndSoftplusMatchTheirDefinitions) {
  for (double z = -40.0; z <= 40.0; z += 0.37) {
    EXPECT_NEAR(DetSigmoid(z), 1.0 / (1.0 + std::exp(-z)), 4e-16) << z;
    EXPECT_NEAR(DetSoftplus(z), std::log1p(std::exp(z)), 1e-15 * (1.0 + std::abs(z))) << z;
  }
}

}  // namespace
}  // namespace gemtb::numerics
