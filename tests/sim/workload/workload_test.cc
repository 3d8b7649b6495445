// sim/workload: process-group layouts, batch draws.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cmath>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "sim/workload/batch_draw.h"
#include "sim/workload/batch_stats.h"
#include "sim/workload/batch_stats_cache.h"
#include "sim/workload/rank_groups.h"

namespace gemtb::sim {
namespace {

TEST(RankGroupsTest, EveryClassPartitionsTheWorldIntoEqualGroups) {
  Plan plan;
  plan.dense.fsdp_shard_group = 16;
  plan.dense.ep_degree = 2;
  plan.dense.expert_shard_group = 4;
  plan.dense.dim_order = {"ep", "expert_shard", "shard", "replica"};
  plan.sparse.mp_group = 8;
  const int world = 64;
  auto g = BuildRankGroups(plan, world);
  ASSERT_TRUE(g.ok()) << g.status();
  for (int c = 0; c < kNumGroupClasses; ++c) {
    const GroupLayout& l = g->layouts[c];
    std::set<int> seen;
    for (int group = 0; group < l.count; ++group) {
      for (int p = 0; p < l.size; ++p) {
        const int r = l.Member(group, p);
        EXPECT_EQ(l.GroupOf(r), group);
        EXPECT_EQ(l.PositionOf(r), p);
        seen.insert(r);
      }
    }
    EXPECT_EQ(static_cast<int>(seen.size()), world) << GroupClassName(static_cast<GroupClass>(c));
  }
  EXPECT_EQ(g->of(GroupClass::kDenseShard).stride, 1);
  EXPECT_EQ(g->of(GroupClass::kEp).stride, 1);
  EXPECT_EQ(g->of(GroupClass::kExpertShard).stride, 2);
  EXPECT_EQ(g->of(GroupClass::kSparseMp).stride, 8);  // N = 64 / 8 replicas share a host
  EXPECT_EQ(g->of(GroupClass::kSparseIntra).size, 8);
}

// plan.layout: V3's full sharding over F = 4 of the N = 16 replicas, MP groups of 8 positions 4 ranks
// apart (32 ranks), the 4 copies 32 ranks apart; every sparse class still partitions the world, and
// a rank's MP group, full-sharding group and copies are the dimensions of rank = d*32 + m*4 + i.
TEST(RankGroupsTest, SparseLayoutPlacesShardMpAndDpDimensions) {
  Plan plan;
  plan.sparse.mp_group = 8;
  plan.sparse.fully_sharded = true;
  plan.layout.sparse_shard_group = 4;
  const int world = 128;
  auto g = BuildRankGroups(plan, world);
  ASSERT_TRUE(g.ok()) << g.status();
  const GroupLayout& intra = g->of(GroupClass::kSparseIntra);
  const GroupLayout& mp = g->of(GroupClass::kSparseMp);
  const GroupLayout& dp = g->of(GroupClass::kSparseReplica);
  EXPECT_EQ(intra.size, 4);
  EXPECT_EQ(intra.stride, 1);
  EXPECT_EQ(mp.size, 8);
  EXPECT_EQ(mp.stride, 4);
  EXPECT_EQ(dp.size, 4);
  EXPECT_EQ(dp.stride, 32);
  for (const GroupLayout* l : {&intra, &mp, &dp}) {
    std::set<int> seen;
    for (int group = 0; group < l->count; ++group) {
      for (int p = 0; p < l->size; ++p) seen.insert(l->Member(group, p));
    }
    EXPECT_EQ(static_cast<int>(seen.size()), world);
  }
  const int rank = 2 * 32 + 5 * 4 + 3;  // copy 2, position 5, sub-block 3
  EXPECT_EQ(mp.PositionOf(rank), 5);
  EXPECT_EQ(intra.PositionOf(rank), 3);
  EXPECT_EQ(dp.PositionOf(rank), 2);

  // The MP dimension innermost: positions on consecutive ranks, the full-sharding group 8 apart.
  plan.layout.sparse_order = {"mp", "shard", "dp"};
  g = BuildRankGroups(plan, world);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->of(GroupClass::kSparseMp).stride, 1);
  EXPECT_EQ(g->of(GroupClass::kSparseIntra).stride, 8);
  EXPECT_EQ(g->of(GroupClass::kSparseReplica).stride, 32);

