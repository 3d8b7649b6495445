// Edge shapes: empty and length-1 sequences, lengths around the 64-row tiles, Lq ≠ Lk
// both ways under both alignments, and fully masked rows (O = 0, LSE = -inf, zero gradients, no
// NaN).
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/attention_cases.h"
#include "tests/testing/oracle_harness.h"
#include "tests/testing/padded_attention.h"

namespace gemtb {
namespace {

using check::AttentionCase;
using check::CaseShape;

constexpr double kTolerance = 1e-12;
const MaskKind kAllMasks[] = {MaskKind::kNone, MaskKind::kCausal, MaskKind::kWindow,
                              MaskKind::kBlock};

CaseShape BaseShape(std::vector<int64_t> q_lengths, std::vector<int64_t> kv_lengths) {
  CaseShape s;
  s.q_lengths = std::move(q_lengths);
  s.kv_lengths = std::move(kv_lengths);
  s.heads = 2;
  s.kv_heads = 1;
  s.dqk = 6;
  s.dv = 4;
  s.value_seed = 77;
  return s;
}

void ExpectMatchesPadded(const AttentionCase& c) {
  const std::vector<double> d_o = check::RandomCotangent(c, 9);
  const auto run = check::RunOracle(c, d_o);
  ASSERT_TRUE(run.ok()) << run.status() << "\n  case: " << c;
  EXPECT_TRUE(testing::MatchesPadded(*run, testing::PaddedAttention(c, d_o), kTolerance))
      << "case: " << c;
  EXPECT_TRUE(testing::HasNoNaN(*run)) << "case: " << c;
}

TEST(EdgeShapes, EmptyBatchGivesEmptyOutputs) {
  for (Activation act : {Activation::kSoftmax, Activation::kSilu}) {
    CaseShape s = BaseShape({}, {});
    s.options.act = act;
    const AttentionCase c = check::BuildCase(s);
    const auto run = check::RunOracle(c, std::vector<double>{});
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_TRUE(run->fwd.o.empty());
    EXPECT_TRUE(run->fwd.lse.empty());
    ASSERT_EQ(run->fwd.o_shape.size(), 3u);
    EXPECT_EQ(run->fwd.o_shape[0], 0);
    EXPECT_TRUE(run->bwd.dq.empty());
    EXPECT_TRUE(run->bwd.dk.empty());
    EXPECT_EQ(run->bwd.dk_shape, c.k.shape);
  }
}

TEST(EdgeShapes, EmptyAndLengthOneSequencesMatchPadded) {
  for (int a = 0; a < kNumActivations; ++a) {
    for (MaskKind mask : kAllMasks) {
      CaseShape s = BaseShape({0, 1, 1, 0, 2, 1}, {1, 0, 1, 0, 1, 3});
      s.options.act = static_cast<Activation>(a);
      s.options.mask = mask;
      s.options.window_left = 1;
      s.options.window_right = 0;
      s.options.block = 1;
      s.dense_bias_heads = 2;
      s.rel_bias_heads = 2;
      ExpectMatchesPadded(check::BuildCase(s));
      // Self-attention flavour with the time bias and RoPE.
      CaseShape t = BaseShape({0, 1, 1, 0, 2}, {0, 1, 1, 0, 2});
      t.options = s.options;
      t.time_bias_heads = 1;
      t.rope_qk = true;
      t.rope_v = true;
      ExpectMatchesPadded(check::BuildCase(t));
    }
  }
}

TEST(EdgeShapes, LengthsAroundTileSizesMatchPadded) {
  for (Activation act : {Activation::kSoftmax, Activation::kSilu}) {
    for (MaskKind mask : kAllMasks) {
      CaseShape s = BaseShape({63, 64, 65, 127, 128, 129}, {63, 64, 65, 127, 128, 129});
      s.options.act = act;
      s.options.mask = mask;
      s.options.window_left = 64;
      s.options.window_right = 1;
      s.options.block = 64;
      s.rel_bias_heads = 1;
      s.dqk = 4;
      s.dv = 2;
      ExpectMatchesPadded(check::BuildCase(s));
    }
  }
}

TEST(EdgeShapes, UnequalQueryAndKeyLengthsMatchPaddedUnderBothAlignments) {
  for (Alignment align : {Alignment::kBottomRight, Alignment::kTopLeft}) {
    for (MaskKind mask : kAllMasks) {
      for (Activation act : {Activation::kSoftmax, Activation::kGelu}) {
        // Lq < Lk, Lq > Lk and Lq = Lk side by side, incl. lengths around a 64-row tile.
        CaseShape s = BaseShape({3, 9, 5, 65, 1, 7}, {8, 2, 5, 63, 7, 1});
        s.options.act = act;
        s.options.mask = mask;
        s.options.align = align;
        s.options.window_left = 2;
        s.options.window_right = 1;
        s.options.block = 4;
        s.dense_bias_heads = 1;
        s.rel_bias_heads = 2;
        ExpectMatchesPadded(check::BuildCase(s));
      }
    }
  }
}

// Scores in the hundreds: softmax must subtract the row max (exp(700) overflows), and the pointwise
// acts must stay finite (overflow-safe sigmoid, erfc tails).
TEST(EdgeShapes, LargeScoresStayFiniteAndMatchPadded) {
  std::mt19937_64 rng(8);
  for (int a = 0; a < kNumActivations; ++a) {
    check::CaseConfig config;
    config.acts = {static_cast<Activation>(a)};
    config.max_length = 8;
    for (int rep = 0; rep < 4; ++rep) {
      AttentionCase c = check::RandomAttentionCase(rng, config);
      for (double& x : c.q.data) x *= 30;
      for (double& x : c.k.data) x *= 30;
      ExpectMatchesPadded(c);
    }
  }
}

// Rows with no valid key: under bottom_right causal with Lq > Lk the first Lq - Lk rows; a
// sequence with Lk = 0; top_left window(0,0) rows past Lk; block rows aligned before key 0.
TEST(EdgeShapes, FullyMaskedRowsGiveZeroOutputMinusInfinityLseAndZeroGradients) {
  struct Setup {
    MaskKind mask;
    Alignment align;
    int64_t left, right, block;
  };
  const Setup setups[] = {{MaskKind::kCausal, Alignment::kBottomRight, -1, 0, 64},
                          {MaskKind::kWindow, Alignment::kTopLeft, 0, 0, 64},
                          {MaskKind::kBlock, Alignment::kBottomRight, -1, -1, 2},
                          {MaskKind::kNone, Alignment::kBottomRight, -1, -1, 64}};
  for (int a = 0; a < kNumActivations; ++a) {
    for (const Setup& setup : setups) {
      CaseShape s = BaseShape({5, 3, 2}, {2, 0, 2});
      s.options.act = static_cast<Activation>(a);
      s.options.mask = setup.mask;
      s.options.align = setup.align;
      s.options.window_left = setup.left;
      s.options.window_right = setup.right;
      s.options.block = setup.block;
      s.dense_bias_heads = 2;  // NaN outside valid pairs: an empty row must not read it
      s.rel_bias_heads = 1;
      const AttentionCase c = check::BuildCase(s);
      const std::vector<double> d_o = check::RandomCotangent(c, 3);
      const auto run = check::RunOracle(c, d_o);
      ASSERT_TRUE(run.ok()) << run.status();
      EXPECT_TRUE(testing::HasNoNaN(*run)) << "case: " << c;
      EXPECT_TRUE(testing::MatchesPadded(*run, testing::PaddedAttention(c, d_o), kTolerance))
          << "case: " << c;
      int empty_rows = 0;
      const int64_t h_count = c.heads();
      const int64_t to = check::OutputRows(c);
      for (const auto& p : check::PairSequences(c)) {
        for (int64_t i = 0; i < p.lq; ++i) {
          bool any = false;
          for (int64_t j = 0; j < p.lk; ++j)
            any |= check::PairIsValid(c.options, i, j, p.lq, p.lk);
          if (any) continue;
          ++empty_rows;
          const int64_t row = p.o_begin + i;
          for (int64_t h = 0; h < h_count; ++h) {
            for (int64_t e = 0; e < c.dv(); ++e) {
              EXPECT_EQ(run->fwd.o[(row * h_count + h) * c.dv() + e], 0.0) << "row " << row;
            }
            for (int64_t d = 0; d < c.dqk(); ++d) {
              EXPECT_EQ(run->bwd.dq[((p.q_begin + i) * h_count + h) * c.dqk() + d], 0.0)
                  << "row " << row << " case: " << c;
            }
            if (s.options.act == Activation::kSoftmax) {
              EXPECT_EQ(run->fwd.lse[h * to + row], -std::numeric_limits<double>::infinity());
            }
          }
        }
      }
      EXPECT_GT(empty_rows, 0) << "the setup must produce empty rows; case: " << c;
    }
  }
}

}  // namespace
}  // namespace gemtb
