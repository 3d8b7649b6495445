// The trainer's loss kernel (gpu/train/loss.h) against batch_pass.cc's formulas in fp64: per-element
// gradient, per-sample loss and batch loss, with masked elements, large logits of both signs and an
// all-masked batch; the same bytes on a second run; bad shapes refused by name.
#include "gpu/train/loss.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/gpu/train_test_util.h"

namespace gemtb::gpu::train {
namespace {

using test::DeviceArray;
using test::HaveSm90;

TEST(TrainLoss, ShapesItCannotTakeAreRefusedByName) {
  EXPECT_TRUE(ValidateLossShape({4, 3}).ok());
  EXPECT_NE(ValidateLossShape({0, 3}).message().find("samples=0"), std::string::npos);
  EXPECT_NE(ValidateLossShape({4, 1025}).message().find("tasks=1025"), std::string::npos);
  EXPECT_TRUE(ValidateLossShape({4, 3, 12.0}).ok());
  EXPECT_NE(ValidateLossShape({4, 3, std::nan("")}).message().find("mask_count=nan"), std::string::npos);
  EXPECT_NE(ValidateLossShape({4, 3, HUGE_VAL}).message().find("mask_count=inf"), std::string::npos);
}

// A data-parallel rank's share: with the whole batch's mask count given, each half of a batch gives
// the whole batch's dlogits bytes for its samples, and the halves' losses add up to the whole's.
TEST(TrainLoss, GivenMaskCountSplitsTheBatchIntoShares) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const int64_t B = 600, T = 3, half = B / 2;
  const size_t n = B * T;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> z(n), y(n), m(n);
  for (size_t e = 0; e < n; ++e) {
    z[e] = normal(rng);
    y[e] = static_cast<float>(rng() % 2);
    m[e] = static_cast<float>(rng() % 4 != 0);
  }
  double count = 0;
  for (float v : m) count += v;
  const std::vector<float> zeros_n(n), zeros_b(B);
  const std::vector<double> zero(1);
  DeviceArray<float> d_z(z), d_y(y), d_m(m), d_dz(zeros_n), d_sample(zeros_b);
  DeviceArray<double> d_loss(zero), d_work(zero);
  ASSERT_TRUE(BceWithLogitsLoss({B, T}, d_z.ptr, d_y.ptr, d_m.ptr, d_dz.ptr, d_sample.ptr, d_loss.ptr, d_work.ptr,
                                nullptr)
                  .ok());
  const std::vector<float> whole_dz = d_dz.Get(n);
  const double whole_loss = d_loss.Get(1)[0];
  double shares = 0;
  for (int64_t part = 0; part < 2; ++part) {
    const size_t at = part * half * T;
    ASSERT_TRUE(BceWithLogitsLoss({half, T, count}, d_z.ptr + at, d_y.ptr + at, d_m.ptr + at, d_dz.ptr + at,
                                  d_sample.ptr + part * half, d_loss.ptr, d_work.ptr, nullptr)
                    .ok());
    shares += d_loss.Get(1)[0];
  }
  EXPECT_EQ(d_dz.Get(n), whole_dz);
  EXPECT_NEAR(shares, whole_loss, 1e-12 * whole_loss);
}

TEST(TrainLoss, MatchesTheReferenceFormulasInFp64) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (const auto& [s, all_masked] : {std::pair{LossShape{1000, 3}, false}, {LossShape{1, 1}, false},
                                      {LossShape{5000, 7}, false}, {LossShape{17, 2}, true}}) {
    const std::string where = "B=" + std::to_string(s.samples) + " T=" + std::to_string(s.tasks);
    const size_t n = s.samples * s.tasks;
    std::mt19937_64 rng(s.samples * 31 + s.tasks);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> z(n), y(n), m(n);
    for (size_t e = 0; e < n; ++e) {
      z[e] = e % 97 == 0 ? (e % 2 ? 40.0f : -40.0f) : normal(rng);
      y[e] = static_cast<float>(rng() % 2);
      m[e] = all_masked ? 0.0f : static_cast<float>(rng() % 5 != 0);
    }
    // batch_pass.cc: l = m (max(z,0) - z y + log1p(exp(-|z|))), dz = m (sigmoid(z) - y) / max(1, sum m).
    double count = 0;
    for (float v : m) count += v;
    const double inv = 1.0 / std::max(1.0, count);
    std::vector<double> dz(n), sample(s.samples, 0.0);
    double total = 0;
    for (int64_t b = 0; b < s.samples; ++b) {
      for (int64_t t = 0; t < s.tasks; ++t) {
        const size_t e = b * s.tasks + t;
        const double zz = z[e], sig = 1.0 / (1.0 + std::exp(-zz));
        sample[b] += m[e] * (std::max(zz, 0.0) - zz * y[e] + std::log1p(std::exp(-std::fabs(zz))));
        dz[e] = m[e] * (sig - y[e]) * inv;
      }
      total += sample[b];
    }
    const double loss = total / std::max(1.0, count);

    const std::vector<float> zeros_n(n), zeros_b(s.samples);
    const std::vector<double> zero(1);
    DeviceArray<float> d_z(z), d_y(y), d_m(m), d_dz(zeros_n), d_sample(zeros_b);
    DeviceArray<double> d_loss(zero), d_work(zero);
    ASSERT_TRUE(BceWithLogitsLoss(s, d_z.ptr, d_y.ptr, d_m.ptr, d_dz.ptr, d_sample.ptr, d_loss.ptr, d_work.ptr, nullptr)
                    .ok());
    const std::vector<float> dz_got = d_dz.Get(n), sample_got = d_sample.Get(s.samples);
    const double loss_got = d_loss.Get(1)[0];
    int bad = 0;
    for (size_t e = 0; e < n; ++e) {
      // sigmoid(z) - y cancels where sigmoid(z) is near y: fp32's own rounding of sigmoid (an ulp of
      // 1 is 1.2e-7) bounds the error there, scaled by 1 / count.
      if (!(std::fabs(dz_got[e] - dz[e]) <= 1e-5 * std::fabs(dz[e]) + 5e-7 * inv) && bad++ < 5) {
        ADD_FAILURE() << where << " dlogits[" << e << "]: " << dz_got[e] << ", want " << dz[e];
      }
    }
    for (int64_t b = 0; b < s.samples; ++b) {
      if (!(std::fabs(sample_got[b] - sample[b]) <= 1e-5 * std::fabs(sample[b]) + 1e-6) && bad++ < 5) {
        ADD_FAILURE() << where << " sample_loss[" << b << "]: " << sample_got[b] << ", want " << sample[b];
      }
    }
    EXPECT_EQ(bad, 0) << where;
    EXPECT_NEAR(loss_got, loss, 1e-5 * std::fabs(loss) + 1e-9) << where;
    if (all_masked) {
      EXPECT_EQ(loss_got, 0.0) << where;
    }

    ASSERT_TRUE(BceWithLogitsLoss(s, d_z.ptr, d_y.ptr, d_m.ptr, d_dz.ptr, d_sample.ptr, d_loss.ptr, d_work.ptr, nullptr)
                    .ok());
    EXPECT_EQ(d_dz.Get(n), dz_got) << where;
    EXPECT_EQ(d_sample.Get(s.samples), sample_got) << where;
    EXPECT_EQ(d_loss.Get(1)[0], loss_got) << where;
  }
}

}  // namespace
}  // namespace gemtb::gpu::train