  plan.layout.sparse_shard_group = 3;
  g = BuildRankGroups(plan, world);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("plan.layout.sparse_shard_group: 3"), std::string::npos) << g.status();
}

TEST(RankGroupsTest, ShardGroupNotDividingTheWorldIsANamedError) {
  Plan plan;
  plan.dense.fsdp_shard_group = 24;
  auto g = BuildRankGroups(plan, 64);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("plan.dense.fsdp_shard_group: 24"), std::string::npos) << g.status();
}

Batches TestBatches(const std::string& policy, double corr) {
  Batches b;
  b.local_batch = 96;
  b.assignment.policy = policy;
  b.assignment.sub_batch = 16;
  b.assignment.pool_factor = 4;
  for (int j = 0; j < 2; ++j) {
    LengthLaw law;
    law.mu = std::log(j == 0 ? 64.0 : 512.0);
    law.sigma = 1.5;
    law.min = 1;
    law.max = j == 0 ? 1024 : 16384;
    law.corr = corr;
    b.features.push_back(law);
  }
  return b;
}

BatchDrawConfig TestConfig(int steps) {
  BatchDrawConfig c;
  c.seed = 3;
  c.world = 8;
  c.steps = steps;
  AttentionMask block{MaskKind::kBlock, -1, -1, 64};
  c.sequences = {{16, block, 1024}, {16, block, 16384}};
  return c;
}

// StatAffine::Program is Eval as a start value and terms added left to right: replaying it gives
// Eval's bits, compacted or not (signed zeros, cancelling terms, many magnitudes).
TEST(StatAffineTest, ProgramReplaysEvalBitForBit) {
  const std::vector<std::vector<double>> coefs = {
      {}, {-0.0}, {3.5}, {0.0, 1e-3, 0.0, -2.5e-9, 0.0, 7.0}, {-1e300, 1e300, 1.0, 0.0, -0.0, 1e-300},
      {0.1, 0.2, 0.3, 0.4, 0.5, 0.6}};
  const std::vector<std::vector<double>> rows = {
      {1.0, 1024, 3.3e7, 1.5e6, 7.7e9, 12.0}, {1.0, 0.0, -0.0, 1e-20, 1e20, 3.0}, {1.0, 3.0, 5.0, 7.0, 11.0, 13.0}};
  for (bool compact : {false, true}) {
    for (const std::vector<double>& coef : coefs) {
      StatAffine a;
      a.coef = coef;
      if (compact) a.Compact();
      std::vector<int32_t> idx = {99};  // appended after what is there
      std::vector<double> val = {-1.0};
      const double start = a.Program(idx, val);
      ASSERT_EQ(idx.size(), val.size());
      for (const std::vector<double>& row : rows) {
        double v = start;
        for (size_t k = 1; k < idx.size(); ++k) v += val[k] * row[idx[k]];
        const double want = a.Eval(row);
        EXPECT_EQ(std::bit_cast<uint64_t>(v), std::bit_cast<uint64_t>(want))
            << "compact " << compact << " terms " << coef.size() << ": " << v << " vs " << want;
      }
    }
  }
}

TEST(BatchDrawTest, StatisticsDoNotDependOnThreadCount) {
  for (double corr : {1.0, 0.5}) {
    for (const char* policy : {"random", "bbs", "global"}) {
      auto one = DrawBatchStats(TestConfig(4), TestBatches(policy, corr), 1);
      auto two = DrawBatchStats(TestConfig(4), TestBatches(policy, corr), 2);
      ASSERT_TRUE(one.ok() && two.ok());
      EXPECT_EQ(*one, *two) << policy << " corr " << corr;
    }
  }
}

