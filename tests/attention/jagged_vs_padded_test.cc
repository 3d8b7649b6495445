// Jagged vs dense: the jagged oracle equals a padded [B,H,maxL,D] computation with an
// explicit boolean mask (tests/testing/padded_attention.h), forward and backward, to 1e-12
// relative.
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "model/attention/attention_options.h"
#include "tests/testing/attention_cases.h"
#include "tests/testing/oracle_harness.h"
#include "tests/testing/padded_attention.h"
#include "tests/testing/rapidcheck_runner.h"

namespace gemtb {
namespace {

using check::AttentionCase;
using check::CaseConfig;

constexpr double kTolerance = 1e-12;

// attention.h: O [TO,H,Dv]; LSE [H,TO] for softmax only; gradients in the inputs' shapes; bias
// gradients present exactly when the bias is.
TEST(JaggedVsPadded, ResultShapesFollowTheInputs) {
  std::mt19937_64 rng(3);
  for (int rep = 0; rep < 200; ++rep) {
    const AttentionCase c = check::RandomAttentionCase(rng, CaseConfig{});
    const auto run = check::RunOracle(c, check::RandomCotangent(c, rng()));
    ASSERT_TRUE(run.ok()) << run.status() << "\n  case: " << c;
    const int64_t to = check::OutputRows(c);
    EXPECT_EQ(run->fwd.o_shape, (std::vector<int64_t>{to, c.heads(), c.dv()})) << c;
    if (c.options.act == Activation::kSoftmax) {
      EXPECT_EQ(run->fwd.lse_shape, (std::vector<int64_t>{c.heads(), to})) << c;
      EXPECT_EQ(run->fwd.lse.size(), static_cast<size_t>(c.heads() * to)) << c;
    } else {
      EXPECT_TRUE(run->fwd.lse_shape.empty() && run->fwd.lse.empty()) << c;
    }
    EXPECT_EQ(run->bwd.dq_shape, c.q.shape) << c;
    EXPECT_EQ(run->bwd.dk_shape, c.k.shape) << c;
    EXPECT_EQ(run->bwd.dv_shape, c.v.shape) << c;
    EXPECT_EQ(run->bwd.d_bias_dense_shape, c.bias_dense.shape) << c;
    EXPECT_EQ(run->bwd.d_bias_rel_shape, c.bias_rel.shape) << c;
    EXPECT_EQ(run->bwd.d_bias_ts_shape, c.bias_ts.shape) << c;
    EXPECT_EQ(run->bwd.d_bias_dense.size(), c.bias_dense.data.size()) << c;
    EXPECT_EQ(run->bwd.d_bias_rel.size(), c.bias_rel.data.size()) << c;
    EXPECT_EQ(run->bwd.d_bias_ts.size(), c.bias_ts.data.size()) << c;
  }
}

TEST(JaggedVsPadded, OracleEqualsPaddedAndMaskedForEveryActAndMask) {
  std::mt19937_64 rng(20240601);
  for (int a = 0; a < kNumActivations; ++a) {
    for (MaskKind mask :
         {MaskKind::kNone, MaskKind::kCausal, MaskKind::kWindow, MaskKind::kBlock}) {
      CaseConfig config;
      config.acts = {static_cast<Activation>(a)};
      config.masks = {mask};
      for (int rep = 0; rep < 8; ++rep) {
        const AttentionCase c = check::RandomAttentionCase(rng, config);
        const std::vector<double> d_o = check::RandomCotangent(c, rng());
        const auto run = check::RunOracle(c, d_o);
        ASSERT_TRUE(run.ok()) << run.status() << "\n  case: " << c;
        EXPECT_TRUE(testing::MatchesPadded(*run, testing::PaddedAttention(c, d_o), kTolerance))
            << "case: " << c;
      }
    }
  }
}

TEST(JaggedVsPadded, OracleEqualsPaddedAndMaskedOnArbitraryCases) {
  testing::CheckProperty(1000, [] {
    const AttentionCase c = *testing::GenAttentionCase(CaseConfig{});
    const std::vector<double> d_o = check::RandomCotangent(c, c.shape.value_seed + 1);
    const auto run = check::RunOracle(c, d_o);
    testing::RcRequireOk(run.status(), c);
    testing::RcRequire(testing::MatchesPadded(*run, testing::PaddedAttention(c, d_o), kTolerance),
                       c);
  });
}

TEST(JaggedVsPadded, OracleEqualsPaddedOnMediumArbitraryCases) {
  CaseConfig config;
  config.max_sequences = 5;
  config.max_length = 40;
  config.max_heads = 8;
  config.max_dim = 32;
  testing::CheckProperty(200, [config] {
    const AttentionCase c = *testing::GenAttentionCase(config);
    const std::vector<double> d_o = check::RandomCotangent(c, c.shape.value_seed + 1);
    const auto run = check::RunOracle(c, d_o);
    testing::RcRequireOk(run.status(), c);
    testing::RcRequire(testing::MatchesPadded(*run, testing::PaddedAttention(c, d_o), kTolerance),
                       c);
  });
}

TEST(JaggedVsPadded, OracleEqualsPaddedWithLargerHeadsAndDims) {
  CaseConfig config;
  config.max_heads = 8;
  config.max_dim = 24;
  config.max_length = 20;
  config.max_sequences = 4;
  std::mt19937_64 rng(7);
  for (int rep = 0; rep < 100; ++rep) {
    const AttentionCase c = check::RandomAttentionCase(rng, config);
    const std::vector<double> d_o = check::RandomCotangent(c, rng());
    const auto run = check::RunOracle(c, d_o);
    ASSERT_TRUE(run.ok()) << run.status() << "\n  case: " << c;
    EXPECT_TRUE(testing::MatchesPadded(*run, testing::PaddedAttention(c, d_o), kTolerance))
        << "case: " << c;
  }
}

}  // namespace
}  // namespace gemtb
