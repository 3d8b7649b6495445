// The trainer's QK-norm (gpu/train/head_rms_norm.h), on bf16 and on fp32 activations, against the
// reference model's own HeadRmsNormForward / HeadRmsNormBackward (reference/model/layers.h)
// evaluated in fp64 on the same inputs, at the head dimensions of the model configs and odd ones;
// the same bytes on a second run; bad shapes refused by name.
#include "gpu/train/head_rms_norm.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "gtest/gtest.h"
#include "tests/gpu/train_test_util.h"
#include "model/numerics/float_formats.h"
#include "reference/model/layers.h"

namespace gemtb::gpu::train {
namespace {

using test::Activation;
using test::ActivationValues;
using test::DeviceArray;
using test::ExpectClose;
using test::ExpectCloseToScale;
using test::HaveSm90;
using test::RandomActivations;

TEST(TrainHeadRmsNorm, ShapesItCannotTakeAreRefusedByName) {
  EXPECT_TRUE(ValidateHeadRowsShape({10, 32}).ok());
  EXPECT_NE(ValidateHeadRowsShape({0, 32}).message().find("rows=0"), std::string::npos);
  EXPECT_NE(ValidateHeadRowsShape({10, 1025}).message().find("dh=1025"), std::string::npos);
  EXPECT_TRUE(ValidateHeadRowsShape({10, 32, 2, 100}).ok());
  EXPECT_NE(ValidateHeadRowsShape({10, 32, 3}).message().find("heads=3"), std::string::npos);  // 10 rows
  EXPECT_NE(ValidateHeadRowsShape({10, 32, 2, 63}).message().find("ld=63"), std::string::npos);
  EXPECT_NE(HeadRmsNormForward<float>({10, 0}, nullptr, nullptr, nullptr, nullptr).message().find("dh=0"),
            std::string::npos);
}

template <typename T>
class TrainHeadRmsNormOn : public ::testing::Test {};
TYPED_TEST_SUITE(TrainHeadRmsNormOn, test::ActivationTypes, test::ActivationName);

TYPED_TEST(TrainHeadRmsNormOn, MatchesTheReferenceLayerInFp64) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  using T = TypeParam;
  using Host = typename Activation<T>::Host;
  // Blocks of one and several passes, a last block part full, spans not multiples of 16 bytes (dh 5),
  // and rows of 1,024 values, whose staged block takes more than 48 KB of shared memory.
  for (const HeadRowsShape s : {HeadRowsShape{4096, 16}, HeadRowsShape{999, 32}, HeadRowsShape{300, 64},
                                HeadRowsShape{7, 128}, HeadRowsShape{3, 5}, HeadRowsShape{9, 1024}}) {
    const std::string where = std::string(Activation<T>::kName) + " rows=" + std::to_string(s.rows) +
                              " dh=" + std::to_string(s.dh);
    const size_t n = s.rows * s.dh;
    const std::vector<Host> x_host = RandomActivations<T>(n, 1, 0.0, 1.5),
                            dy_host = RandomActivations<T>(n, 2, 0.0, 1.0);
    const std::vector<double> x = ActivationValues<T>(x_host), dy = ActivationValues<T>(dy_host);
    // The reference layer, one row per "token" of one head.
    std::vector<double> y(n), inv(s.rows), dx(n, 0.0);
    reference::model::HeadRmsNormForward(x.data(), static_cast<int>(s.rows), 1, static_cast<int>(s.dh), y.data(),
                                         inv.data());
    reference::model::HeadRmsNormBackward(y.data(), inv.data(), dy.data(), static_cast<int>(s.rows), 1,
                                          static_cast<int>(s.dh), dx.data());

    const std::vector<Host> zeros(n);
    const std::vector<float> zeros32(s.rows);
    DeviceArray<Host> d_x(x_host), d_dy(dy_host), d_y(zeros), d_dx(zeros);
    DeviceArray<float> d_inv(zeros32);
    const T* tx = d_x.template As<T>();
    const T* tdy = d_dy.template As<T>();
    T* ty = d_y.template As<T>();
    T* tdx = d_dx.template As<T>();
    ASSERT_TRUE(HeadRmsNormForward(s, tx, ty, d_inv.ptr, nullptr).ok());
    ASSERT_TRUE(HeadRmsNormBackward(s, tx, d_inv.ptr, tdy, tdx, nullptr).ok());
    const std::vector<Host> y_got = d_y.Get(n), dx_got = d_dx.Get(n);
    const std::vector<float> inv_got = d_inv.Get(s.rows);
    const std::vector<double> inv_got_v(inv_got.begin(), inv_got.end());
    const std::vector<double> dx_got_v = ActivationValues<T>(dx_got);
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      // y within bf16's rounding; dx as well, plus fp32 cancellation in dy - y mean(dy y) (|dy| ~ 1).
      ExpectClose(ActivationValues<T>(y_got), y, 1.0 / 128, 1e-6, where + " y");
      ExpectClose(inv_got_v, inv, 1e-5, 0, where + " inv");
      std::vector<double> dx_bound_scale(n);
      for (int64_t r = 0; r < s.rows; ++r) {
        for (int64_t i = 0; i < s.dh; ++i) dx_bound_scale[r * s.dh + i] = inv[r];
      }
      int bad = 0;
      for (size_t e = 0; e < n; ++e) {
        if (!(std::fabs(dx_got_v[e] - dx[e]) <= std::fabs(dx[e]) / 128 + 1e-5 * dx_bound_scale[e]) && bad++ < 5) {
          ADD_FAILURE() << where << " dx[" << e << "]: " << dx_got_v[e] << ", want " << dx[e];
        }
      }
      EXPECT_EQ(bad, 0) << where;
    } else {
      // The sum of squares adds dh/32 values per lane and a 5-step butterfly: inv and y within
      // (dh/64 + 8) 2^-24 < 1e-5 of themselves. dx = inv (dy - y mean(dy y)) cancels: its bound is
      // that of its terms, inv (|dy| + |y| mean|dy y|).
      ExpectClose(ActivationValues<T>(y_got), y, 1e-5, 1e-6, where + " y");
      ExpectClose(inv_got_v, inv, 1e-5, 0, where + " inv");
      std::vector<double> dx_scale(n);
      for (int64_t r = 0; r < s.rows; ++r) {
        double mean_abs = 0;
        for (int64_t i = 0; i < s.dh; ++i) mean_abs += std::fabs(dy[r * s.dh + i] * y[r * s.dh + i]);
        mean_abs /= static_cast<double>(s.dh);
        for (int64_t i = 0; i < s.dh; ++i) {
          dx_scale[r * s.dh + i] = inv[r] * (std::fabs(dy[r * s.dh + i]) + std::fabs(y[r * s.dh + i]) * mean_abs);
        }
      }
      ExpectCloseToScale(dx_got_v, dx, dx_scale, 1e-5, 1e-6, where + " dx");
    }

    ASSERT_TRUE(HeadRmsNormForward(s, tx, ty, d_inv.ptr, nullptr).ok());
    ASSERT_TRUE(HeadRmsNormBackward(s, tx, d_inv.ptr, tdy, tdx, nullptr).ok());
    EXPECT_EQ(d_y.Get(n), y_got) << where;
    EXPECT_EQ(d_dx.Get(n), dx_got) << where;
    EXPECT_EQ(d_inv.Get(s.rows), inv_got) << where;
  }
}

}  // namespace
}  // namespace gemtb::gpu::train