TEST(BatchDrawTest, BbsRegroupsTheSameSamplesOfItsPool) {
  // Over one pool of G = 4 steps, BBS and random hold the same sub-batches: per rank, the sums of
  // B and N_j over the block agree; per step they differ.
  const int steps = 4;
  auto random = DrawBatchStats(TestConfig(steps), TestBatches("random", 1.0), 1);
  auto bbs = DrawBatchStats(TestConfig(steps), TestBatches("bbs", 1.0), 1);
  ASSERT_TRUE(random.ok() && bbs.ok());
  const StatLayout layout{2};
  const int w = layout.size();
  bool differs = false;
  for (int r = 0; r < 8; ++r) {
    for (int k : {StatLayout::kB, layout.N(0), layout.N(1), layout.P(1)}) {
      double a = 0, b = 0;
      for (int s = 0; s < steps; ++s) {
        a += (*random)[(s * 8 + r) * w + k];
        b += (*bbs)[(s * 8 + r) * w + k];
        differs |= (*random)[(s * 8 + r) * w + k] != (*bbs)[(s * 8 + r) * w + k];
      }
      EXPECT_DOUBLE_EQ(a, b) << "rank " << r << " stat " << k;
    }
  }
  EXPECT_TRUE(differs);
}

TEST(BatchDrawTest, TabulatedAndDirectDrawsFollowTheSameLengthLaw) {
  // corr = 1 uses one word per sample through the tabulated CDF; corr < 1 draws normals directly.
  // Both follow ceil(exp(mu + sigma z)) clamped: their mean tokens per sample agree within noise.
  BatchDrawConfig c = TestConfig(2);
  c.world = 64;
  Batches fast = TestBatches("random", 1.0);
  Batches direct = TestBatches("random", 0.999999);
  auto a = DrawBatchStats(c, fast, 1);
  auto b = DrawBatchStats(c, direct, 1);
  ASSERT_TRUE(a.ok() && b.ok());
  const StatLayout layout{2};
  double na = 0, nb = 0, count = 0;
  for (int row = 0; row < 2 * 64; ++row) {
    na += (*a)[row * layout.size() + layout.N(0)];
    nb += (*b)[row * layout.size() + layout.N(0)];
    count += (*a)[row * layout.size() + StatLayout::kB];
  }
  // 12,288 samples of a law with mean ~ 150 and sd ~ 200: the means agree within 4 standard errors.
  const double se = 200.0 / std::sqrt(count);
  EXPECT_NEAR(na / count, nb / count, 4 * std::sqrt(2.0) * se);
}

TEST(BatchDrawTest, UnknownPolicyIsANamedError) {
  auto r = DrawBatchStats(TestConfig(1), TestBatches("shuffle", 1.0), 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("batches.assignment.policy"), std::string::npos);
}

TEST(BatchStatsCacheTest, AHitIsTheFreshDrawDrawnOnce) {
  BatchStatsCache cache;
  const BatchDrawConfig c = TestConfig(4);
  const Batches b = TestBatches("bbs", 1.0);
  auto first = cache.Get(c, b, 2);
  auto again = cache.Get(c, b, 1);
  auto fresh = DrawBatchStats(c, b, 1);
  ASSERT_TRUE(first.ok() && again.ok() && fresh.ok());
  EXPECT_EQ(**first, *fresh);
  EXPECT_EQ(first->get(), again->get());  // the same draw, not a second one
  EXPECT_EQ(cache.size(), 1u);
  auto other = cache.Get(c, TestBatches("random", 1.0), 1);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(**other, **first);
  EXPECT_EQ(cache.size(), 2u);
}

