// The trainer's QK-norm (gpu/train/head_rms_norm.h) against the reference model's own
// HeadRmsNormForward / HeadRmsNormBackward (reference/model/layers.h) evaluated in fp64 on the same
// bf16 inputs, at the head dimensions of the model configs and odd ones; the same bytes on a second
// run; bad shapes refused by name.
#include "gpu/train/head_rms_norm.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/gpu/train_test_util.h"
#include "model/numerics/float_formats.h"
#include "reference/model/layers.h"

namespace gemtb::gpu::train {
namespace {

using test::Bf16Values;
using test::DeviceArray;
using test::ExpectClose;
using test::HaveSm90;
using test::RandomBf16;

TEST(TrainHeadRmsNorm, ShapesItCannotTakeAreRefusedByName) {
  EXPECT_TRUE(ValidateHeadRowsShape({10, 32}).ok());
  EXPECT_NE(ValidateHeadRowsShape({0, 32}).message().find("rows=0"), std::string::npos);
  EXPECT_NE(ValidateHeadRowsShape({10, 1025}).message().find("dh=1025"), std::string::npos);
}

TEST(TrainHeadRmsNorm, MatchesTheReferenceLayerInFp64) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (const HeadRowsShape s : {HeadRowsShape{4096, 16}, HeadRowsShape{999, 32}, HeadRowsShape{300, 64},
                                HeadRowsShape{7, 128}, HeadRowsShape{3, 5}}) {
    const std::string where = "rows=" + std::to_string(s.rows) + " dh=" + std::to_string(s.dh);
    const size_t n = s.rows * s.dh;
    const std::vector<uint16_t> x_bits = RandomBf16(n, 1, 0.0, 1.5), dy_bits = RandomBf16(n, 2, 0.0, 1.0);
    const std::vector<double> x = Bf16Values(x_bits), dy = Bf16Values(dy_bits);
    // The reference layer, one row per "token" of one head.
    std::vector<double> y(n), inv(s.rows), dx(n, 0.0);
    reference::model::HeadRmsNormForward(x.data(), static_cast<int>(s.rows), 1, static_cast<int>(s.dh), y.data(),
                                         inv.data());
    reference::model::HeadRmsNormBackward(y.data(), inv.data(), dy.data(), static_cast<int>(s.rows), 1,
                                          static_cast<int>(s.dh), dx.data());

    const std::vector<uint16_t> zeros16(n);
    const std::vector<float> zeros32(s.rows);
    DeviceArray<uint16_t> d_x(x_bits), d_dy(dy_bits), d_y(zeros16), d_dx(zeros16);
    DeviceArray<float> d_inv(zeros32);
    auto* bx = reinterpret_cast<const __nv_bfloat16*>(d_x.ptr);
    auto* bdy = reinterpret_cast<const __nv_bfloat16*>(d_dy.ptr);
    auto* by = reinterpret_cast<__nv_bfloat16*>(d_y.ptr);
    auto* bdx = reinterpret_cast<__nv_bfloat16*>(d_dx.ptr);
    ASSERT_TRUE(HeadRmsNormForward(s, bx, by, d_inv.ptr, nullptr).ok());
    ASSERT_TRUE(HeadRmsNormBackward(s, bx, d_inv.ptr, bdy, bdx, nullptr).ok());
    const std::vector<uint16_t> y_got = d_y.Get(n), dx_got = d_dx.Get(n);
    const std::vector<float> inv_got = d_inv.Get(s.rows);
    // y within bf16's rounding; dx as well, plus fp32 cancellation in dy - y mean(dy y) (|dy| ~ 1).
    ExpectClose(Bf16Values(y_got), y, 1.0 / 128, 1e-6, where + " y");
    ExpectClose(std::vector<double>(inv_got.begin(), inv_got.end()), inv, 1e-5, 0, where + " inv");
    std::vector<double> dx_bound_scale(n);
    for (int64_t r = 0; r < s.rows; ++r) {
      for (int64_t i = 0; i < s.dh; ++i) dx_bound_scale[r * s.dh + i] = inv[r];
    }
    int bad = 0;
    const std::vector<double> dx_got_v = Bf16Values(dx_got);
    for (size_t e = 0; e < n; ++e) {
      if (!(std::fabs(dx_got_v[e] - dx[e]) <= std::fabs(dx[e]) / 128 + 1e-5 * dx_bound_scale[e]) && bad++ < 5) {
        ADD_FAILURE() << where << " dx[" << e << "]: " << dx_got_v[e] << ", want " << dx[e];
      }
    }
    EXPECT_EQ(bad, 0) << where;

    ASSERT_TRUE(HeadRmsNormForward(s, bx, by, d_inv.ptr, nullptr).ok());
    ASSERT_TRUE(HeadRmsNormBackward(s, bx, d_inv.ptr, bdy, bdx, nullptr).ok());
    EXPECT_EQ(d_y.Get(n), y_got) << where;
    EXPECT_EQ(d_dx.Get(n), dx_got) << where;
    EXPECT_EQ(d_inv.Get(s.rows), inv_got) << where;
  }
}

}  // namespace
}  // namespace gemtb::gpu::train
