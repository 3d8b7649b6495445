// Determinism / Threads: {1, 2, 3, 8, all} threads and repeated runs give the same
// bytes for every output and gradient, in oracle and in emulate mode.
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/attention_cases.h"
#include "tests/testing/oracle_harness.h"

namespace gemtb {
namespace {

using check::AttentionCase;
using check::CaseConfig;

// Cases big enough that every thread count really splits the work: several sequences of tens of
// rows, GQA, every bias form, RoPE.
std::vector<AttentionCase> DeterminismCases(ElementType input_type) {
  struct Setup {
    Activation act;
    MaskKind mask;
    check::Pairing pairing;
  };
  std::vector<AttentionCase> cases;
  std::mt19937_64 rng(31337);
  for (const Setup& s :
       {Setup{Activation::kSoftmax, MaskKind::kCausal, check::Pairing::kSelf},
        Setup{Activation::kSilu, MaskKind::kWindow, check::Pairing::kKvIndex},
        Setup{Activation::kGeluTanh, MaskKind::kBlock, check::Pairing::kCross},
        Setup{Activation::kSoftmax, MaskKind::kNone, check::Pairing::kBroadcast}}) {
    CaseConfig config;
    config.acts = {s.act};
    config.masks = {s.mask};
    config.pairing = s.pairing;
    config.max_sequences = 5;
    config.max_length = 70;
    config.max_heads = 4;
    config.max_dim = 16;
    config.input_type = input_type;
    check::CaseShape shape = check::RandomCaseShape(rng, config);
    shape.heads = 4;
    shape.kv_heads = 2;
    shape.dense_bias_heads = 2;
    shape.rel_bias_heads = 4;
    shape.time_bias_heads = s.pairing == check::Pairing::kSelf ? 1 : 0;
    shape.rope_qk = true;
    shape.rope_v = true;
    shape.dqk = 16;
    shape.dv = 8;
    shape.options.window_left = 9;
    shape.options.window_right = 3;
    shape.options.block = 16;
    cases.push_back(check::BuildCase(shape));
  }
  return cases;
}

void ExpectSameBytesForEveryThreadCount(ElementType input_type, reference::Precision precision) {
  for (const AttentionCase& c : DeterminismCases(input_type)) {
    const std::vector<double> d_o = check::RandomCotangent(c, 5);
    const auto first = check::RunOracle(c, d_o, {.precision = precision, .threads = 1});
    ASSERT_TRUE(first.ok()) << first.status() << "\n  case: " << c;
    for (int threads : {1, 2, 3, 8, 0}) {
      for (int rerun = 0; rerun < 3; ++rerun) {
        const auto again = check::RunOracle(c, d_o, {.precision = precision, .threads = threads});
        ASSERT_TRUE(again.ok()) << again.status();
        EXPECT_TRUE(testing::BitIdentical(*again, *first))
            << threads << " threads, rerun " << rerun << "\n  case: " << c;
      }
    }
  }
}

TEST(Determinism, OracleOutputsBitIdenticalForAnyThreadCountAndRerun) {
  ExpectSameBytesForEveryThreadCount(ElementType::kFloat64, reference::Precision::kOracle);
}

TEST(Determinism, EmulateOutputsBitIdenticalForAnyThreadCountAndRerun) {
  ExpectSameBytesForEveryThreadCount(ElementType::kBFloat16, reference::Precision::kEmulate);
  ExpectSameBytesForEveryThreadCount(ElementType::kFloat16, reference::Precision::kEmulate);
}

}  // namespace
}  // namespace gemtb
