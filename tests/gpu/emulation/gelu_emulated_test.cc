// gpu/train/gelu.cuh's GELU and derivative in their bf16-result form (GeluOfBf16, GeluGradOfBf16),
// built by the host compiler, against their fp64 definition
// (x Phi(x) and Phi(x) + x phi(x), Phi by std::erfc): within 1e-6 of the magnitude (the derivative's
// of Phi + |x| phi, since its terms cancel near x = -0.75), plus what rounding x^2 / 2 to fp32 moves
// exp(-x^2 / 2) by (x^2 / 2 of 2^-24 of itself; 4e-6 at |x| = 11.4), over a grid of 2,400,001 values
// in [-12, 12]; and the values at zero, the infinities and NaN. The header's tail polynomial is what
// this checks: the host's expf and IEEE division stand in for the device's approximate __expf and
// __fdividef (their error is the header's arithmetic, not this test's).
#include "tests/gpu/emulation/cuda_shim.h"
// The shim must come first.
#include <cmath>
#include <cstdio>
#include <limits>

#include "gpu/train/gelu.cuh"
#include "gtest/gtest.h"

namespace gemtb::gpu::train {
namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;

double Cdf(double x) { return 0.5 * std::erfc(-x * kInvSqrt2); }
double Pdf(double x) { return 0.39894228040143267794 * std::exp(-0.5 * x * x); }

TEST(GeluTail, GeluAndItsDerivativeAreTheErfFormToFp32) {
  constexpr int kSteps = 2400000;
  double worst_y = 0.0, worst_dy = 0.0;
  float at_y = 0.0f, at_dy = 0.0f;
  for (int i = 0; i <= kSteps; ++i) {
    const float x = static_cast<float>(-12.0 + 24.0 * i / kSteps);
    const double xd = x;
    const double y = xd * Cdf(xd), dy = Cdf(xd) + xd * Pdf(xd);
    const double y_scale = std::fabs(y) + 1e-30, dy_scale = Cdf(xd) + std::fabs(xd) * Pdf(xd) + 1e-30;
    const double bound = 1e-6 + 0.5 * xd * xd * 0x1p-24;
    const double ey = std::fabs(GeluOfBf16(x) - y) / (y_scale * bound);
    const double edy = std::fabs(GeluGradOfBf16(x) - dy) / (dy_scale * bound);
    if (ey > worst_y) worst_y = ey, at_y = x;
    if (edy > worst_dy) worst_dy = edy, at_dy = x;
  }
  EXPECT_LT(worst_y, 1.0) << "GELU at x = " << at_y << ": error / bound";
  EXPECT_LT(worst_dy, 1.0) << "GELU' at x = " << at_dy << ": error / bound";
  std::printf("worst error / bound: GELU %.3f at %g, GELU' %.3f at %g\n", worst_y, at_y, worst_dy, at_dy);
}

TEST(GeluTail, SpecialValues) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(GeluOfBf16(0.0f), 0.0f);
  EXPECT_EQ(GeluGradOfBf16(0.0f), 0.5f);
  EXPECT_EQ(GeluGradOfBf16(-0.0f), 0.5f);
  EXPECT_EQ(GeluOfBf16(kInf), kInf);
  // x phi(x) at an infinite x is infinity times zero, as the fp64 definition evaluates it too.
  EXPECT_TRUE(std::isnan(GeluGradOfBf16(kInf)));
  EXPECT_TRUE(std::isnan(GeluGradOfBf16(-kInf)));
  EXPECT_EQ(GeluOfBf16(-30.0f), -0.0f);  // the tail underflows: -30 times +0
  EXPECT_EQ(GeluOfBf16(30.0f), 30.0f);
  EXPECT_TRUE(std::isnan(GeluOfBf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(GeluGradOfBf16(std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
}  // namespace gemtb::gpu::train
