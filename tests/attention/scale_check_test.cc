// The scale tier of `gemtb check attention` on the CPU: what its draw produces (sizes, pairings,
// items per SM) and that its sampler catches an error in what it samples and claims nothing about
// what it does not. The kernels' outputs are stood in for by the oracle's emulate mode on the whole
// batch, with single elements perturbed.
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <numeric>
#include <set>
#include <vector>

#include <oneapi/tbb/task_arena.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/attention/benchmark_lengths.h"
#include "model/numerics/float_formats.h"
#include "tools/check/attention_check.h"
#include "tools/check/oracle_run.h"
#include "tools/check/scale_case.h"
#include "tools/check/scale_sample.h"

namespace gemtb {
namespace {

using check::ScaleCase;
using check::ScalePairing;
using check::ScaleSample;

int64_t MaxOf(const std::vector<int64_t>& v) { return *std::max_element(v.begin(), v.end()); }

TEST(ScaleDraw, SizesPairingsAndItemsAreWithinTheTiersBounds) {
  std::set<ScalePairing> pairings;
  std::set<ElementType> dtypes;
  std::set<int64_t> dims;
  int64_t longest_local = 0, longest_full = 0;
  for (const check::Family& f : check::AllFamilies()) {
    const bool local = f.mask == MaskKind::kWindow || f.mask == MaskKind::kBlock;
    for (int64_t i = 0; i < 4; ++i) {
      const ScalePairing want = check::kAllScalePairings[i];
      const ScaleCase c = check::DrawScaleCase(check::CaseSeed(7, check::FamilyIndex(f), i), f, 8192, want);
      SCOPED_TRACE(check::DescribeScale(c));
      EXPECT_EQ(c.pairing, want);
      EXPECT_EQ(c.options.act, f.act);
      EXPECT_EQ(c.options.mask, f.mask);
      pairings.insert(c.pairing);
      dtypes.insert(c.input_type);
      dims.insert(c.head_dim);
      EXPECT_THAT(check::kCheckHeadDims, ::testing::Contains(c.head_dim));
      EXPECT_LE(c.heads, 8);
      EXPECT_EQ(c.heads % c.kv_heads, 0);
      const int64_t outputs = static_cast<int64_t>(check::PairScaleSequences(c).size());
      if (c.pairing == ScalePairing::kBroadcast) {
        EXPECT_GE(outputs, 1000);
        EXPECT_EQ(c.q_lengths.size(), 1u);
      } else {
        EXPECT_GE(outputs, 64);
      }
      EXPECT_LE(outputs, 2048);
      const int64_t longest = std::max(MaxOf(c.q_lengths), MaxOf(c.kv_lengths));
      EXPECT_LE(longest, local ? 8192 : 4096);
      EXPECT_LE(MaxOf(c.q_lengths), c.max_lq);
      EXPECT_LE(MaxOf(c.kv_lengths), c.max_lk);
      (local ? longest_local : longest_full) = std::max(local ? longest_local : longest_full, longest);
      EXPECT_GE(check::ForwardItems(c), check::kScaleMinItemsPerSm * check::kH200Sms);
      EXPECT_LE(check::MinimumSampleCost(c), check::kScaleMaxSampleCost);
    }
  }
  EXPECT_EQ(pairings.size(), 4u);
  EXPECT_EQ(dtypes.size(), 2u);
  EXPECT_EQ(dims.size(), std::size(check::kCheckHeadDims));
  // Long sequences are drawn, not only the small tier's few hundred keys.
  EXPECT_GT(longest_local, 4096);
  EXPECT_GT(longest_full, 2048);
}

TEST(ScaleDraw, MaxLengthBoundsEveryLength) {
  const check::Family f{Activation::kSilu, MaskKind::kWindow};
  for (int64_t i = 0; i < 8; ++i) {
    const ScaleCase c = check::DrawScaleCase(check::CaseSeed(3, 0, i), f, 100, check::kAllScalePairings[i % 4]);
    EXPECT_LE(std::max(MaxOf(c.q_lengths), MaxOf(c.kv_lengths)), 100) << check::DescribeScale(c);
  }
}

TEST(SmallDraw, MaxLengthIsTheLongestSequenceDrawn) {
  int64_t longest = 0;
  for (int64_t i = 0; i < 60; ++i) {
    const check::AttentionCase c =
        check::DrawCase(check::CaseSeed(5, 0, i), {Activation::kSilu, MaskKind::kNone}, 1000);
    for (int64_t l : c.shape.q_lengths) longest = std::max(longest, l);
    for (int64_t l : c.shape.kv_lengths) longest = std::max(longest, l);
  }
  EXPECT_LE(longest, 1000);
  EXPECT_GT(longest, 300);  // the small tier used to stop at 300 whatever the flag said
}

// The small tier draws every head dim the GPU kernels run, and only those, with Dv = Dqk.
TEST(SmallDraw, HeadDimsAreTheKernelsHeadDims) {
  std::set<int64_t> dims;
  for (int64_t i = 0; i < 60; ++i) {
    const check::AttentionCase c =
        check::DrawCase(check::CaseSeed(5, 0, i), {Activation::kSoftmax, MaskKind::kCausal}, 300);
    EXPECT_THAT(check::kCheckHeadDims, ::testing::Contains(c.dqk()));
    EXPECT_EQ(c.dv(), c.dqk());
    dims.insert(c.dqk());
  }
  EXPECT_EQ(dims, std::set<int64_t>({16, 32, 64, 128}));
}

TEST(ScaleValues, BitsAreTheValuesOfTheGenerator) {
  ScaleCase c;
  c.q_lengths = c.kv_lengths = {3, 5};
  c.heads = 2;
  c.kv_heads = 1;
  c.head_dim = 64;
  c.value_seed = 11;
  for (ElementType t : {ElementType::kBFloat16, ElementType::kFloat16}) {
    c.input_type = t;
    const std::vector<uint16_t> k = check::ScaleBits(c, check::ScaleTensor::kK);
    ASSERT_EQ(k.size(), 8u * 64);
    for (size_t i = 0; i < k.size(); ++i) {
      ASSERT_EQ(check::BitsValue(k[i], t), check::ScaleValue(c, check::ScaleTensor::kK, static_cast<int64_t>(i)));
    }
  }
}

// ScaleBits splits the tensor across TBB's threads; every element is a function of (value seed,
// tensor, element) alone, so one thread and many give the same bits, and each is ScaleValue's.
TEST(ScaleValues, BitsAreTheSameOnOneThreadAndOnMany) {
  ScaleCase c;
  c.q_lengths = {1000, 1, 3095};  // 4,096 rows x 4 heads x 128: 2^21 elements, many TBB chunks
  c.kv_lengths = {4096};
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 128;
  c.value_seed = 0x9E3779B97F4A7C15ull;
  for (ElementType t : {ElementType::kBFloat16, ElementType::kFloat16}) {
    for (check::ValueDistribution d : {check::ValueDistribution::kNormal, check::ValueDistribution::kUniformSmall}) {
      c.input_type = t;
      c.values = d;
      std::vector<uint16_t> one, many;
      tbb::task_arena(1).execute([&] { one = check::ScaleBits(c, check::ScaleTensor::kQ); });
      tbb::task_arena(8).execute([&] { many = check::ScaleBits(c, check::ScaleTensor::kQ); });
      ASSERT_EQ(one.size(), size_t{1} << 21);
      ASSERT_TRUE(one == many) << "dtype " << static_cast<int>(t) << " values " << static_cast<int>(d);
      for (size_t i = 0; i < one.size(); ++i) {
        const double x = check::ScaleValue(c, check::ScaleTensor::kQ, static_cast<int64_t>(i));
        const uint16_t want = t == ElementType::kBFloat16 ? numerics::DoubleToBf16BitsRne(x)
                                                          : numerics::DoubleToFp16BitsRne(x);
        ASSERT_EQ(one[i], want) << "element " << i;
      }
    }
  }
}

// A batch small enough for the oracle to stand in for the kernels on all of it.
ScaleCase SmallBatch(ScalePairing pairing) {
  ScaleCase c;
  c.pairing = pairing;
  c.kv_lengths = {7, 12, 3, 9, 15, 5, 11, 8};
  switch (pairing) {
    case ScalePairing::kSelf:
      c.q_lengths = c.kv_lengths;
      break;
    case ScalePairing::kCross:
      c.q_lengths = {4, 9, 13, 2, 6, 10, 7, 5};
      break;
    case ScalePairing::kKvIndex:
      c.q_lengths = {4, 9, 13, 2, 6, 10, 7, 5, 3, 8};
      c.kv_index = {0, 3, 3, 1, 0, 5, 7, 3, 2, 1};  // K/V sequences 4 and 6 have no reader
      break;
    case ScalePairing::kBroadcast:
      c.q_lengths = {6};
      c.options.broadcast_q = true;
      break;
  }
  c.max_lq = MaxOf(c.q_lengths);
  c.max_lk = MaxOf(c.kv_lengths);
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 64;
  c.options.act = Activation::kSoftmax;
  c.options.mask = MaskKind::kCausal;
  c.input_type = ElementType::kBFloat16;
  c.value_seed = 99;
  return c;
}

ScaleSample Everything(const ScaleCase& c) {
  ScaleSample s;
  s.kv_sequences.resize(c.kv_lengths.size());
  std::iota(s.kv_sequences.begin(), s.kv_sequences.end(), 0);
  s.outputs.resize(check::PairScaleSequences(c).size());
  std::iota(s.outputs.begin(), s.outputs.end(), 0);
  s.kv_heads.resize(c.kv_heads);
  std::iota(s.kv_heads.begin(), s.kv_heads.end(), 0);
  s.heads.resize(c.heads);
  std::iota(s.heads.begin(), s.heads.end(), 0);
  return s;
}

// What a correct kernel returns: the emulate mode on the whole batch, in the kernels' formats.
check::ScaleOutputs StandIn(const ScaleCase& c) {
  const ScaleSample all = Everything(c);
  const check::AttentionCase whole = check::SampledCase(c, all);
  absl::StatusOr<check::OracleRun> emu = check::RunOracle(
      whole, check::SampledCotangent(c, all), {reference::Precision::kEmulate, 1});
  EXPECT_TRUE(emu.ok()) << emu.status();
  auto bits = [](const std::vector<double>& v) {
    std::vector<uint16_t> b;
    for (double x : v) b.push_back(numerics::DoubleToBf16BitsRne(x));
    return b;
  };
  check::ScaleOutputs out;
  out.o = bits(emu->fwd.o);
  out.lse.assign(emu->fwd.lse.begin(), emu->fwd.lse.end());
  out.dq = bits(emu->bwd.dq);
  out.dk = bits(emu->bwd.dk);
  out.dv = bits(emu->bwd.dv);
  return out;
}

// Adds 0.5 to element (row, head, 0) of a [rows, heads, D] pattern tensor.
void Plant(std::vector<uint16_t>& t, int64_t row, int64_t head, int64_t heads, int64_t d) {
  uint16_t& x = t.at(static_cast<size_t>((row * heads + head) * d));
  x = numerics::DoubleToBf16BitsRne(check::BitsValue(x, ElementType::kBFloat16) + 0.5);
}

bool Contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

check::CaseResult JudgeWith(const ScaleCase& c, const ScaleSample& s, const check::ScaleOutputs& out) {
  return check::JudgeSample(c, s, check::GatherSample(c, s, out));
}

class Sampler : public ::testing::TestWithParam<ScalePairing> {};

TEST_P(Sampler, CatchesAPlantedErrorInTheSampleAndClaimsNothingOutside) {
  const ScaleCase c = SmallBatch(GetParam());
  // A budget that takes a few K/V sequences, not all of them (broadcast_q: always all).
  const ScaleSample s = check::DrawSample(c, 3, 150);
  SCOPED_TRACE(check::DescribeSample(c, s));
  ASSERT_FALSE(s.kv_sequences.empty());
  ASSERT_EQ(s.kv_heads.size(), 1u);
  ASSERT_EQ(s.heads.size(), 2u);
  const check::ScaleOutputs good = StandIn(c);
  const check::CaseResult clean = JudgeWith(c, s, good);
  EXPECT_TRUE(clean.pass) << clean.description << "\n" << ::testing::PrintToString(clean.failures);

  const std::vector<check::SequencePair> pairs = check::PairScaleSequences(c);
  const std::vector<int64_t> kv_off = OffsetsFromLengths(c.kv_lengths);
  const int64_t unsampled_head = s.kv_heads[0] == 0 ? 2 : 0;  // a query head of the other K/V head
  const int64_t sampled_head = s.heads[1];

  // O: an error in a sampled output fails the case; in an output outside the sample, or on a head
  // outside it, it is not claimed (the case passes).
  const int64_t in = s.outputs.back();
  check::ScaleOutputs bad = good;
  Plant(bad.o, pairs[in].o_begin + pairs[in].lq - 1, sampled_head, c.heads, c.head_dim);
  const check::CaseResult caught = JudgeWith(c, s, bad);
  EXPECT_FALSE(caught.pass);
  ASSERT_FALSE(caught.failures.empty());
  EXPECT_EQ(caught.failures[0].rfind("O:", 0), 0u) << caught.failures[0];

  bad = good;
  Plant(bad.o, pairs[in].o_begin, unsampled_head, c.heads, c.head_dim);
  EXPECT_TRUE(JudgeWith(c, s, bad).pass);
  if (!s.whole_batch) {
    int64_t out_of_sample = -1;
    for (int64_t b = 0; b < static_cast<int64_t>(pairs.size()); ++b) {
      if (!Contains(s.outputs, b) && pairs[b].lq > 0) out_of_sample = b;
    }
    ASSERT_GE(out_of_sample, 0);
    bad = good;
    Plant(bad.o, pairs[out_of_sample].o_begin, sampled_head, c.heads, c.head_dim);
    EXPECT_TRUE(JudgeWith(c, s, bad).pass);
  }

  // dK: a sampled K/V sequence's error is caught (all its readers are in the sample).
  const int64_t k = s.kv_sequences.front();
  if (c.kv_lengths[k] > 0) {
    bad = good;
    Plant(bad.dk, kv_off[k], s.kv_heads[0], c.kv_heads, c.head_dim);
    EXPECT_FALSE(JudgeWith(c, s, bad).pass);
  }
  if (!s.whole_batch) {
    int64_t k_out = -1;
    for (int64_t j = 0; j < static_cast<int64_t>(c.kv_lengths.size()); ++j) {
      if (!Contains(s.kv_sequences, j)) k_out = j;
    }
    ASSERT_GE(k_out, 0);
    bad = good;
    Plant(bad.dk, kv_off[k_out], s.kv_heads[0], c.kv_heads, c.head_dim);
    EXPECT_TRUE(JudgeWith(c, s, bad).pass);
  }

  // dQ: under broadcast_q the shared query's gradient sums over every output; it is checked.
  bad = good;
  Plant(bad.dq, pairs[in].q_begin, sampled_head, c.heads, c.head_dim);
  EXPECT_FALSE(JudgeWith(c, s, bad).pass);
}

INSTANTIATE_TEST_SUITE_P(EveryPairing, Sampler,
                         ::testing::Values(ScalePairing::kSelf, ScalePairing::kCross, ScalePairing::kKvIndex,
                                           ScalePairing::kBroadcast),
                         [](const auto& param) { return std::string(check::ScalePairingName(param.param)); });

TEST(Sampler, KvIndexSamplesEveryReaderOfASampledKvSequence) {
  const ScaleCase c = SmallBatch(ScalePairing::kKvIndex);
  const ScaleSample s = check::DrawSample(c, 8, 150);
  const std::vector<check::SequencePair> pairs = check::PairScaleSequences(c);
  for (int64_t b = 0; b < static_cast<int64_t>(pairs.size()); ++b) {
    EXPECT_EQ(Contains(s.outputs, b), Contains(s.kv_sequences, pairs[b].kv_sequence)) << b;
  }
}

TEST(Sampler, HoldsAnOutputEvenWhenOnlyUnreadKvSequencesFitTheBudget) {
  const ScaleCase c = SmallBatch(ScalePairing::kKvIndex);
  for (uint64_t seed = 0; seed < 8; ++seed) {
    const ScaleSample s = check::DrawSample(c, seed, 1);  // only the unread sequences 4, 6 cost 0
    ASSERT_FALSE(s.outputs.empty());
    EXPECT_TRUE(check::JudgeSample(c, s, check::GatherSample(c, s, StandIn(c))).pass);
  }
}

TEST(Sampler, StaysWithinTheBudgetUnlessOneSequenceExceedsIt) {
  const ScaleCase c = SmallBatch(ScalePairing::kSelf);
  const ScaleSample s = check::DrawSample(c, 1, 150);
  EXPECT_LE(s.pairs, 150);
  EXPECT_LT(s.kv_sequences.size(), c.kv_lengths.size());
  const ScaleSample one = check::DrawSample(c, 1, 1);
  EXPECT_EQ(one.kv_sequences.size(), 1u);
  EXPECT_EQ(c.kv_lengths[one.kv_sequences[0]], 3);  // the cheapest sequence
}

}  // namespace
}  // namespace gemtb
