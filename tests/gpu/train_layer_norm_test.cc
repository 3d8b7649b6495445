// The trainer's LayerNorm and GELU kernels (gpu/train/layer_norm.h), on bf16 and on fp32
// activations, against fp64 evaluations of the reference model's definitions on the same inputs:
// forward, saved statistics, backward, the parameter gradients added to, and the same bytes on a
// second run; bad shapes refused by name. The forward from fp32 rows into bf16 ones writes the fp32
// forward's values rounded to bf16, and the same statistics, bit for bit. The backward of bf16 output
// gradients handing its result on in bf16 is the fp32 backward of the widened values, then ToBf16.
//
// bf16 results are held to bf16's rounding. fp32 results are held to 1e-5 (168 ulps of 2^-24) of the
// magnitude of the terms they are made of, plus 1e-6: a row's sums run in chunks of width/32 values
// per lane and a 5-step butterfly, so their rounding is at most (width/32 + 6) 2^-24 of the sum of
// the terms' magnitudes (< 40 ulps at width 1000); where a result cancels (x - mean, h gamma + beta,
// the backward's dh - mean(dh) - h mean(dh h)) the bound is that of its terms, not of the result.
#include "gpu/train/layer_norm.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "gpu/train/model_kernels.h"
#include "gtest/gtest.h"
#include "tests/gpu/train_test_util.h"
#include "model/numerics/float_formats.h"
#include "reference/model/ops.h"

