// Properties of the unsharded embedding oracle.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "absl/strings/str_cat.h"
#include "reference/embedding/tbe.h"

namespace gemtb::reference {
namespace {

bool SameBytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// One table, one feature, given bags.
struct Fixture {
  EmbeddingConfig config;
  KeyedJaggedTensor kjt;
};

Fixture OneTable(int64_t rows, int64_t dim, ElementType dtype, OptimizerConfig opt, Pooling pooling,
                 const std::vector<std::vector<int64_t>>& bags) {
  Fixture f;
  TableConfig t;
  t.name = "t";
  t.rows = rows;
  t.dim = dim;
  t.dtype = dtype;
  t.optimizer = opt;
  f.config.tables.push_back(t);
  FeatureConfig fc;
  fc.key = "f";
  fc.pooling = pooling;
  f.config.features.push_back(fc);
  f.config.seed = 11;
  f.kjt.keys = {"f"};
  f.kjt.stride = static_cast<int64_t>(bags.size());
  for (const auto& bag : bags) {
    f.kjt.lengths.push_back(static_cast<int32_t>(bag.size()));
    for (int64_t id : bag) f.kjt.values.push_back(id);
  }
  return f;
}

std::vector<OptimizerConfig> AllOptimizers() {
  std::vector<OptimizerConfig> out;
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::kSgd;
  sgd.lr = 0.05f;
  out.push_back(sgd);
  for (WeightDecayMode mode : {WeightDecayMode::kNone, WeightDecayMode::kL2, WeightDecayMode::kDecoupled}) {
    OptimizerConfig a;
    a.kind = OptimizerKind::kRowwiseAdagrad;
    a.lr = 0.1f;
    a.weight_decay = 0.01f;
    a.decay_mode = mode;
    out.push_back(a);
  }
  for (WeightDecayMode mode : {WeightDecayMode::kNone, WeightDecayMode::kDecoupled}) {
    OptimizerConfig a;
    a.kind = OptimizerKind::kAdam;
    a.lr = 0.01f;
    a.weight_decay = 0.02f;
    a.decay_mode = mode;
    out.push_back(a);
  }
  return out;
}

// An update from a batch with duplicate ids equals one update of each unique row with
// its summed G_r, here obtained by feeding the oracle a batch holding each unique row once with G_r
// as its upstream gradient.
TEST(Tbe, DuplicateIdUpdateEqualsPerUniqueRowUpdate) {
  const std::vector<std::vector<int64_t>> bags = {{3, 1, 3}, {1}, {}, {7, 3, 3, 0}, {0, 7}};
  for (ElementType dtype : {ElementType::kFloat32, ElementType::kFloat16, ElementType::kBFloat16}) {
    for (const OptimizerConfig& opt : AllOptimizers()) {
      Fixture dup = OneTable(9, 8, dtype, opt, Pooling::kSum, bags);
      EmbeddingGrads grads;
      std::mt19937 rng(5);
      std::normal_distribution<float> n(0.f, 1.f);
      for (size_t i = 0; i < bags.size() * 8; ++i) grads.pooled.push_back(n(rng));
      EmbeddingState a = InitEmbeddingState(dup.config);
      ASSERT_TRUE(EmbeddingBackwardStep(dup.config, a, dup.kjt, grads).ok());

      absl::StatusOr<std::vector<RowGradients>> g = EmbeddingRowGradients(dup.config, dup.kjt, grads);
      ASSERT_TRUE(g.ok());
      std::vector<std::vector<int64_t>> unique_bags;
      for (int64_t r : (*g)[0].rows) unique_bags.push_back({r});
      Fixture uniq = OneTable(9, 8, dtype, opt, Pooling::kSum, unique_bags);
      EmbeddingGrads ugrads{(*g)[0].grads, {}};
      EmbeddingState b = InitEmbeddingState(uniq.config);
      ASSERT_TRUE(EmbeddingBackwardStep(uniq.config, b, uniq.kjt, ugrads).ok());
      const auto& ta = a.tables[0];
      const auto& tb = b.tables[0];
      EXPECT_TRUE(SameBytes(ta.weights, tb.weights) && SameBytes(ta.adagrad, tb.adagrad) &&
                  SameBytes(ta.adam_m, tb.adam_m) && SameBytes(ta.adam_v, tb.adam_v))
          << "dtype " << static_cast<int>(dtype) << " optimizer " << static_cast<int>(opt.kind) << " decay "
          << static_cast<int>(opt.decay_mode);
    }
  }
}

// G_r sums every occurrence, in (sample, key, position) order: rows 1 and 3 here.
TEST(Tbe, RowGradientSumsDuplicatesInSampleOrder) {
  OptimizerConfig sgd;
  Fixture f = OneTable(5, 4, ElementType::kFloat32, sgd, Pooling::kSum, {{3, 1, 3}, {1}});
  EmbeddingGrads grads{{1, 2, 3, 4, 10, 20, 30, 40}, {}};
  absl::StatusOr<std::vector<RowGradients>> g = EmbeddingRowGradients(f.config, f.kjt, grads);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ((*g)[0].rows, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ((*g)[0].grads, (std::vector<float>{11, 22, 33, 44, 2, 4, 6, 8}));
}

// A hand-worked rowwise Adagrad step. w = [1, 2, 3, -4], G = [0.5, -0.5, 1, 0], lr = 0.1, eps = 1e-8,
// no decay. Step by step in fp32 (checked with numpy.float32 one op at a time):
//   sum g^2 = 0.25 + 0.25 + 1 + 0 = 1.5; a = 1.5 / 4 = 0.375; m = 0 + 0.375 = 0.375
//   sqrt(m) = 0.61237246 (fp32); + 1e-8 is below half an ulp (2.98e-8): still 0.61237246
//   mu = 0.1 / 0.61237246 = 0.1632993 (bits 0x3E2737EF); c = 1
//   w' = w - mu*G = [0.91835034 (0x3F6B1902), 2.0816495 (0x400539BF), 2.8367007 (0x40358C81), -4]
TEST(Tbe, HandWorkedRowwiseAdagradStep) {
  OptimizerConfig opt;
  opt.kind = OptimizerKind::kRowwiseAdagrad;
  opt.lr = 0.1f;
  Fixture f = OneTable(2, 4, ElementType::kFloat32, opt, Pooling::kSum, {{1}});
  EmbeddingState s = InitEmbeddingState(f.config);
  const float w0[4] = {1, 2, 3, -4};
  std::copy(w0, w0 + 4, s.tables[0].weights.begin() + 4);
  ASSERT_TRUE(EmbeddingBackwardStep(f.config, s, f.kjt, EmbeddingGrads{{0.5f, -0.5f, 1.0f, 0.0f}, {}}).ok());
  const uint32_t want[4] = {0x3F6B1902u, 0x400539BFu, 0x40358C81u, 0xC0800000u};
  for (int j = 0; j < 4; ++j) {
    uint32_t got;
    std::memcpy(&got, &s.tables[0].weights[4 + j], 4);
    EXPECT_EQ(got, want[j]) << "w[" << j << "] = " << s.tables[0].weights[4 + j];
  }
  EXPECT_EQ(s.tables[0].adagrad[1], 0.375f);
  EXPECT_EQ(s.tables[0].adagrad[0], 0.0f);  // untouched row: no update
}

// Pooling is linear in the table: central differences in fp64 of L = sum(pooled * C) with respect to
// each table entry recover the row gradients G_r.
TEST(Tbe, RowGradientsMatchFp64FiniteDifferences) {
  for (Pooling pooling : {Pooling::kSum, Pooling::kMean, Pooling::kWeightedSum}) {
    OptimizerConfig sgd;
    Fixture f = OneTable(6, 4, ElementType::kFloat32, sgd, pooling, {{0, 2, 2}, {5}, {}, {2, 4}});
    f.kjt.weights = {0.5f, -1.5f, 2.0f, 0.25f, 3.0f, -0.75f};
    f.kjt.has_weights = true;
    EmbeddingState s = InitEmbeddingState(f.config);
    std::vector<float> c(4 * 4);
    for (size_t i = 0; i < c.size(); ++i) c[i] = 0.125f * static_cast<float>(static_cast<int>(i) - 7);
    auto loss = [&](const EmbeddingState& st) {
      absl::StatusOr<EmbeddingOutput> out = EmbeddingForward(f.config, st, f.kjt);
      double l = 0;
      for (size_t i = 0; i < c.size(); ++i) l += static_cast<double>(out->pooled[i]) * c[i];
      return l;
    };
    absl::StatusOr<std::vector<RowGradients>> g = EmbeddingRowGradients(f.config, f.kjt, EmbeddingGrads{c, {}});
    ASSERT_TRUE(g.ok());
    const float h = 1.0f / 64;  // exact in fp32; the loss is linear, so only rounding limits the error
    for (size_t k = 0; k < (*g)[0].rows.size(); ++k) {
      for (int j = 0; j < 4; ++j) {
        EmbeddingState plus = s, minus = s;
        plus.tables[0].weights[(*g)[0].rows[k] * 4 + j] += h;
        minus.tables[0].weights[(*g)[0].rows[k] * 4 + j] -= h;
        const double fd = (loss(plus) - loss(minus)) / (2.0 * h);
        const double an = (*g)[0].grads[k * 4 + j];
        EXPECT_NEAR(fd, an, 1e-5 * std::max(1.0, std::fabs(an))) << "pooling " << static_cast<int>(pooling);
      }
    }
  }
}

// The same bits for threads 1, 2, 7, 16.
TEST(Tbe, ByteIdenticalForAnyThreadCount) {
  OptimizerConfig opt;
  opt.kind = OptimizerKind::kAdam;
  std::vector<std::vector<int64_t>> bags;
  std::mt19937_64 rng(3);
  for (int b = 0; b < 64; ++b) {
    std::vector<int64_t> bag;
    for (int k = 0; k < static_cast<int>(rng() % 9); ++k) bag.push_back(static_cast<int64_t>(rng() % 50));
    bags.push_back(bag);
  }
  Fixture f = OneTable(50, 16, ElementType::kBFloat16, opt, Pooling::kMean, bags);
  EmbeddingGrads grads;
  for (int i = 0; i < 64 * 16; ++i) grads.pooled.push_back(std::ldexp(static_cast<float>(i % 13) - 6, -3));
  std::vector<float> first_out, first_w, first_m;
  for (int threads : {1, 2, 7, 16}) {
    EmbeddingState s = InitEmbeddingState(f.config);
    absl::StatusOr<EmbeddingOutput> out = EmbeddingForward(f.config, s, f.kjt, {}, threads);
    ASSERT_TRUE(out.ok());
    ASSERT_TRUE(EmbeddingBackwardStep(f.config, s, f.kjt, grads, {}, threads).ok());
    if (threads == 1) {
      first_out = out->pooled;
      first_w = s.tables[0].weights;
      first_m = s.tables[0].adam_m;
    } else {
      EXPECT_TRUE(SameBytes(out->pooled, first_out)) << threads << " threads";
      EXPECT_TRUE(SameBytes(s.tables[0].weights, first_w)) << threads << " threads";
      EXPECT_TRUE(SameBytes(s.tables[0].adam_m, first_m)) << threads << " threads";
    }
  }
}

// Stochastic rounding into bf16 is unbiased: SGD steps far below one bf16 ulp, over 4096 elements.
// Each rounding error e is in (-u, u) with E[e] = 0 and sd <= u/2 (u = 2^-7 at 1.0, the bf16 spacing
// in [1, 2)), so the mean over N = 4096 lies within 6 sd/sqrt(N) = 6*(u/2)/64 of 0 except with
// probability ~2e-9; RNE would make every element stay at 1.0 (error -lr*g each, a bias of 100% of it).
TEST(Tbe, StochasticRoundingIsUnbiased) {
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::kSgd;
  sgd.lr = 1.0f;
  constexpr int64_t kRows = 512, kDim = 8;
  std::vector<std::vector<int64_t>> bags;
  for (int64_t r = 0; r < kRows; ++r) bags.push_back({r});
  Fixture f = OneTable(kRows, kDim, ElementType::kBFloat16, sgd, Pooling::kSum, bags);
  EmbeddingState s = InitEmbeddingState(f.config);
  for (float& w : s.tables[0].weights) w = 1.0f;
  const float g = -0.001f;  // w -> 1.001, between bf16 1.0 and 1.0078125
  EmbeddingGrads grads{std::vector<float>(kRows * kDim, g), {}};
  ASSERT_TRUE(EmbeddingBackwardStep(f.config, s, f.kjt, grads).ok());
  double mean = 0;
  int up = 0;
  for (float w : s.tables[0].weights) {
    mean += static_cast<double>(w) - (1.0 + 0.001);
    up += w > 1.0f;
  }
  mean /= static_cast<double>(kRows * kDim);
  const double u = 1.0 / 128;
  EXPECT_LT(std::fabs(mean), 6 * (u / 2) / 64) << up << " of " << kRows * kDim << " rounded up";
  EXPECT_GT(up, 0);
}

// each violation gives its code at its first index, in the order of checks.
TEST(Tbe, KjtViolationsGiveTheirCodeAndFirstIndex) {
  OptimizerConfig sgd;
  Fixture base = OneTable(4, 4, ElementType::kFloat32, sgd, Pooling::kWeightedSum, {{0, 1}, {2}, {3}});
  base.config.features[0].max_len = 3;
  base.kjt.weights = {1, 1, 1, 1};
  base.kjt.has_weights = true;
  ASSERT_FALSE(FindKjtError(base.kjt, base.config, nullptr).has_value());
  struct Case {
    const char* name;
    std::function<void(Fixture&)> mutate;
    KjtErrorCode code;
    int64_t index;
  };
  const std::vector<Case> cases = {
      {"lengths size", [](Fixture& f) { f.kjt.lengths.pop_back(); }, KjtErrorCode::kShape, -1},
      {"unknown key", [](Fixture& f) { f.kjt.keys[0] = "x"; }, KjtErrorCode::kShape, 0},
      {"weights size", [](Fixture& f) { f.kjt.weights.pop_back(); }, KjtErrorCode::kShape, -1},
      {"negative length", [](Fixture& f) { f.kjt.lengths = {2, -1, -3}; }, KjtErrorCode::kNegativeLength, 1},
      {"length cap", [](Fixture& f) { f.kjt.lengths = {0, 4, 0}; }, KjtErrorCode::kLengthCap, 1},
      {"sum of lengths", [](Fixture& f) { f.kjt.lengths = {2, 1, 0}; }, KjtErrorCode::kOffsets, -1},
      {"offsets", [](Fixture& f) { f.kjt.offsets = {0, 2, 2, 4}; }, KjtErrorCode::kOffsets, 2},
      {"nan weight", [](Fixture& f) { f.kjt.weights[2] = NAN; f.kjt.weights[3] = INFINITY; }, KjtErrorCode::kWeight, 2},
      {"id out of range", [](Fixture& f) { f.kjt.values[3] = 4; f.kjt.values[1] = -1; }, KjtErrorCode::kIdOutOfRange, 1},
  };
  for (const Case& c : cases) {
    Fixture f = base;
    c.mutate(f);
    std::optional<InputError> e = FindKjtError(f.kjt, f.config, nullptr);
    ASSERT_TRUE(e.has_value()) << c.name;
    EXPECT_EQ(e->code, c.code) << c.name << ": " << e->detail;
    EXPECT_EQ(e->index, c.index) << c.name << ": " << e->detail;
    EXPECT_FALSE(ValidateKjt(f.kjt, f.config, nullptr).ok());
  }
}

}  // namespace
}  // namespace gemtb::reference
