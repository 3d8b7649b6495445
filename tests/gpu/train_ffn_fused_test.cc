// The fused feed-forward kernels (gpu/train/ffn_fused.h) on the GPU against
// fp64 evaluations of the same bf16 values: u within a bf16 rounding of h W1 +
// b1, g = GELU(u) with the bytes of GELU's elementwise kernel, y within the
// fp32 summation bound of g W2 + b2 + residual; du within the roundings of dg
// and du of (ds W2^T) GELU'(u), dh within the summation bound of du W1^T. A
// second run gives the same bytes. Shapes and pointers refused by name (that
// part needs no GPU).
#include "gpu/train/ffn_fused.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/train/layer_norm.h"
#include "model/numerics/float_formats.h"
#include "tests/gpu/train_test_util.h"
#include "gtest/gtest.h"

namespace gemtb::gpu::train {
namespace {

using test::DeviceArray;
using test::ExpectCloseToScale;
using test::HaveSm90;

constexpr double kU = 1.0 / (1 << 24); // fp32's unit roundoff
constexpr double kBf16U =
    1.0 / (1 << 8); // bf16's unit roundoff (8 significant bits)

double Phi(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }
double Pdf(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI); }
double GeluGrad(double x) { return Phi(x) + x * Pdf(x); }
// The magnitude of GELU'(x)'s two terms: the scale of its rounding where they
// nearly cancel (x ~ -0.75).
double GeluGradTerms(double x) { return Phi(x) + std::fabs(x) * Pdf(x); }

TEST(FfnFused, ShapesAndPointersItCannotTakeAreRefusedByName) {
  EXPECT_TRUE(ValidateFfnShape({10, 128, 512}).ok());
  const absl::Status d = ValidateFfnShape({10, 96, 512});
  EXPECT_NE(d.message().find("d=96"), std::string::npos) << d;
  const absl::Status hidden = ValidateFfnShape({10, 128, 100});
  EXPECT_NE(hidden.message().find("hidden=100"), std::string::npos) << hidden;
  const absl::Status n = ValidateFfnShape({0, 128, 512});
  EXPECT_NE(n.message().find("n=0"), std::string::npos) << n;
  const absl::Status null =
      FfnBackwardInputFused({10, 128, 512}, nullptr, nullptr, nullptr, nullptr,
                            nullptr, nullptr, nullptr);
  EXPECT_NE(null.message().find("ds=null"), std::string::npos) << null;
}

void RunCase(int64_t n, int d, int hidden) {
  const std::string where = "n=" + std::to_string(n) +
                            " d=" + std::to_string(d) +
                            " hidden=" + std::to_string(hidden);
  const size_t nd = static_cast<size_t>(n) * d,
               nh = static_cast<size_t>(n) * hidden;
  const std::vector<uint16_t> h = test::RandomBf16(nd, 1, 0.0, 1.0);
  const std::vector<uint16_t> w1 =
      test::RandomBf16(static_cast<size_t>(d) * hidden, 2, 0.0, 0.15);
  const std::vector<uint16_t> b1 = test::RandomBf16(hidden, 3, 0.0, 0.5);
  const std::vector<uint16_t> w2 =
      test::RandomBf16(static_cast<size_t>(hidden) * d, 4, 0.0, 0.08);
  const std::vector<uint16_t> ds = test::RandomBf16(nd, 5, 0.0, 1.0);
  std::vector<float> b2(d), residual(nd);
  for (int j = 0; j < d; ++j)
    b2[j] = 0.01f * static_cast<float>(j % 13) - 0.05f;
  for (size_t e = 0; e < nd; ++e)
    residual[e] = 0.5f * std::sin(static_cast<float>(e));
  const std::vector<double> hv = test::Bf16Values(h),
                            w1v = test::Bf16Values(w1),
                            b1v = test::Bf16Values(b1),
                            w2v = test::Bf16Values(w2),
                            dsv = test::Bf16Values(ds);

  DeviceArray<uint16_t> h_d(h), w1_d(w1), b1_d(b1), w2_d(w2), ds_d(ds);
  DeviceArray<float> b2_d(b2), residual_d(residual),
      y_d{std::vector<float>(nd)}, dh_d{std::vector<float>(nd)};
  DeviceArray<uint16_t> u_d{std::vector<uint16_t>(nh)},
      g_d{std::vector<uint16_t>(nh)}, du_d{std::vector<uint16_t>(nh)},
      gelu_d{std::vector<uint16_t>(nh)};
  const FfnShape s{n, d, hidden};
  auto forward = [&] {
    return FfnForwardFused(s, h_d.bf16(), w1_d.bf16(), b1_d.bf16(), w2_d.bf16(),
                           b2_d.ptr, residual_d.ptr, u_d.bf16(), g_d.bf16(),
                           y_d.ptr, nullptr);
  };
  auto backward = [&] {
    return FfnBackwardInputFused(s, ds_d.bf16(), w2_d.bf16(), u_d.bf16(),
                                 w1_d.bf16(), du_d.bf16(), dh_d.ptr, nullptr);
  };
  ASSERT_TRUE(forward().ok()) << where;
  ASSERT_TRUE(backward().ok()) << where;
  ASSERT_TRUE(GeluForward<__nv_bfloat16>(u_d.bf16(), static_cast<int64_t>(nh),
                                         gelu_d.bf16(), nullptr)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << where;
  const std::vector<uint16_t> u = u_d.Get(nh), g = g_d.Get(nh),
                              du = du_d.Get(nh), gelu = gelu_d.Get(nh);
  const std::vector<float> y = y_d.Get(nd), dh = dh_d.Get(nd);

  // Forward. u: the fp32 sum (bounded by d + 1 roundoffs of its terms'
  // magnitudes) rounded once to bf16.
  std::vector<double> u_got(nh), u_want(nh), u_scale(nh);
  for (int64_t r = 0; r < n; ++r) {
    for (int c = 0; c < hidden; ++c) {
      double sum = b1v[c], mag = std::fabs(b1v[c]);
      for (int k = 0; k < d; ++k) {
        const double t =
            hv[r * d + k] * w1v[static_cast<size_t>(k) * hidden + c];
        sum += t;
        mag += std::fabs(t);
      }
      const size_t e = static_cast<size_t>(r) * hidden + c;
      u_got[e] = numerics::Bf16BitsToFloat(u[e]);
      u_want[e] = sum;
      u_scale[e] = mag;
    }
  }
  ExpectCloseToScale(u_got, u_want, u_scale, kBf16U + (d + 1) * kU, 0.0,
                     where + " u");
  EXPECT_EQ(std::memcmp(g.data(), gelu.data(), nh * sizeof(uint16_t)), 0)
      << where << ": g is not GeluForward(u)";
  std::vector<double> y_got(nd), y_want(nd), y_scale(nd);
  for (int64_t r = 0; r < n; ++r) {
    for (int j = 0; j < d; ++j) {
      const size_t e = static_cast<size_t>(r) * d + j;
      double sum = static_cast<double>(b2[j]) + residual[e],
             mag = std::fabs(b2[j]) + std::fabs(residual[e]);
      for (int c = 0; c < hidden; ++c) {
        const double t = numerics::Bf16BitsToFloat(g[r * hidden + c]) *
                         w2v[static_cast<size_t>(c) * d + j];
        sum += t;
        mag += std::fabs(t);
      }
      y_got[e] = y[e];
      y_want[e] = sum;
      y_scale[e] = mag;
    }
  }
  ExpectCloseToScale(y_got, y_want, y_scale, (hidden + 2) * kU, 0.0,
                     where + " y");

  // Backward. du: dg's fp32 sum rounded to bf16, times GELU'(u) (fp32 on the
  // device: erfc within 4 ulp, exp within 2, each product rounded), rounded to
  // bf16.
  std::vector<double> du_got(nh), du_want(nh), du_scale(nh);
  for (int64_t r = 0; r < n; ++r) {
    for (int c = 0; c < hidden; ++c) {
      double sum = 0, mag = 0;
      for (int k = 0; k < d; ++k) {
        const double t = dsv[r * d + k] * w2v[static_cast<size_t>(c) * d + k];
        sum += t;
        mag += std::fabs(t);
      }
      const size_t e = static_cast<size_t>(r) * hidden + c;
      const double ue = numerics::Bf16BitsToFloat(u[e]);
      du_got[e] = numerics::Bf16BitsToFloat(du[e]);
      du_want[e] = sum * GeluGrad(ue);
      du_scale[e] = mag * GeluGradTerms(ue);
    }
  }
  ExpectCloseToScale(du_got, du_want, du_scale, 2 * kBf16U + (d + 16) * kU, 0.0,
                     where + " du");
  std::vector<double> dh_got(nd), dh_want(nd), dh_scale(nd);
  for (int64_t r = 0; r < n; ++r) {
    for (int j = 0; j < d; ++j) {
      double sum = 0, mag = 0;
      for (int c = 0; c < hidden; ++c) {
        const double t = numerics::Bf16BitsToFloat(du[r * hidden + c]) *
                         w1v[static_cast<size_t>(j) * hidden + c];
        sum += t;
        mag += std::fabs(t);
      }
      const size_t e = static_cast<size_t>(r) * d + j;
      dh_got[e] = dh[e];
      dh_want[e] = sum;
      dh_scale[e] = mag;
    }
  }
  ExpectCloseToScale(dh_got, dh_want, dh_scale, hidden * kU, 0.0,
                     where + " dh");

  // The same bytes again.
  ASSERT_TRUE(forward().ok());
  ASSERT_TRUE(backward().ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(std::memcmp(u_d.Get(nh).data(), u.data(), nh * sizeof(uint16_t)), 0)
      << where << ": u again";
  EXPECT_EQ(std::memcmp(y_d.Get(nd).data(), y.data(), nd * sizeof(float)), 0)
      << where << ": y again";
  EXPECT_EQ(std::memcmp(du_d.Get(nh).data(), du.data(), nh * sizeof(uint16_t)),
            0)
      << where << ": du again";
  EXPECT_EQ(std::memcmp(dh_d.Get(nd).data(), dh.data(), nd * sizeof(float)), 0)
      << where << ": dh again";
}

TEST(FfnFused, ForwardAndBackwardMatchFp64EvaluationsOfTheSameValues) {
  if (!HaveSm90())
    GTEST_SKIP() << "needs an sm_90 GPU";
  RunCase(1000, 128, 512); // small's widths; a partial last tile
  RunCase(77, 32, 64);     // tiny's
  RunCase(300, 64, 192);
  RunCase(1, 128, 64);
}

TEST(FfnFused, ResidualMayBeTheOutput) {
  if (!HaveSm90())
    GTEST_SKIP() << "needs an sm_90 GPU";
  const int64_t n = 200;
  const int d = 128, hidden = 128;
  const size_t nd = static_cast<size_t>(n) * d;
  const std::vector<uint16_t> h = test::RandomBf16(nd, 6, 0.0, 1.0),
                              w1 = test::RandomBf16(d * hidden, 7, 0.0, 0.1),
                              b1 = test::RandomBf16(hidden, 8, 0.0, 0.5),
                              w2 = test::RandomBf16(hidden * d, 9, 0.0, 0.1);
  std::vector<float> residual(nd);
  for (size_t e = 0; e < nd; ++e)
    residual[e] = std::cos(static_cast<float>(e));
  DeviceArray<uint16_t> h_d(h), w1_d(w1), b1_d(b1), w2_d(w2),
      u_d{std::vector<uint16_t>(n * hidden)},
      g_d{std::vector<uint16_t>(n * hidden)};
  DeviceArray<float> separate{std::vector<float>(nd)}, in_place(residual),
      residual_d(residual);
  const FfnShape s{n, d, hidden};
  ASSERT_TRUE(FfnForwardFused(s, h_d.bf16(), w1_d.bf16(), b1_d.bf16(),
                              w2_d.bf16(), nullptr, residual_d.ptr, u_d.bf16(),
                              g_d.bf16(), separate.ptr, nullptr)
                  .ok());
  ASSERT_TRUE(FfnForwardFused(s, h_d.bf16(), w1_d.bf16(), b1_d.bf16(),
                              w2_d.bf16(), nullptr, in_place.ptr, u_d.bf16(),
                              g_d.bf16(), in_place.ptr, nullptr)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(std::memcmp(separate.Get(nd).data(), in_place.Get(nd).data(),
                        nd * sizeof(float)),
            0);
}

} // namespace
} // namespace gemtb::gpu::train
