// The trainer's LayerNorm and GELU kernels (gpu/train/layer_norm.h) against fp64 evaluations of the
// reference model's definitions on the same bf16 inputs: forward, saved statistics, backward, the
// parameter gradients added to, and the same bytes on a second run; bad shapes refused by name.
#include "gpu/train/layer_norm.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/gpu/train_test_util.h"
#include "model/numerics/float_formats.h"
#include "reference/model/ops.h"

namespace gemtb::gpu::train {
namespace {

using test::Bf16Values;
using test::ExpectCloseToRms;
using test::HaveSm90;
using test::RandomBf16;

std::vector<float> RandomFloats(size_t n, uint64_t seed, double mean, double scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(mean, scale);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(normal(rng));
  return v;
}

template <typename T>
struct DeviceArray {
  T* ptr = nullptr;
  template <typename U>
  explicit DeviceArray(const std::vector<U>& host) {
    static_assert(sizeof(T) == sizeof(U));
    EXPECT_EQ(cudaMalloc(&ptr, host.size() * sizeof(T) + 1), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceArray() { cudaFree(ptr); }
  template <typename U>
  std::vector<U> Get(size_t n) const {
    std::vector<U> host(n);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr, n * sizeof(U), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
};

template <typename T>
std::vector<double> ToDoubles(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

TEST(TrainLayerNorm, ShapesItCannotTakeAreRefusedByName) {
  EXPECT_TRUE(ValidateRowsShape({3, 7}).ok());
  EXPECT_NE(ValidateRowsShape({0, 7}).message().find("n=0"), std::string::npos);
  EXPECT_NE(ValidateRowsShape({3, 65537}).message().find("width=65537"), std::string::npos);
  EXPECT_NE(GeluForward(nullptr, 0, nullptr, nullptr).message().find("count=0"), std::string::npos);
}

TEST(TrainLayerNorm, ForwardAndBackwardMatchTheReferenceDefinitionsInFp64) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (const RowsShape s : {RowsShape{300, 256}, RowsShape{1, 1}, RowsShape{5, 33}, RowsShape{70, 1000}}) {
    const std::string where = "n=" + std::to_string(s.n) + " width=" + std::to_string(s.width);
    const size_t n = s.n, w = s.width;
    const std::vector<uint16_t> x_bits = RandomBf16(n * w, 1, 0.3, 2.0), dy_bits = RandomBf16(n * w, 2, 0.0, 1.0);
    const std::vector<double> x = Bf16Values(x_bits), dy = Bf16Values(dy_bits);
    const std::vector<float> gamma = RandomFloats(w, 3, 1.0, 0.2), beta = RandomFloats(w, 4, 0.0, 0.5);
    const std::vector<float> dgamma0 = RandomFloats(w, 5, 0.0, 1.0), dbeta0 = RandomFloats(w, 6, 0.0, 1.0);

    // layers.h's LayerNorm in fp64.
    std::vector<double> y(n * w), mean(n), rstd(n), dx(n * w), dgamma(dgamma0.begin(), dgamma0.end()),
        dbeta(dbeta0.begin(), dbeta0.end());
    for (size_t t = 0; t < n; ++t) {
      double m = 0, var = 0;
      for (size_t i = 0; i < w; ++i) m += x[t * w + i];
      m /= static_cast<double>(w);
      for (size_t i = 0; i < w; ++i) var += (x[t * w + i] - m) * (x[t * w + i] - m);
      var /= static_cast<double>(w);
      mean[t] = m;
      rstd[t] = 1.0 / std::sqrt(var + 1e-5);
      double sum = 0, sum_h = 0;
      for (size_t i = 0; i < w; ++i) {
        const double h = (x[t * w + i] - m) * rstd[t];
        y[t * w + i] = h * gamma[i] + beta[i];
        const double dh = dy[t * w + i] * gamma[i];
        sum += dh;
        sum_h += dh * h;
        dgamma[i] += dy[t * w + i] * h;
        dbeta[i] += dy[t * w + i];
      }
      sum /= static_cast<double>(w);
      sum_h /= static_cast<double>(w);
      for (size_t i = 0; i < w; ++i) {
        const double h = (x[t * w + i] - m) * rstd[t];
        dx[t * w + i] = rstd[t] * (dy[t * w + i] * gamma[i] - sum - h * sum_h);
      }
    }

    DeviceArray<__nv_bfloat16> d_x(x_bits), d_dy(dy_bits), d_y(x_bits), d_dx(x_bits);
    const std::vector<float> zeros(n);
    DeviceArray<float> d_gamma(gamma), d_beta(beta), d_mean(zeros), d_rstd(zeros);
    DeviceArray<float> d_dgamma(dgamma0), d_dbeta(dbeta0);
    ASSERT_TRUE(LayerNormForward(s, d_x.ptr, d_gamma.ptr, d_beta.ptr, d_y.ptr, d_mean.ptr, d_rstd.ptr, nullptr).ok());
    ASSERT_TRUE(LayerNormBackward(s, d_x.ptr, d_gamma.ptr, d_mean.ptr, d_rstd.ptr, d_dy.ptr, d_dx.ptr, d_dgamma.ptr,
                                  d_dbeta.ptr, nullptr)
                    .ok());
    const std::vector<uint16_t> y_bits = d_y.Get<uint16_t>(n * w), dx_bits = d_dx.Get<uint16_t>(n * w);
    const std::vector<float> dgamma_got = d_dgamma.Get<float>(w), dbeta_got = d_dbeta.Get<float>(w);
    ExpectCloseToRms(Bf16Values(y_bits), y, 1.0 / 128, 1e-3, where + " y");
    ExpectCloseToRms(ToDoubles(d_mean.Get<float>(n)), mean, 1e-5, 1e-5, where + " mean");
    ExpectCloseToRms(ToDoubles(d_rstd.Get<float>(n)), rstd, 1e-5, 0, where + " rstd");
    ExpectCloseToRms(Bf16Values(dx_bits), dx, 1.0 / 128, 2e-3, where + " dx");
    ExpectCloseToRms(ToDoubles(dgamma_got), dgamma, 1e-4, 1e-4, where + " dgamma");
    ExpectCloseToRms(ToDoubles(dbeta_got), dbeta, 1e-4, 1e-4, where + " dbeta");

    // Again: the same bytes.
    DeviceArray<float> d_dgamma2(dgamma0), d_dbeta2(dbeta0);
    ASSERT_TRUE(LayerNormForward(s, d_x.ptr, d_gamma.ptr, d_beta.ptr, d_y.ptr, d_mean.ptr, d_rstd.ptr, nullptr).ok());
    ASSERT_TRUE(LayerNormBackward(s, d_x.ptr, d_gamma.ptr, d_mean.ptr, d_rstd.ptr, d_dy.ptr, d_dx.ptr, d_dgamma2.ptr,
                                  d_dbeta2.ptr, nullptr)
                    .ok());
    EXPECT_EQ(d_y.Get<uint16_t>(n * w), y_bits) << where;
    EXPECT_EQ(d_dx.Get<uint16_t>(n * w), dx_bits) << where;
    EXPECT_EQ(d_dgamma2.Get<float>(w), dgamma_got) << where;
    EXPECT_EQ(d_dbeta2.Get<float>(w), dbeta_got) << where;
  }
}

TEST(TrainLayerNorm, GeluMatchesTheReferenceDefinitionInFp64) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const size_t count = 100003;
  std::vector<uint16_t> x_bits = RandomBf16(count, 7, 0.0, 3.0);
  x_bits[0] = numerics::DoubleToBf16BitsRne(-12.0);  // far tails: y and the gradient underflow to ~0
  x_bits[1] = numerics::DoubleToBf16BitsRne(12.0);
  x_bits[2] = numerics::DoubleToBf16BitsRne(0.0);
  const std::vector<uint16_t> dy_bits = RandomBf16(count, 8, 0.0, 1.0);
  const std::vector<double> x = Bf16Values(x_bits), dy = Bf16Values(dy_bits);
  std::vector<double> y(count), dx(count);
  for (size_t e = 0; e < count; ++e) {
    y[e] = reference::model::Gelu(x[e]);
    dx[e] = dy[e] * reference::model::GeluGrad(x[e]);
  }
  DeviceArray<__nv_bfloat16> d_x(x_bits), d_dy(dy_bits), d_y(x_bits), d_dx(x_bits);
  ASSERT_TRUE(GeluForward(d_x.ptr, static_cast<int64_t>(count), d_y.ptr, nullptr).ok());
  ASSERT_TRUE(GeluBackward(d_x.ptr, d_dy.ptr, static_cast<int64_t>(count), d_dx.ptr, nullptr).ok());
  // bf16 rounding of the result, plus fp32 erfc/exp error where the result is tiny.
  ExpectCloseToRms(Bf16Values(d_y.Get<uint16_t>(count)), y, 1.0 / 128, 1e-6, "gelu y");
  ExpectCloseToRms(Bf16Values(d_dx.Get<uint16_t>(count)), dx, 1.0 / 128, 1e-6, "gelu dx");
}

}  // namespace
}  // namespace gemtb::gpu::train
