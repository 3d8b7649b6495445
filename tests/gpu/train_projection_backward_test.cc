// The attention projections' fused input gradient with LayerNorm's backward
// (gpu/train/projection_backward.h) on the GPU, against fp64: dh = sum_s dy_s W_s^T of the same bf16
// values, LayerNorm's backward of it added to dx and to the parameters' gradients, within 1e-4 of the
// gradients' root mean square (a misplaced row, column or source is off by their size); a second run
// gives the same bytes. Bad arguments refused by name (without a GPU).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gpu/train/projection_backward.h"
#include "gtest/gtest.h"
#include "model/numerics/float_formats.h"
#include "tests/gpu/train_test_util.h"

namespace gemtb::gpu::train {
namespace {

using test::DeviceArray;
using test::ExpectClose;
using test::HaveSm90;
using test::Wave;

TEST(ProjectionsBackward, BadArgumentsAreRefusedByName) {
  EXPECT_TRUE(ValidateProjectionsShape(10, 128).ok());
  const absl::Status d = ValidateProjectionsShape(10, 96);
  EXPECT_NE(d.message().find("d=96"), std::string::npos) << d;
  const absl::Status none = ProjectionsLayerNormBackward(10, 128, {}, LayerNormGrads{}, nullptr);
  EXPECT_NE(none.message().find("sources=0"), std::string::npos) << none;
  const absl::Status null = ProjectionsLayerNormBackward(10, 128, {ProjectionGrad{}}, LayerNormGrads{}, nullptr);
  EXPECT_NE(null.message().find("sources[0].dy=null"), std::string::npos) << null;
}

void RunCase(int64_t n, int d, int sources) {
  const std::string where =
      "n=" + std::to_string(n) + " d=" + std::to_string(d) + " sources=" + std::to_string(sources);
  const size_t nd = static_cast<size_t>(n) * d;
  std::vector<std::vector<uint16_t>> dy, w;
  for (int s = 0; s < sources; ++s) {
    dy.push_back(test::RandomBf16(nd, 10 + s, 0.0, 1.0));
    w.push_back(test::RandomBf16(static_cast<size_t>(d) * d, 20 + s, 0.0, 0.1));
  }
  const std::vector<float> x = Wave(nd, 1.0f, 0.2f, 0.37f), gamma = Wave(d, 0.2f, 1.0f, 1.3f),
                           dx0 = Wave(nd, 0.5f, 0.0f, 0.91f), dgamma0 = Wave(d, 1.0f, 0.0f, 0.5f),
                           dbeta0 = Wave(d, 1.0f, 0.0f, 0.9f);
  std::vector<float> mean(n), rstd(n);
  for (int64_t r = 0; r < n; ++r) {
    double s = 0, s2 = 0;
    for (int j = 0; j < d; ++j) s += x[r * d + j];
    for (int j = 0; j < d; ++j) s2 += (x[r * d + j] - s / d) * (x[r * d + j] - s / d);
    mean[r] = static_cast<float>(s / d);
    rstd[r] = static_cast<float>(1.0 / std::sqrt(s2 / d + 1e-5));
  }
  std::vector<std::unique_ptr<DeviceArray<uint16_t>>> dy_d, w_d;
  std::vector<ProjectionGrad> grads;
  for (int s = 0; s < sources; ++s) {
    dy_d.push_back(std::make_unique<DeviceArray<uint16_t>>(dy[s]));
    w_d.push_back(std::make_unique<DeviceArray<uint16_t>>(w[s]));
    grads.push_back({dy_d.back()->bf16(), w_d.back()->bf16()});
  }
  DeviceArray<float> x_d(x), gamma_d(gamma), mean_d(mean), rstd_d(rstd), dx_d(dx0), dgamma_d(dgamma0), dbeta_d(dbeta0);
  auto run = [&] {
    dx_d.Put(dx0);
    dgamma_d.Put(dgamma0);
    dbeta_d.Put(dbeta0);
    EXPECT_TRUE(
        ProjectionsLayerNormBackward(
            n, d, grads, {x_d.ptr, gamma_d.ptr, mean_d.ptr, rstd_d.ptr, dx_d.ptr, dgamma_d.ptr, dbeta_d.ptr}, nullptr)
            .ok())
        << where;
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << where;
  };
  run();
  const std::vector<float> dx = dx_d.Get(nd), dgamma = dgamma_d.Get(d), dbeta = dbeta_d.Get(d);

  std::vector<double> dh(nd);
  for (int64_t r = 0; r < n; ++r) {
    for (int j = 0; j < d; ++j) {
      for (int s = 0; s < sources; ++s) {
        for (int k = 0; k < d; ++k) {
          dh[r * d + j] += double{numerics::Bf16BitsToFloat(dy[s][r * d + k])} *
                           numerics::Bf16BitsToFloat(w[s][static_cast<size_t>(j) * d + k]);
        }
      }
    }
  }
  const test::LayerNormBackward64 want = test::LayerNormBackwardFp64(x, gamma, mean, rstd, dh, n, d, dgamma0, dbeta0);
  std::vector<double> dx_got(dx.begin(), dx.end()), dx_want(nd);
  for (size_t e = 0; e < nd; ++e) dx_want[e] = dx0[e] + want.dx[e];
  ExpectClose(dx_got, dx_want, 2.0 / (1 << 24), 1e-4 * test::Rms(want.dx), where + " dx");
  ExpectClose(std::vector<double>(dgamma.begin(), dgamma.end()), want.dgamma, 1e-5, 1e-4 * test::Rms(want.dgamma),
              where + " dgamma");
  ExpectClose(std::vector<double>(dbeta.begin(), dbeta.end()), want.dbeta, 1e-5, 1e-4 * test::Rms(want.dbeta),
              where + " dbeta");

  run();
  EXPECT_EQ(std::memcmp(dx_d.Get(nd).data(), dx.data(), nd * sizeof(float)), 0) << where << ": dx again";
  EXPECT_EQ(std::memcmp(dgamma_d.Get(d).data(), dgamma.data(), d * sizeof(float)), 0) << where << ": dgamma again";
}

TEST(ProjectionsBackward, MatchesFp64) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  RunCase(1000, 128, 3);  // small's self-attention block; a partial last tile and block
  RunCase(300, 128, 1);   // a cross-attention block's queries
  RunCase(77, 32, 3);     // tiny's width
  RunCase(65, 64, 2);
}

}  // namespace
}  // namespace gemtb::gpu::train
