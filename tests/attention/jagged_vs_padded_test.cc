// spec §9 "Jagged vs dense": the jagged oracle equals a padded [B,H,maxL,D] computation with an
// explicit boolean mask (tests/testing/padded_attention.h), forward and backward, to 1e-12 relative.
#include <random>

#include "gtest/gtest.h"
#include "model/attention/attention_options.h"
#include "tests/testing/attention_cases.h"
#include "tests/testing/oracle_harness.h"
#include "tests/testing/padded_attention.h"
#include "tests/testing/rapidcheck_runner.h"

namespace gemtb {
namespace {

using testing::AttentionCase;
using testing::CaseConfig;

constexpr double kTolerance = 1e-12;

TEST(JaggedVsPadded, OracleEqualsPaddedAndMaskedForEveryActAndMask) {
  std::mt19937_64 rng(20240601);
  for (int a = 0; a < kNumActivations; ++a) {
    for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausal, MaskKind::kWindow,
                          MaskKind::kBlock}) {
      CaseConfig config;
      config.acts = {static_cast<Activation>(a)};
      config.masks = {mask};
      for (int rep = 0; rep < 4; ++rep) {
        const AttentionCase c = testing::RandomAttentionCase(rng, config);
        const std::vector<double> d_o = testing::RandomCotangent(c, rng());
        const auto run = testing::RunOracle(c, d_o);
        ASSERT_TRUE(run.ok()) << run.status() << "\n  case: " << c;
        EXPECT_TRUE(testing::MatchesPadded(*run, testing::PaddedAttention(c, d_o), kTolerance))
            << "case: " << c;
      }
    }
  }
}

TEST(JaggedVsPadded, OracleEqualsPaddedAndMaskedOnArbitraryCases) {
  testing::CheckProperty(150, [] {
    const AttentionCase c = *testing::GenAttentionCase(CaseConfig{});
    const std::vector<double> d_o = testing::RandomCotangent(c, c.shape.value_seed + 1);
    const auto run = testing::RunOracle(c, d_o);
    testing::RcRequireOk(run.status(), c);
    testing::RcRequire(testing::MatchesPadded(*run, testing::PaddedAttention(c, d_o), kTolerance),
                       c);
  });
}

TEST(JaggedVsPadded, OracleEqualsPaddedWithLargerHeadsAndDims) {
  CaseConfig config;
  config.max_heads = 8;
  config.max_dim = 24;
  config.max_length = 12;
  config.max_sequences = 4;
  std::mt19937_64 rng(7);
  for (int rep = 0; rep < 24; ++rep) {
    const AttentionCase c = testing::RandomAttentionCase(rng, config);
    const std::vector<double> d_o = testing::RandomCotangent(c, rng());
    const auto run = testing::RunOracle(c, d_o);
    ASSERT_TRUE(run.ok()) << run.status() << "\n  case: " << c;
    EXPECT_TRUE(testing::MatchesPadded(*run, testing::PaddedAttention(c, d_o), kTolerance))
        << "case: " << c;
  }
}

}  // namespace
}  // namespace gemtb
