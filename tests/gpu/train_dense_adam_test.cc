// The trainer's dense Adam (gpu/train/dense_adam.h) writes the oracle's bytes: weights, both moments
// and the bf16 copies, over several steps with decoupled weight decay and without; bad arguments
// refused by name.
#include "gpu/train/dense_adam.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/gpu/train_test_util.h"
#include "model/numerics/float_formats.h"

namespace gemtb::gpu::train {
namespace {

using test::DeviceArray;
using test::HaveSm90;

OptimizerConfig Adam(WeightDecayMode decay) {
  OptimizerConfig o;
  o.kind = OptimizerKind::kAdam;
  o.lr = 1e-3f;
  o.decay_mode = decay;
  o.weight_decay = decay == WeightDecayMode::kNone ? 0.0f : 0.01f;
  return o;
}

TEST(TrainDenseAdam, BadArgumentsAreRefusedByName) {
  EXPECT_NE(DenseAdamStep(nullptr, nullptr, nullptr, nullptr, 0, {}, Adam(WeightDecayMode::kNone),
                          nullptr, nullptr)
                .message()
                .find("count=0"),
            std::string::npos);
  OptimizerConfig sgd;
  EXPECT_NE(DenseAdamStep(nullptr, nullptr, nullptr, nullptr, 4, {}, sgd, nullptr, nullptr).message().find("optimizer.kind"),
            std::string::npos);
}

TEST(TrainDenseAdam, StepsWriteTheOraclesBytes) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (const auto decay : {WeightDecayMode::kNone, WeightDecayMode::kDecoupled}) {
    const OptimizerConfig o = Adam(decay);
    const size_t n = 100003;
    std::mt19937_64 rng(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> w(n), m(n, 0.0f), v(n, 0.0f), g(n);
    for (float& x : w) x = 0.1f * normal(rng);
    DeviceArray<float> d_w(w), d_m(m), d_v(v), d_g(g);
    const std::vector<uint16_t> zeros(n);
    DeviceArray<uint16_t> d_bf16(zeros);
    embedding::AdamStep step;
    for (int s = 0; s < 4; ++s) {
      for (float& x : g) x = normal(rng) * (s == 2 ? 1e-4f : 1.0f);
      d_g.Put(g);
      step = embedding::NextAdamStep(step, o);
      embedding::AdamRow(w.data(), g.data(), static_cast<int64_t>(n), m.data(), v.data(), step, o);  // the oracle
      ASSERT_TRUE(DenseAdamStep(d_w.ptr, d_g.ptr, d_m.ptr, d_v.ptr, static_cast<int64_t>(n), step, o,
                                reinterpret_cast<__nv_bfloat16*>(d_bf16.ptr), nullptr)
                      .ok());
      const std::string where = "step " + std::to_string(s) + " decay " + std::to_string(static_cast<int>(decay));
      EXPECT_EQ(d_w.Get(n), w) << where;
      EXPECT_EQ(d_m.Get(n), m) << where;
      EXPECT_EQ(d_v.Get(n), v) << where;
      std::vector<uint16_t> bf16(n);
      for (size_t e = 0; e < n; ++e) bf16[e] = numerics::FloatToBf16BitsRne(w[e]);
      EXPECT_EQ(d_bf16.Get(n), bf16) << where;
    }
  }
}

}  // namespace
}  // namespace gemtb::gpu::train
