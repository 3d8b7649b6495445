// The fused feed-forward backward (gpu/train/ffn_fused.h) on the GPU, against fp64 evaluations from
// the kernel's own bf16 values: du within the roundings of dg and du of (ds W2^T) GELU'(u); dx (added
// to) and LayerNorm's parameter gradients (added to) near LayerNorm's backward of du W1^T, with the
// row statistics of LayerNormForward's kernel. A second run gives the same bytes. Shapes and pointers
// refused by name (that part needs no GPU).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/train/ffn_fused.h"
#include "gpu/train/layer_norm.h"
#include "gtest/gtest.h"
#include "model/numerics/float_formats.h"
#include "reference/model/ops.h"
#include "tests/gpu/train_test_util.h"

namespace gemtb::gpu::train {
namespace {

using test::DeviceArray;
using test::ExpectClose;
using test::ExpectCloseToScale;
using test::HaveSm90;
using test::Wave;

using test::kBf16U;
using test::kFp32U;

using reference::model::GeluGrad;
using test::GeluGradTerms;

TEST(FfnFused, ShapesAndPointersItCannotTakeAreRefusedByName) {
  EXPECT_TRUE(ValidateFfnShape({10, 128, 512}).ok());
  const absl::Status d = ValidateFfnShape({10, 96, 512});
  EXPECT_NE(d.message().find("d=96"), std::string::npos) << d;
  const absl::Status hidden = ValidateFfnShape({10, 128, 100});
  EXPECT_NE(hidden.message().find("hidden=100"), std::string::npos) << hidden;
  const absl::Status n = ValidateFfnShape({0, 128, 512});
  EXPECT_NE(n.message().find("n=0"), std::string::npos) << n;
  const absl::Status null = FfnBackwardFused({10, 128, 512}, nullptr, nullptr, FfnWeights{}, FfnTape{}, nullptr,
                                             nullptr, nullptr, nullptr, nullptr);
  EXPECT_NE(null.message().find("ds=null"), std::string::npos) << null;
  auto* const some16 = reinterpret_cast<__nv_bfloat16*>(16);
  auto* const some32 = reinterpret_cast<float*>(32);
  const absl::Status no_weights =
      FfnBackwardFused({10, 128, 512}, some16, some32, FfnWeights{}, FfnTape{some32, some32, some16}, some16, some32,
                       some32, some32, nullptr);
  EXPECT_NE(no_weights.message().find("gamma=null"), std::string::npos) << no_weights;
}

void RunCase(int64_t n, int d, int hidden) {
  const std::string where = "n=" + std::to_string(n) + " d=" + std::to_string(d) + " hidden=" + std::to_string(hidden);
  const size_t nd = static_cast<size_t>(n) * d, nh = static_cast<size_t>(n) * hidden;
  const std::vector<float> x = Wave(nd, 1.0f, 0.2f, 0.37f), gamma = Wave(d, 0.2f, 1.0f, 1.3f),
                           beta = Wave(d, 0.1f, 0.0f, 0.7f), dx0 = Wave(nd, 0.5f, 0.0f, 0.91f),
                           dgamma0 = Wave(d, 1.0f, 0.0f, 0.5f), dbeta0 = Wave(d, 1.0f, 0.0f, 0.9f);
  const std::vector<uint16_t> w1 = test::RandomBf16(static_cast<size_t>(d) * hidden, 2, 0.0, 0.15);
  const std::vector<uint16_t> u = test::RandomBf16(nh, 3, 0.0, 1.5);  // the forward's pre-activations
  const std::vector<uint16_t> w2 = test::RandomBf16(static_cast<size_t>(hidden) * d, 4, 0.0, 0.08);
  const std::vector<uint16_t> ds = test::RandomBf16(nd, 5, 0.0, 1.0);
  const std::vector<double> w1v = test::Bf16Values(w1), w2v = test::Bf16Values(w2), dsv = test::Bf16Values(ds);

  DeviceArray<float> x_d(x), gamma_d(gamma), beta_d(beta), mean_d{std::vector<float>(n)}, rstd_d{std::vector<float>(n)},
      dx_d(dx0), dgamma_d(dgamma0), dbeta_d(dbeta0);
  DeviceArray<uint16_t> w1_d(w1), u_d(u), w2_d(w2), ds_d(ds), h_d{std::vector<uint16_t>(nd)},
      du_d{std::vector<uint16_t>(nh)};
  // The row statistics the forward's LayerNorm kernel keeps.
  ASSERT_TRUE(
      LayerNormForward(RowsShape{n, d}, x_d.ptr, gamma_d.ptr, beta_d.ptr, h_d.bf16(), mean_d.ptr, rstd_d.ptr, nullptr)
          .ok());
  const FfnShape s{n, d, hidden};
  const FfnWeights w{gamma_d.ptr, w1_d.bf16(), w2_d.bf16()};
  const FfnTape tape{mean_d.ptr, rstd_d.ptr, u_d.bf16()};
  auto run = [&] {
    dx_d.Put(dx0);
    dgamma_d.Put(dgamma0);
    dbeta_d.Put(dbeta0);
    EXPECT_TRUE(
        FfnBackwardFused(s, ds_d.bf16(), x_d.ptr, w, tape, du_d.bf16(), dx_d.ptr, dgamma_d.ptr, dbeta_d.ptr, nullptr)
            .ok())
        << where;
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << where;
  };
  run();
  const std::vector<uint16_t> du = du_d.Get(nh);
  const std::vector<float> mean = mean_d.Get(n), rstd = rstd_d.Get(n), dx = dx_d.Get(nd), dgamma = dgamma_d.Get(d),
                           dbeta = dbeta_d.Get(d);

  // du: dg's fp32 sum rounded to bf16, times GELU'(u) (fp32 on the device: erfc within 4 ulp,
  // exp within 2, each product rounded), rounded to bf16.
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
  ExpectCloseToScale(du_got, du_want, du_scale, 2 * kBf16U + (d + 16) * kFp32U, 0.0, where + " du");
  // LayerNorm's backward of dh = du W1^T in fp64 (with the kernel's du and statistics): dx added to
  // dx0; the parameter gradients added to theirs. The kernel's dh is an fp32 sum of `hidden` terms
  // and the backward's own operations are fp32: 1e-4 of the gradient's root mean square leaves room
  // for both, and a misplaced row or column is off by the gradient's size.
  std::vector<double> dh(nd);
  for (int64_t r = 0; r < n; ++r) {
    for (int j = 0; j < d; ++j) {
      for (int c = 0; c < hidden; ++c) {
        dh[r * d + j] += numerics::Bf16BitsToFloat(du[r * hidden + c]) * w1v[static_cast<size_t>(j) * hidden + c];
      }
    }
  }
  const test::LayerNormBackward64 want = test::LayerNormBackwardFp64(x, gamma, mean, rstd, dh, n, d, dgamma0, dbeta0);
  std::vector<double> dx_got(dx.begin(), dx.end()), dx_want(nd);
  for (size_t e = 0; e < nd; ++e) dx_want[e] = dx0[e] + want.dx[e];
  const std::vector<double> dgamma_got(dgamma.begin(), dgamma.end()), dbeta_got(dbeta.begin(), dbeta.end());
  ExpectClose(dx_got, dx_want, 2 * kFp32U, 1e-4 * test::Rms(want.dx), where + " dx");
  ExpectClose(dgamma_got, want.dgamma, 1e-5, 1e-4 * test::Rms(want.dgamma), where + " dgamma");
  ExpectClose(dbeta_got, want.dbeta, 1e-5, 1e-4 * test::Rms(want.dbeta), where + " dbeta");

  // The same bytes again.
  run();
  EXPECT_EQ(std::memcmp(du_d.Get(nh).data(), du.data(), nh * sizeof(uint16_t)), 0) << where << ": du again";
  EXPECT_EQ(std::memcmp(dx_d.Get(nd).data(), dx.data(), nd * sizeof(float)), 0) << where << ": dx again";
  EXPECT_EQ(std::memcmp(dgamma_d.Get(d).data(), dgamma.data(), d * sizeof(float)), 0) << where << ": dgamma again";
  EXPECT_EQ(std::memcmp(dbeta_d.Get(d).data(), dbeta.data(), d * sizeof(float)), 0) << where << ": dbeta again";
}

TEST(FfnFused, BackwardMatchesFp64EvaluationsOfTheSameValues) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  RunCase(1000, 128, 512);  // small's widths; a partial last tile and LayerNorm block
  RunCase(77, 32, 64);      // tiny's
  RunCase(300, 64, 192);
  RunCase(1, 128, 64);
}

}  // namespace
}  // namespace gemtb::gpu::train