namespace gemtb::gpu::train {
namespace {

using test::Activation;
using test::ActivationValues;
using test::DeviceArray;
using test::ExpectClose;
using test::ExpectCloseToRms;
using test::ExpectCloseToScale;
using test::HaveSm90;
using test::RandomActivations;

std::vector<float> RandomFloats(size_t n, uint64_t seed, double mean, double scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(mean, scale);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(normal(rng));
  return v;
}

template <typename T>
std::vector<double> ToDoubles(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

TEST(TrainLayerNorm, ShapesItCannotTakeAreRefusedByName) {
  EXPECT_TRUE(ValidateRowsShape({3, 7}).ok());
  EXPECT_NE(ValidateRowsShape({0, 7}).message().find("n=0"), std::string::npos);
  EXPECT_NE(ValidateRowsShape({3, 65537}).message().find("width=65537"), std::string::npos);
  EXPECT_NE(GeluForward<__nv_bfloat16>(nullptr, 0, nullptr, nullptr).message().find("count=0"), std::string::npos);
  EXPECT_NE(GeluBackward<float>(nullptr, nullptr, -2, nullptr, nullptr).message().find("count=-2"), std::string::npos);
  EXPECT_NE(LayerNormForward<float>({0, 7}, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr)
                .message()
                .find("n=0"),
            std::string::npos);
}

template <typename T>
class TrainLayerNormOn : public ::testing::Test {};
TYPED_TEST_SUITE(TrainLayerNormOn, test::ActivationTypes, test::ActivationName);

TYPED_TEST(TrainLayerNormOn, ForwardAndBackwardMatchTheReferenceDefinitionsInFp64) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  using T = TypeParam;
  using Host = typename Activation<T>::Host;
  // fp32 rows of at most 512 values take the fused backward (partial blocks and warps at 300 and 1000
  // rows), 1000-wide ones the two-pass one.
  for (const RowsShape s : {RowsShape{300, 256}, RowsShape{1, 1}, RowsShape{5, 33}, RowsShape{70, 1000},
                            RowsShape{1000, 128}}) {
    const std::string where = std::string(Activation<T>::kName) + " n=" + std::to_string(s.n) +
                              " width=" + std::to_string(s.width);
    const size_t n = s.n, w = s.width;
    const std::vector<Host> x_host = RandomActivations<T>(n * w, 1, 0.3, 2.0),
                            dy_host = RandomActivations<T>(n * w, 2, 0.0, 1.0);
    const std::vector<double> x = ActivationValues<T>(x_host), dy = ActivationValues<T>(dy_host);
    const std::vector<float> gamma = RandomFloats(w, 3, 1.0, 0.2), beta = RandomFloats(w, 4, 0.0, 0.5);
    const std::vector<float> dgamma0 = RandomFloats(w, 5, 0.0, 1.0), dbeta0 = RandomFloats(w, 6, 0.0, 1.0);

    // layers.h's LayerNorm in fp64, with the magnitudes of the terms of each result (fp32 bounds).
    std::vector<double> y(n * w), mean(n), rstd(n), dx(n * w), dgamma(dgamma0.begin(), dgamma0.end()),
        dbeta(dbeta0.begin(), dbeta0.end());
    std::vector<double> y_scale(n * w), mean_scale(n), dx_scale(n * w), dgamma_scale(w), dbeta_scale(w);
    for (size_t i = 0; i < w; ++i) {
      dgamma_scale[i] = std::fabs(dgamma0[i]);
      dbeta_scale[i] = std::fabs(dbeta0[i]);
    }
    for (size_t t = 0; t < n; ++t) {
      double m = 0, var = 0, mean_abs = 0;
      for (size_t i = 0; i < w; ++i) {
        m += x[t * w + i];
        mean_abs += std::fabs(x[t * w + i]);
      }
      m /= static_cast<double>(w);
      mean_abs /= static_cast<double>(w);
      for (size_t i = 0; i < w; ++i) var += (x[t * w + i] - m) * (x[t * w + i] - m);
      var /= static_cast<double>(w);
      mean[t] = m;
      mean_scale[t] = mean_abs;
      rstd[t] = 1.0 / std::sqrt(var + 1e-5);
      // h = (x - mean) rstd is off by up to the mean's rounding times rstd: c per unit of gamma.
      const double c = rstd[t] * mean_abs;
      double sum = 0, sum_h = 0, sum_abs = 0, sum_h_abs = 0;
      for (size_t i = 0; i < w; ++i) {
        const double h = (x[t * w + i] - m) * rstd[t];
        y[t * w + i] = h * gamma[i] + beta[i];
        y_scale[t * w + i] = std::fabs(gamma[i]) * (std::fabs(h) + c) + std::fabs(beta[i]);
        const double dh = dy[t * w + i] * gamma[i];
        sum += dh;
        sum_h += dh * h;
        sum_abs += std::fabs(dh);
        sum_h_abs += std::fabs(dh * h);
        dgamma[i] += dy[t * w + i] * h;
        dbeta[i] += dy[t * w + i];
        dgamma_scale[i] += std::fabs(dy[t * w + i]) * (std::fabs(h) + c);
        dbeta_scale[i] += std::fabs(dy[t * w + i]);
      }
      sum /= static_cast<double>(w);
      sum_h /= static_cast<double>(w);
      sum_abs /= static_cast<double>(w);
      sum_h_abs /= static_cast<double>(w);
      for (size_t i = 0; i < w; ++i) {
        const double h = (x[t * w + i] - m) * rstd[t];
        dx[t * w + i] = rstd[t] * (dy[t * w + i] * gamma[i] - sum - h * sum_h);
        // h is known to |h| + c; it enters dx directly and through mean(dh h), which the mean's
        // rounding also shifts by up to c mean|dh|.
        dx_scale[t * w + i] = rstd[t] * (std::fabs(dy[t * w + i] * gamma[i]) + sum_abs +
                                         2 * (std::fabs(h) + c) * (sum_h_abs + c * sum_abs));
      }
    }

    DeviceArray<Host> d_x(x_host), d_dy(dy_host), d_y(x_host), d_dx(x_host);
    const std::vector<float> zeros(n);
    DeviceArray<float> d_gamma(gamma), d_beta(beta), d_mean(zeros), d_rstd(zeros);
    DeviceArray<float> d_dgamma(dgamma0), d_dbeta(dbeta0);
    const T* tx = d_x.template As<T>();
    const T* tdy = d_dy.template As<T>();
    T* ty = d_y.template As<T>();
    T* tdx = d_dx.template As<T>();
    ASSERT_TRUE(LayerNormForward(s, tx, d_gamma.ptr, d_beta.ptr, ty, d_mean.ptr, d_rstd.ptr, nullptr).ok());
    ASSERT_TRUE(
        LayerNormBackward(s, tx, d_gamma.ptr, d_mean.ptr, d_rstd.ptr, tdy, tdx, d_dgamma.ptr, d_dbeta.ptr, nullptr)
            .ok());
    const std::vector<Host> y_got = d_y.Get(n * w), dx_got = d_dx.Get(n * w);
    const std::vector<float> dgamma_got = d_dgamma.Get(w), dbeta_got = d_dbeta.Get(w);
    const std::vector<double> mean_got = ToDoubles(d_mean.Get(n)), rstd_got = ToDoubles(d_rstd.Get(n));
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      ExpectCloseToRms(ActivationValues<T>(y_got), y, 1.0 / 128, 1e-3, where + " y");
      ExpectCloseToRms(mean_got, mean, 1e-5, 1e-5, where + " mean");
      ExpectCloseToRms(rstd_got, rstd, 1e-5, 0, where + " rstd");
      ExpectCloseToRms(ActivationValues<T>(dx_got), dx, 1.0 / 128, 2e-3, where + " dx");
      ExpectCloseToRms(ToDoubles(dgamma_got), dgamma, 1e-4, 1e-4, where + " dgamma");
      ExpectCloseToRms(ToDoubles(dbeta_got), dbeta, 1e-4, 1e-4, where + " dbeta");
    } else {
      ExpectCloseToScale(ActivationValues<T>(y_got), y, y_scale, 1e-5, 1e-6, where + " y");
      ExpectCloseToScale(mean_got, mean, mean_scale, 1e-5, 1e-6, where + " mean");
      ExpectClose(rstd_got, rstd, 1e-5, 0, where + " rstd");
      ExpectCloseToScale(ActivationValues<T>(dx_got), dx, dx_scale, 1e-5, 1e-6, where + " dx");
      // dgamma and dbeta add the rows' terms in blocks of 64 rows, the blocks' sums in ColumnSums' tree
      // (one level of at most 16 blocks here), then the old value: each term passes at most 64 + 16 + 1
      // roundings, 4.8e-6 of their magnitude, and dgamma also h's rounding (< 40 ulps of |h| + c).
      ExpectCloseToScale(ToDoubles(dgamma_got), dgamma, dgamma_scale, 2.5e-5, 1e-6, where + " dgamma");
      ExpectCloseToScale(ToDoubles(dbeta_got), dbeta, dbeta_scale, 2e-5, 1e-6, where + " dbeta");
    }

    // Again: the same bytes.
    DeviceArray<float> d_dgamma2(dgamma0), d_dbeta2(dbeta0);
    ASSERT_TRUE(LayerNormForward(s, tx, d_gamma.ptr, d_beta.ptr, ty, d_mean.ptr, d_rstd.ptr, nullptr).ok());
    ASSERT_TRUE(
        LayerNormBackward(s, tx, d_gamma.ptr, d_mean.ptr, d_rstd.ptr, tdy, tdx, d_dgamma2.ptr, d_dbeta2.ptr, nullptr)
            .ok());
    EXPECT_EQ(d_y.Get(n * w), y_got) << where;
    EXPECT_EQ(d_dx.Get(n * w), dx_got) << where;
    EXPECT_EQ(d_dgamma2.Get(w), dgamma_got) << where;
    EXPECT_EQ(d_dbeta2.Get(w), dbeta_got) << where;

    // accumulate_dx: dx (holding y) gets y + the written gradient, one rounding per element.
    const std::vector<Host> before = d_y.Get(n * w);
    DeviceArray<Host> d_acc(before);
    DeviceArray<float> d_dgamma3(dgamma0), d_dbeta3(dbeta0);
    ASSERT_TRUE(LayerNormBackward(s, tx, d_gamma.ptr, d_mean.ptr, d_rstd.ptr, tdy, d_acc.template As<T>(),
                                  d_dgamma3.ptr, d_dbeta3.ptr, nullptr, /*accumulate_dx=*/true)
                    .ok());
    const std::vector<double> acc = ActivationValues<T>(d_acc.Get(n * w)), base = ActivationValues<T>(before),
                              grad = ActivationValues<T>(dx_got);
    for (size_t e = 0; e < acc.size(); ++e) {
      const float want = static_cast<float>(base[e]) + static_cast<float>(grad[e]);
      if constexpr (std::is_same_v<T, float>) {
        ASSERT_EQ(static_cast<float>(acc[e]), want) << where << " element " << e;
      } else {  // dx's bf16 value is the fp32 gradient rounded, so compare within one bf16 rounding of each
        ASSERT_NEAR(acc[e], want, (std::fabs(base[e]) + std::fabs(grad[e])) / 128 + 1e-30) << where << " element " << e;
      }
    }
    EXPECT_EQ(d_dgamma3.Get(w), dgamma_got) << where;
  }
}

TYPED_TEST(TrainLayerNormOn, GeluMatchesTheReferenceDefinitionInFp64) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  using T = TypeParam;
  using Host = typename Activation<T>::Host;
  const std::string name = Activation<T>::kName;
  const size_t count = 100003;
  std::vector<Host> x_host = RandomActivations<T>(count, 7, 0.0, 3.0);
  x_host[0] = Activation<T>::Round(-12.0);  // far tails: y and the gradient underflow to ~0
  x_host[1] = Activation<T>::Round(12.0);
  x_host[2] = Activation<T>::Round(0.0);
  const std::vector<Host> dy_host = RandomActivations<T>(count, 8, 0.0, 1.0);
  const std::vector<double> x = ActivationValues<T>(x_host), dy = ActivationValues<T>(dy_host);
  std::vector<double> y(count), dx(count), y_scale(count), dx_scale(count);
  for (size_t e = 0; e < count; ++e) {
    y[e] = reference::model::Gelu(x[e]);
    dx[e] = dy[e] * reference::model::GeluGrad(x[e]);
    // GeluGrad is Phi(x) + x phi(x), which cancel near x = -0.75: the bound is that of the terms.
    const double cdf = 0.5 * std::erfc(-x[e] * 0.70710678118654752440);
    const double pdf = 0.39894228040143267794 * std::exp(-0.5 * x[e] * x[e]);
    y_scale[e] = std::fabs(y[e]);
    dx_scale[e] = std::fabs(dy[e]) * (cdf + std::fabs(x[e]) * pdf);
  }
  DeviceArray<Host> d_x(x_host), d_dy(dy_host), d_y(x_host), d_dx(x_host);
  ASSERT_TRUE(GeluForward(d_x.template As<T>(), static_cast<int64_t>(count), d_y.template As<T>(), nullptr).ok());
  ASSERT_TRUE(GeluBackward(d_x.template As<T>(), d_dy.template As<T>(), static_cast<int64_t>(count),
                           d_dx.template As<T>(), nullptr)
                  .ok());
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    // bf16 rounding of the result, plus fp32 erfc/exp error where the result is tiny.
    ExpectCloseToRms(ActivationValues<T>(d_y.Get(count)), y, 1.0 / 128, 1e-6, "gelu y");
    ExpectCloseToRms(ActivationValues<T>(d_dx.Get(count)), dx, 1.0 / 128, 1e-6, "gelu dx");
  } else {
    // erfcf and expf are within a few ulps; rounding x / sqrt 2 and x^2 / 2 moves erfc and exp by
    // about 2 z^2 and x^2 ulps of themselves (z = -x / sqrt 2), under 1e-5 wherever the result is
    // above the 1e-6 floor (|x| < 6).
    ExpectCloseToScale(ActivationValues<T>(d_y.Get(count)), y, y_scale, 1e-5, 1e-6, name + " gelu y");
    ExpectCloseToScale(ActivationValues<T>(d_dx.Get(count)), dx, dx_scale, 1e-5, 1e-6, name + " gelu dx");
  }
  // One element in, no pointer is 16-byte aligned: the kernels take one value a thread, with the same
  // bytes as the 16-byte path above.
  DeviceArray<Host> d_y1(x_host), d_dx1(x_host);
  const int64_t rest = static_cast<int64_t>(count) - 1;
  ASSERT_TRUE(GeluForward(d_x.template As<T>() + 1, rest, d_y1.template As<T>() + 1, nullptr).ok());
  ASSERT_TRUE(GeluBackward(d_x.template As<T>() + 1, d_dy.template As<T>() + 1, rest, d_dx1.template As<T>() + 1,
                           nullptr)
                  .ok());
  const std::vector<Host> y_aligned = d_y.Get(count), y_shifted = d_y1.Get(count);
  const std::vector<Host> dx_aligned = d_dx.Get(count), dx_shifted = d_dx1.Get(count);
  EXPECT_EQ(std::memcmp(y_aligned.data() + 1, y_shifted.data() + 1, rest * sizeof(Host)), 0) << name << " gelu y";
  EXPECT_EQ(std::memcmp(dx_aligned.data() + 1, dx_shifted.data() + 1, rest * sizeof(Host)), 0) << name << " gelu dx";
}