TEST(BatchStatsCacheTest, EveryFieldTheDrawReadsIsInTheKey) {
  const BatchDrawConfig c0 = TestConfig(4);
  const Batches b0 = TestBatches("bbs", 1.0);
  const std::string base = BatchDrawKey(c0, b0);
  std::vector<std::pair<std::string, std::pair<BatchDrawConfig, Batches>>> changed;
  auto change = [&](const std::string& name, auto&& edit) {
    BatchDrawConfig c = c0;
    Batches b = b0;
    edit(c, b);
    changed.push_back({name, {c, b}});
  };
  change("seed", [](BatchDrawConfig& c, Batches&) { c.seed += 1; });
  change("world", [](BatchDrawConfig& c, Batches&) { c.world += 1; });
  change("steps", [](BatchDrawConfig& c, Batches&) { c.steps += 1; });
  change("kjt_per_sample", [](BatchDrawConfig& c, Batches&) { c.kjt_per_sample += 1e-9; });
  change("kjt_per_token", [](BatchDrawConfig& c, Batches&) { c.kjt_per_token += 1e-9; });
  change("n_s", [](BatchDrawConfig& c, Batches&) { c.sequences[1].n_s += 1; });
  change("mask kind", [](BatchDrawConfig& c, Batches&) { c.sequences[0].mask.kind = MaskKind::kCausal; });
  change("mask block", [](BatchDrawConfig& c, Batches&) { c.sequences[0].mask.block += 1; });
  change("mask left", [](BatchDrawConfig& c, Batches&) { c.sequences[0].mask.left = 7; });
  change("mask right", [](BatchDrawConfig& c, Batches&) { c.sequences[0].mask.right = 7; });
  change("lmax", [](BatchDrawConfig& c, Batches&) { c.sequences[0].lmax += 1; });
  change("local_batch", [](BatchDrawConfig&, Batches& b) { b.local_batch += 1; });
  change("policy", [](BatchDrawConfig&, Batches& b) { b.assignment.policy = "random"; });
  change("sub_batch", [](BatchDrawConfig&, Batches& b) { b.assignment.sub_batch += 1; });
  change("pool_factor", [](BatchDrawConfig&, Batches& b) { b.assignment.pool_factor += 1; });
  change("max_len", [](BatchDrawConfig&, Batches& b) { b.assignment.max_len += 1; });
  change("law kind", [](BatchDrawConfig&, Batches& b) { b.features[1].kind = LengthLaw::Kind::kZipf; });
  change("law mu", [](BatchDrawConfig&, Batches& b) { b.features[1].mu = std::nextafter(b.features[1].mu, 100.0); });
  change("law sigma", [](BatchDrawConfig&, Batches& b) { b.features[1].sigma += 1e-12; });
  change("law s", [](BatchDrawConfig&, Batches& b) { b.features[1].s += 1e-12; });
  change("law min", [](BatchDrawConfig&, Batches& b) { b.features[1].min += 1; });
  change("law max", [](BatchDrawConfig&, Batches& b) { b.features[1].max += 1; });
  change("law corr", [](BatchDrawConfig&, Batches& b) { b.features[1].corr = 0.5; });
  change("law bins", [](BatchDrawConfig&, Batches& b) { b.features[1].bins.push_back({8.0, 1.0}); });
  change("law count", [](BatchDrawConfig&, Batches& b) { b.features.pop_back(); });
  for (const auto& [name, input] : changed) {
    EXPECT_NE(BatchDrawKey(input.first, input.second), base) << name;
  }
  // What the draw does not read leaves the key alone (a study's reruns share a draw).
  Batches zipf = b0;
  zipf.id_zipf_default = 1.2;
  zipf.pooling_default = 30;
  EXPECT_EQ(BatchDrawKey(c0, zipf), base);
}

TEST(BatchStatsCacheTest, AnErrorIsReturnedToEveryCaller) {
  BatchStatsCache cache;
  for (int k = 0; k < 2; ++k) {
    auto r = cache.Get(TestConfig(1), TestBatches("shuffle", 1.0), 1);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("batches.assignment.policy"), std::string::npos);
  }
}

}  // namespace
}  // namespace gemtb::sim
