// Masks and alignments; a window of at least maxL equals no mask; block(n) equals a dense block-diagonal mask.
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/attention/attention_options.h"
#include "reference/attention/attention.h"
#include "tests/testing/attention_cases.h"
#include "tests/testing/oracle_harness.h"
#include "tests/testing/padded_attention.h"
#include "tests/testing/rapidcheck_runner.h"

namespace gemtb {
namespace {

using check::AttentionCase;
using check::CaseConfig;

// Reads the kept keys of every query row off the oracle: with q = k = 0 all scores are 0, so
// softmax spreads 1/n over the n kept keys; with one-hot values v_j = e_j, O_i[j] = 1/n or 0.
// Returns one string per row, 'x' for a kept key and '.' otherwise, and checks O and LSE exactly.
std::vector<std::string> KeptKeys(int64_t lq, int64_t lk, const AttentionOptions& options) {
  check::CaseShape shape;
  shape.q_lengths = {lq};
  shape.kv_lengths = {lk};
  shape.dqk = 2;
  shape.dv = lk;
  shape.options = options;
  shape.options.act = Activation::kSoftmax;
  AttentionCase c = check::BuildCase(shape);
  for (double& x : c.q.data) x = 0;
  for (double& x : c.k.data) x = 0;
  for (int64_t j = 0; j < lk; ++j) {
    for (int64_t e = 0; e < lk; ++e) c.v.data[j * lk + e] = j == e ? 1.0 : 0.0;
  }
  std::vector<std::string> rows(lq, std::string(lk, '?'));
  const auto run = check::RunOracleForward(c);
  EXPECT_TRUE(run.ok()) << run.status();
  if (!run.ok()) return rows;
  for (int64_t i = 0; i < lq; ++i) {
    int64_t n = 0;
    for (int64_t j = 0; j < lk; ++j) n += run->fwd.o[i * lk + j] > 0 ? 1 : 0;
    for (int64_t j = 0; j < lk; ++j) {
      const double o = run->fwd.o[i * lk + j];
      rows[i][j] = o > 0 ? 'x' : '.';
      EXPECT_TRUE(o == 0 || std::fabs(o - 1.0 / n) <= 1e-15) << "row " << i << " key " << j;
    }
    const double lse = run->fwd.lse[i];
    if (n == 0) {
      EXPECT_EQ(lse, -std::numeric_limits<double>::infinity()) << "row " << i;
    } else {
      EXPECT_NEAR(lse, std::log(static_cast<double>(n)), 1e-15) << "row " << i;
    }
  }
  return rows;
}

AttentionOptions Mask(MaskKind kind, Alignment align, int64_t left = -1, int64_t right = -1,
                      int64_t block = 64) {
  AttentionOptions o;
  o.mask = kind;
  o.align = align;
  o.window_left = left;
  o.window_right = right;
  o.block = block;
  return o;
}

using Rows = std::vector<std::string>;
constexpr Alignment kBR = Alignment::kBottomRight;
constexpr Alignment kTL = Alignment::kTopLeft;

TEST(Mask, CausalKeepsKeysUpToTheAlignedDiagonal) {
  EXPECT_EQ(KeptKeys(2, 4, Mask(MaskKind::kCausal, kBR)), (Rows{"xxx.", "xxxx"}));
  EXPECT_EQ(KeptKeys(2, 4, Mask(MaskKind::kCausal, kTL)), (Rows{"x...", "xx.."}));
  EXPECT_EQ(KeptKeys(4, 2, Mask(MaskKind::kCausal, kBR)), (Rows{"..", "..", "x.", "xx"}));
  EXPECT_EQ(KeptKeys(4, 2, Mask(MaskKind::kCausal, kTL)), (Rows{"x.", "xx", "xx", "xx"}));
  EXPECT_EQ(KeptKeys(3, 3, Mask(MaskKind::kCausal, kBR)), (Rows{"x..", "xx.", "xxx"}));
}

TEST(Mask, WindowKeepsKeysWithinLeftAndRightOfTheAlignedDiagonal) {
  EXPECT_EQ(KeptKeys(4, 4, Mask(MaskKind::kWindow, kBR, 1, 0)),
            (Rows{"x...", "xx..", ".xx.", "..xx"}));
  EXPECT_EQ(KeptKeys(3, 5, Mask(MaskKind::kWindow, kTL, 0, 1)), (Rows{"xx...", ".xx..", "..xx."}));
  EXPECT_EQ(KeptKeys(3, 5, Mask(MaskKind::kWindow, kBR, -1, 1)), (Rows{"xxxx.", "xxxxx", "xxxxx"}));
  EXPECT_EQ(KeptKeys(4, 4, Mask(MaskKind::kWindow, kTL, 2, -1)),
            (Rows{"xxxx", "xxxx", "xxxx", ".xxx"}));
  EXPECT_EQ(KeptKeys(3, 2, Mask(MaskKind::kWindow, kTL, 0, 0)), (Rows{"x.", ".x", ".."}));
  EXPECT_EQ(KeptKeys(4, 2, Mask(MaskKind::kWindow, kBR, 0, 0)), (Rows{"..", "..", "x.", ".x"}));
}

TEST(Mask, BlockKeepsTheAlignedQueryChunkWithFloorDivision) {
  EXPECT_EQ(KeptKeys(5, 5, Mask(MaskKind::kBlock, kBR, -1, -1, 2)),
            (Rows{"xx...", "xx...", "..xx.", "..xx.", "....x"}));
  EXPECT_EQ(KeptKeys(3, 5, Mask(MaskKind::kBlock, kBR, -1, -1, 2)),
            (Rows{"..xx.", "..xx.", "....x"}));
  // a_i = i - 2 < 0 for the first rows: floor(-1/2) = -1 matches no key chunk (truncation would
  // put a_i = -1 into chunk 0).
  EXPECT_EQ(KeptKeys(5, 3, Mask(MaskKind::kBlock, kBR, -1, -1, 2)),
            (Rows{"...", "...", "xx.", "xx.", "..x"}));
  EXPECT_EQ(KeptKeys(4, 2, Mask(MaskKind::kBlock, kTL, -1, -1, 3)), (Rows{"xx", "xx", "xx", ".."}));
}

TEST(Mask, NoneKeepsEveryKey) {
  EXPECT_EQ(KeptKeys(2, 3, Mask(MaskKind::kNone, kBR)), (Rows{"xxx", "xxx"}));
  EXPECT_EQ(KeptKeys(3, 1, Mask(MaskKind::kNone, kTL)), (Rows{"x", "x", "x"}));
}

// Window ≥ maxL: window(maxL, maxL) is bitwise equal to none, forward and backward.
TEST(Mask, WindowCoveringMaxLengthIsBitwiseEqualToNone) {
  CaseConfig config;
  config.masks = {MaskKind::kNone};
  testing::CheckProperty(300, [config] {
    const AttentionCase none = *testing::GenAttentionCase(config);
    AttentionCase window = none;
    window.options.mask = MaskKind::kWindow;
    window.options.window_left = none.max_l();
    window.options.window_right = none.max_l();
    const std::vector<double> d_o = check::RandomCotangent(none, none.shape.value_seed ^ 0x5a);
    const auto a = check::RunOracle(none, d_o);
    const auto b = check::RunOracle(window, d_o);
    testing::RcRequireOk(a.status(), none);
    testing::RcRequireOk(b.status(), window);
    testing::RcRequire(testing::BitIdentical(*a, *b), window);
  });
}

// causal is defined as window(-1, 0).
TEST(Mask, CausalIsBitwiseEqualToWindowMinusOneZero) {
  CaseConfig config;
  config.masks = {MaskKind::kCausal};
  testing::CheckProperty(200, [config] {
    const AttentionCase causal = *testing::GenAttentionCase(config);
    AttentionCase window = causal;
    window.options.mask = MaskKind::kWindow;
    window.options.window_left = -1;
    window.options.window_right = 0;
    const std::vector<double> d_o = check::RandomCotangent(causal, causal.shape.value_seed + 3);
    const auto a = check::RunOracle(causal, d_o);
    const auto b = check::RunOracle(window, d_o);
    testing::RcRequireOk(a.status(), causal);
    testing::RcRequireOk(b.status(), window);
    testing::RcRequire(testing::BitIdentical(*a, *b), window);
  });
}

// Block: block(n) equals the dense path whose mask is built as block-diagonal tiles
// [t·n, (t+1)·n) × [t·n, (t+1)·n) in (aligned query, key) coordinates.
TEST(Mask, BlockEqualsDensePathWithBlockDiagonalMask) {
  CaseConfig config;
  config.masks = {MaskKind::kBlock};
  config.max_length = 9;
  testing::CheckProperty(300, [config] {
    const AttentionCase c = *testing::GenAttentionCase(config);
    const auto pairs = check::PairSequences(c);
    const int64_t n = c.options.block;
    const bool bottom_right = c.options.align == Alignment::kBottomRight;
    auto block_diagonal = [&](int64_t b, int64_t i, int64_t j) {
      const int64_t a = i + (bottom_right ? pairs[b].lk - pairs[b].lq : 0);
      for (int64_t start = 0; start < pairs[b].lk; start += n) {
        const bool key_in = start <= j && j < start + n;
        const bool query_in = start <= a && a < start + n;
        if (key_in && query_in) return true;
      }
      return false;
    };
    const std::vector<double> d_o = check::RandomCotangent(c, c.shape.value_seed + 11);
    const auto run = check::RunOracle(c, d_o);
    testing::RcRequireOk(run.status(), c);
    testing::RcRequire(
        testing::MatchesPadded(*run, testing::PaddedAttention(c, d_o, block_diagonal), 1e-12), c);
  });
}

// Window and block parameters as large as int64 allows must not overflow inside the mask: they
// keep every key (window) or every key from a_i's chunk 0 on (block, top_left: a_i = i >= 0).
TEST(Mask, HugeWindowAndBlockParametersKeepEveryKey) {
  constexpr int64_t kHuge = std::numeric_limits<int64_t>::max();
  CaseConfig config;
  config.masks = {MaskKind::kNone};
  std::mt19937_64 rng(5);
  for (int rep = 0; rep < 40; ++rep) {
    const AttentionCase none = check::RandomAttentionCase(rng, config);
    const std::vector<double> d_o = check::RandomCotangent(none, rng());
    const auto want = check::RunOracle(none, d_o);
    ASSERT_TRUE(want.ok()) << want.status();
    AttentionCase window = none;
    window.options.mask = MaskKind::kWindow;
    window.options.window_left = kHuge;
    window.options.window_right = kHuge;
    const auto got_window = check::RunOracle(window, d_o);
    ASSERT_TRUE(got_window.ok()) << got_window.status();
    EXPECT_TRUE(testing::BitIdentical(*got_window, *want)) << "window(max,max); case: " << none;
    AttentionCase none_top_left = none;  // the rel-pos bias depends on the alignment
    none_top_left.options.align = Alignment::kTopLeft;
    AttentionCase block = none_top_left;
    block.options.mask = MaskKind::kBlock;
    block.options.block = kHuge;
    const auto got_block = check::RunOracle(block, d_o);
    ASSERT_TRUE(got_block.ok()) << got_block.status();
    EXPECT_TRUE(
        testing::MatchesPadded(*got_block, testing::PaddedAttention(none_top_left, d_o), 1e-12))
        << "block(max), top_left; case: " << block;
  }
}

// FLOPs count valid pairs only, 2·H·(Dqk+Dv) per pair.
TEST(Mask, ForwardFlopsCountOnlyValidPairs) {
  std::mt19937_64 rng(99);
  for (int rep = 0; rep < 200; ++rep) {
    const AttentionCase c = check::RandomAttentionCase(rng, CaseConfig{});
    const auto flops = reference::AttentionForwardFlops(c.View(), c.options);
    ASSERT_TRUE(flops.ok()) << flops.status() << "\n  case: " << c;
    const double want = 2.0 * static_cast<double>(c.heads() * (c.dqk() + c.dv())) *
                        static_cast<double>(testing::CountValidPairs(c));
    EXPECT_EQ(*flops, want) << "case: " << c;
  }
}

}  // namespace
}  // namespace gemtb
