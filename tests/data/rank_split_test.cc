// How a job's global batch is split among ranks (model/data/rank_split.h), on batches of the tiny
// generator: every policy's order is a permutation whose ranks take whole sub-batches; contiguous is
// generator order; bbs deals sub-batches in snake order by load and balance gives each to the
// least-loaded rank, so that the heaviest rank carries no more events than under contiguous (and
// less on a batch built to be skewed); SelectSamples moves every field of a sample together,
// permuting back gives the batch's bytes, and a rank's part is the generator's batch of its samples; splits that do not fit are refused by name.
#include "model/data/rank_split.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "model/data/batch.h"
#include "model/data/data_params_json.h"
#include "model/data/shape_from_config.h"
#include "model/description/model_config.h"

namespace gemtb::data {
namespace {

Batch TinyBatch(int64_t count, int64_t first = 0) {
  absl::StatusOr<gemtb::model::ModelConfig> config = gemtb::model::LoadModelConfig("tiny");
  EXPECT_TRUE(config.ok()) << config.status();
  absl::StatusOr<DataParams> params = LoadDataParams("tiny");
  EXPECT_TRUE(params.ok()) << params.status();
  absl::StatusOr<Generator> g = Generator::Create(*params, ShapeFromConfig(*config));
  EXPECT_TRUE(g.ok()) << g.status();
  return GenerateBatch(*g, 3, first, count);
}

// The events each rank carries under `order`.
std::vector<int64_t> RankLoads(const Batch& batch, const std::vector<int64_t>& order, int64_t ranks) {
  const std::vector<int64_t> events = SampleEvents(batch);
  const int64_t local = batch.size / ranks;
  std::vector<int64_t> loads(static_cast<size_t>(ranks), 0);
  for (size_t i = 0; i < order.size(); ++i) loads[i / static_cast<size_t>(local)] += events[static_cast<size_t>(order[i])];
  return loads;
}

bool SameBatch(const Batch& a, const Batch& b) {
  return a.size == b.size && a.indices == b.indices && a.keys == b.keys && a.lengths == b.lengths &&
         a.values == b.values && a.dense == b.dense && a.surface == b.surface && a.seq_lengths == b.seq_lengths &&
         a.prob == b.prob && a.label == b.label && a.mask == b.mask;
}

TEST(RankSplit, EveryPolicyIsAPermutationOfWholeSubBatches) {
  const Batch batch = TinyBatch(64);
  for (RankSplit split : {RankSplit::kContiguous, RankSplit::kBbs, RankSplit::kBalance}) {
    absl::StatusOr<std::vector<int64_t>> order = RankSampleOrder(batch, split, 4, 8);
    ASSERT_TRUE(order.ok()) << order.status();
    std::vector<int64_t> sorted = *order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> all(64);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(sorted, all) << RankSplitName(split);
    for (size_t i = 0; i < order->size(); i += 8) {
      EXPECT_EQ((*order)[i] % 8, 0) << RankSplitName(split) << ": entry " << i;
      for (size_t s = 1; s < 8; ++s) EXPECT_EQ((*order)[i + s], (*order)[i] + static_cast<int64_t>(s));
    }
  }
  absl::StatusOr<std::vector<int64_t>> contiguous = RankSampleOrder(batch, RankSplit::kContiguous, 4, 8);
  for (int64_t b = 0; b < 64; ++b) EXPECT_EQ((*contiguous)[static_cast<size_t>(b)], b);
}

TEST(RankSplit, BalancingLowersTheHeaviestRank) {
  Batch batch = TinyBatch(64);
  // Skew it: the first rank's contiguous share gets every sequence's longest lengths' events counted
  // twice over (lengths only matter through their sums here).
  const size_t B = 64;
  for (size_t j = 0; j < batch.seq_lengths.size() / B; ++j)
    for (size_t b = 0; b < 16; ++b) batch.seq_lengths[j * B + b] += 100;
  absl::StatusOr<std::vector<int64_t>> contiguous = RankSampleOrder(batch, RankSplit::kContiguous, 4, 4);
  ASSERT_TRUE(contiguous.ok());
  const std::vector<int64_t> base = RankLoads(batch, *contiguous, 4);
  for (RankSplit split : {RankSplit::kBbs, RankSplit::kBalance}) {
    absl::StatusOr<std::vector<int64_t>> order = RankSampleOrder(batch, split, 4, 4);
    ASSERT_TRUE(order.ok()) << order.status();
    const std::vector<int64_t> loads = RankLoads(batch, *order, 4);
    EXPECT_LT(*std::max_element(loads.begin(), loads.end()), *std::max_element(base.begin(), base.end()))
        << RankSplitName(split);
    EXPECT_EQ(std::accumulate(loads.begin(), loads.end(), int64_t{0}),
              std::accumulate(base.begin(), base.end(), int64_t{0}));
  }
}

TEST(RankSplit, SelectSamplesMovesWholeSamplesAndPermutesBack) {
  const Batch batch = TinyBatch(24);
  absl::StatusOr<std::vector<int64_t>> order = RankSampleOrder(batch, RankSplit::kBalance, 3, 4);
  ASSERT_TRUE(order.ok()) << order.status();
  const Batch moved = SelectSamples(batch, *order);
  for (size_t b = 0; b < 24; ++b) {
    const Batch one = SelectSamples(batch, std::vector<int64_t>(24, (*order)[b]));  // every slot sample order[b]
    EXPECT_EQ(moved.indices[b], batch.indices[static_cast<size_t>((*order)[b])]);
    EXPECT_EQ(moved.indices[b], one.indices[0]);
  }
  std::vector<int64_t> inverse(24);
  for (size_t b = 0; b < 24; ++b) inverse[static_cast<size_t>((*order)[b])] = static_cast<int64_t>(b);
  EXPECT_TRUE(SameBatch(SelectSamples(moved, inverse), batch));
  std::vector<int64_t> identity(24);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_TRUE(SameBatch(SelectSamples(batch, identity), batch));
  // A sample's ids travel with it: the item ids of sample order[0] lead the moved batch's first sequence key.
  const size_t item_key = batch.keys.size() - 3 * (batch.seq_lengths.size() / 24);
  EXPECT_EQ(moved.lengths[item_key * 24], batch.lengths[item_key * 24 + static_cast<size_t>((*order)[0])]);
}

// A rank's contiguous part is the batch the generator makes of those samples alone.
TEST(RankSplit, SelectingARanksPartGivesTheGeneratorsBatchOfIt) {
  const Batch batch = TinyBatch(24);
  std::vector<int64_t> part(8);
  std::iota(part.begin(), part.end(), 8);
  EXPECT_TRUE(SameBatch(SelectSamples(batch, part), TinyBatch(8, 8)));
}

TEST(RankSplit, SplitsThatDoNotFitAreRefusedByName) {
  const Batch batch = TinyBatch(24);
  EXPECT_NE(RankSampleOrder(batch, RankSplit::kBbs, 5, 4).status().message().find("24 samples do not split into 5"),
            std::string::npos);
  EXPECT_NE(RankSampleOrder(batch, RankSplit::kBalance, 3, 5).status().message().find("sub_batch: 5"),
            std::string::npos);
  EXPECT_TRUE(RankSampleOrder(batch, RankSplit::kContiguous, 3, 5).ok());  // no sub-batches to form
  EXPECT_EQ(RankSplitFromName("bbs"), RankSplit::kBbs);
  EXPECT_FALSE(RankSplitFromName("random").has_value());
}

}  // namespace
}  // namespace gemtb::data