TEST(TrainLayerNorm, Fp32RowsIntoBf16AreTheFp32ForwardRounded) {
  if (!test::HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const RowsShape s{257, 128};
  std::mt19937_64 rng(21);
  std::normal_distribution<float> normal(0.3f, 2.0f);
  std::vector<float> x(static_cast<size_t>(s.n * s.width)), gamma(128), beta(128);
  for (float& v : x) v = normal(rng);
  for (float& v : gamma) v = 1.0f + 0.1f * normal(rng);
  for (float& v : beta) v = 0.1f * normal(rng);
  const std::vector<float> zeros_y(x.size()), zeros_n(static_cast<size_t>(s.n));
  test::DeviceArray<float> d_x(x), d_gamma(gamma), d_beta(beta), d_y(zeros_y), d_mean(zeros_n), d_rstd(zeros_n),
      d_mean16(zeros_n), d_rstd16(zeros_n);
  test::DeviceArray<uint16_t> d_y16(std::vector<uint16_t>(x.size()));
  ASSERT_TRUE(LayerNormForward<float>(s, d_x.ptr, d_gamma.ptr, d_beta.ptr, d_y.ptr, d_mean.ptr, d_rstd.ptr, nullptr).ok());
  ASSERT_TRUE(LayerNormForward(s, d_x.ptr, d_gamma.ptr, d_beta.ptr, d_y16.As<__nv_bfloat16>(), d_mean16.ptr,
                               d_rstd16.ptr, nullptr)
                  .ok());
  const std::vector<float> y = d_y.Get(x.size());
  const std::vector<uint16_t> y16 = d_y16.Get(x.size());
  int bad = 0;
  for (size_t e = 0; e < y.size(); ++e) {
    if (y16[e] != numerics::DoubleToBf16BitsRne(static_cast<double>(y[e])) && bad++ < 5) {
      ADD_FAILURE() << "y[" << e << "]: bf16 bits " << y16[e] << " for the fp32 forward's " << y[e];
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(d_mean16.Get(zeros_n.size()), d_mean.Get(zeros_n.size()));
  EXPECT_EQ(d_rstd16.Get(zeros_n.size()), d_rstd.Get(zeros_n.size()));
}

// LayerNormBackwardRows with bf16 output gradients, handing the new dx on in bf16: dx and the parameter
// gradients the same bytes as LayerNormBackward<float> of the widened dy; the handed-on rows the same
// bytes as ToBf16 of that dx, and their column sums within fp32 rounding of ColumnSums' (the same terms,
// each block's rows in eight warps' groups); the sums added to what the array held. Widths past the
// fused kernel's and a handoff without its sums are refused by name.
TEST(TrainLayerNorm, BackwardRowsOfBf16DyHandingOnIsTheBackwardOfTheWidenedDyThenToBf16) {
  EXPECT_NE(LayerNormBackwardRows<float>({4, 513}, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                         nullptr, nullptr, nullptr)
                .message()
                .find("width=513"),
            std::string::npos);
  const Bf16Handoff half{reinterpret_cast<__nv_bfloat16*>(16), nullptr};
  EXPECT_NE(LayerNormBackwardRows<float>({4, 128}, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                         nullptr, &half, nullptr)
                .message()
                .find("column_sums"),
            std::string::npos);
  if (!test::HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (const RowsShape s : {RowsShape{1000, 128}, RowsShape{4161, 128}, RowsShape{70, 200}}) {
    const std::string where = "n " + std::to_string(s.n) + " width " + std::to_string(s.width);
    const size_t cells = static_cast<size_t>(s.n * s.width), w = static_cast<size_t>(s.width);
    std::mt19937_64 rng(static_cast<uint64_t>(s.n * 7 + s.width));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(cells), gamma(w), beta(w), dyf(cells), dx0(cells), g0(w), b0(w), sums0(w);
    std::vector<uint16_t> dy16(cells);
    for (float& v : x) v = 2.0f * normal(rng) + 0.3f;
    for (float& v : gamma) v = 1.0f + 0.2f * normal(rng);
    for (size_t e = 0; e < cells; ++e) {
      dy16[e] = numerics::FloatToBf16BitsRne(normal(rng));
      dyf[e] = numerics::Bf16BitsToFloat(dy16[e]);
      dx0[e] = normal(rng);
    }
    for (size_t i = 0; i < w; ++i) g0[i] = normal(rng), b0[i] = normal(rng), sums0[i] = normal(rng);
    const std::vector<float> zeros_n(static_cast<size_t>(s.n)), zeros(cells);
    DeviceArray<float> d_x(x), d_gamma(gamma), d_beta(beta), d_y(zeros), d_mean(zeros_n), d_rstd(zeros_n), d_dyf(dyf),
        d_dx_ref(dx0), d_dx(dx0), d_g_ref(g0), d_b_ref(b0), d_g(g0), d_b(b0), d_sums_ref(sums0), d_sums(sums0);
    const std::vector<uint16_t> zeros16(cells);
    DeviceArray<uint16_t> d_dy16(dy16), d_rows_ref(zeros16), d_rows(zeros16);
    ASSERT_TRUE(
        LayerNormForward<float>(s, d_x.ptr, d_gamma.ptr, d_beta.ptr, d_y.ptr, d_mean.ptr, d_rstd.ptr, nullptr).ok());
    ASSERT_TRUE(LayerNormBackward<float>(s, d_x.ptr, d_gamma.ptr, d_mean.ptr, d_rstd.ptr, d_dyf.ptr, d_dx_ref.ptr,
                                         d_g_ref.ptr, d_b_ref.ptr, nullptr, /*accumulate_dx=*/true)
                    .ok());
    ASSERT_TRUE(ToBf16WithColumnSums(d_dx_ref.ptr, s.n, s.width, d_rows_ref.bf16(), d_sums_ref.ptr, true, nullptr).ok());
    const Bf16Handoff next{d_rows.bf16(), d_sums.ptr};
    ASSERT_TRUE(LayerNormBackwardRows<__nv_bfloat16>(s, d_x.ptr, d_gamma.ptr, d_mean.ptr, d_rstd.ptr, d_dy16.bf16(),
                                                     d_dx.ptr, d_g.ptr, d_b.ptr, &next, nullptr, /*accumulate_dx=*/true)
                    .ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> dx = d_dx.Get(cells);
    EXPECT_EQ(std::memcmp(dx.data(), d_dx_ref.Get(cells).data(), cells * sizeof(float)), 0) << where << ": dx";
    EXPECT_EQ(d_g.Get(w), d_g_ref.Get(w)) << where << ": dgamma";
    EXPECT_EQ(d_b.Get(w), d_b_ref.Get(w)) << where << ": dbeta";
    EXPECT_EQ(d_rows.Get(cells), d_rows_ref.Get(cells)) << where << ": the handed-on rows";
    const std::vector<float> sums = d_sums.Get(w), sums_ref = d_sums_ref.Get(w);
    for (size_t i = 0; i < w; ++i) {
      double scale = std::fabs(sums0[i]);
      for (int64_t r = 0; r < s.n; ++r) scale += std::fabs(dx[static_cast<size_t>(r) * w + i]);
      ASSERT_NEAR(sums[i], sums_ref[i], 1e-5 * scale) << where << ": column sum " << i;
    }
  }
}

}  // namespace
}  // namespace gemtb::gpu::train
