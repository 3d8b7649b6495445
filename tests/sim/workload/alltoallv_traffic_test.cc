// Per-position embedding traffic (model/sharding/placement.h): where each sharding type sends a
// table's lookups, the hottest id's share under Zipf, and the maximum position's load over the mean,
// which prices the sparse all-to-allvs at their slowest member.
#include <algorithm>
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "model/sharding/placement.h"
#include "sim/engine/collective_timing.h"
#include "sim/network/collective_cost.h"

namespace gemtb {
namespace {

double Sum(const PositionShares& s) {
  double total = s.spread;
  for (const auto& [position, share] : s.points) total += share;
  return total;
}

TEST(PlacementTest, HottestIdShareAtKnownExponents) {
  EXPECT_DOUBLE_EQ(HottestIdShare(1000, 0.0), 1.0 / 1000);         // every row equally popular
  EXPECT_NEAR(HottestIdShare(1000, 1.0), 0.1003288, 1e-7);         // ln 2 / ln 1001 = 0.693147 / 6.908755
  EXPECT_NEAR(HottestIdShare(int64_t{1} << 40, 2.0), 0.5, 1e-9);   // (1/2 - 1) / (0 - 1) as rows grow
  EXPECT_EQ(HottestIdShare(1, 1.1), 1.0);
  // More skew, more mass on the hottest id; more rows, less.
  EXPECT_LT(HottestIdShare(2'000'000'000, 0.8), HottestIdShare(2'000'000'000, 1.05));
  EXPECT_GT(HottestIdShare(1'000'000, 1.05), HottestIdShare(2'000'000'000, 1.05));
}

TEST(PlacementTest, EachTypeSendsEveryLookupSomewhere) {
  const int M = 16, g = 4;
  TableSharding tw{ShardingType::kTableWise, -1, 1};
  const PositionShares a = TablePositionShares(tw, 21, M, g, 0.0);
  ASSERT_EQ(a.points.size(), 1u);
  EXPECT_EQ(a.points[0].first, 21 % M);  // default owner: table index mod M
  tw.owner = 3;
  EXPECT_EQ(TablePositionShares(tw, 21, M, g, 0.0).points[0].first, 3);
  const TableSharding dp{ShardingType::kDataParallel, -1, 1};
  EXPECT_EQ(Sum(TablePositionShares(dp, 0, M, g, 0.0)), 0.0);  // local lookups: no traffic
  for (ShardingType type : {ShardingType::kTableWise, ShardingType::kRowWise, ShardingType::kColumnWise,
                            ShardingType::kTableRowWise, ShardingType::kGrid}) {
    const PositionShares s = TablePositionShares({type, -1, 2}, 5, M, g, 0.07);
    EXPECT_NEAR(Sum(s), 1.0, 1e-12) << ShardingTypeName(type);
    for (const auto& [position, share] : s.points) {
      EXPECT_GE(position, 0);
      EXPECT_LT(position, M);
    }
  }
  // TWRW: the table's host 5 mod 4 = 1, positions 4..7, the hot id in the first block.
  const PositionShares twrw = TablePositionShares({ShardingType::kTableRowWise, -1, 1}, 5, M, g, 0.2);
  ASSERT_EQ(twrw.points.size(), 4u);
  EXPECT_EQ(twrw.points[0].first, 4);
  EXPECT_NEAR(twrw.points[0].second, 0.2 + 0.8 / 4, 1e-15);
  EXPECT_NEAR(twrw.points[3].second, 0.8 / 4, 1e-15);
}

// A TorchRec plan's ranks replace the default positions: CW's shard i on ranks[i], TWRW on the
// host of ranks[0]; so 700 table-wise tables all owned by one rank load it 256 times the mean.
TEST(PlacementTest, TorchRecRanksPlaceTheTraffic) {
  const int M = 16, g = 4;
  TableSharding cw{ShardingType::kColumnWise, -1, 2};
  cw.ranks = {11, 2};
  const PositionShares c = TablePositionShares(cw, 5, M, g, 0.0);
  ASSERT_EQ(c.points.size(), 2u);
  EXPECT_EQ(c.points[0], std::make_pair(11, 0.5));
  EXPECT_EQ(c.points[1], std::make_pair(2, 0.5));
  TableSharding twrw{ShardingType::kTableRowWise, -1, 1};
  twrw.ranks = {14, 12, 13, 15};  // host 3: positions 12..15
  const PositionShares h = TablePositionShares(twrw, 5, M, g, 0.0);
  ASSERT_EQ(h.points.size(), 4u);
  EXPECT_EQ(h.points[0].first, 12);
  EXPECT_EQ(h.points[3].first, 15);

  std::vector<PositionShares> shares;
  for (int t = 0; t < 700; ++t) shares.push_back(TablePositionShares({ShardingType::kTableWise, 7, 1}, t, 256, 8, 0));
  std::vector<std::pair<double, const PositionShares*>> tables;
  for (const PositionShares& s : shares) tables.emplace_back(1.0, &s);
  EXPECT_NEAR(MaxOverMeanLoad(tables, 256), 256.0, 1e-9);
}

TEST(PlacementTest, MaxOverMeanLoadOfTableOwnersAndHotIds) {
  // 700 equal table-wise tables: on 4,096 positions 700 hold one table each and the rest none, so
  // the busiest position carries 4096 / 700 times the mean; on 256 positions 188 hold three tables
  // and the others two: 3 / (700 / 256).
  std::vector<PositionShares> shares;
  for (int t = 0; t < 700; ++t) shares.push_back(TablePositionShares({ShardingType::kTableWise, -1, 1}, t, 4096, 8, 0));
  std::vector<std::pair<double, const PositionShares*>> tables;
  for (const PositionShares& s : shares) tables.emplace_back(1.0, &s);
  EXPECT_NEAR(MaxOverMeanLoad(tables, 4096), 4096.0 / 700, 1e-12);
  shares.clear();
  for (int t = 0; t < 700; ++t) shares.push_back(TablePositionShares({ShardingType::kTableWise, -1, 1}, t, 256, 8, 0));
  tables.clear();
  for (const PositionShares& s : shares) tables.emplace_back(1.0, &s);
  EXPECT_NEAR(MaxOverMeanLoad(tables, 256), 3.0 / (700.0 / 256), 1e-12);

  // One row-wise table: evenly spread without hot ids; with a hot id of share h the busiest
  // position takes h + (1 - h) / M of it, M times the mean's 1/M.
  const PositionShares even = TablePositionShares({ShardingType::kRowWise, -1, 1}, 0, 256, 8, 0);
  EXPECT_NEAR(MaxOverMeanLoad({{5.0, &even}}, 256), 1.0, 1e-12);
  const PositionShares hot = TablePositionShares({ShardingType::kRowWise, -1, 1}, 0, 256, 8, 0.05);
  EXPECT_NEAR(MaxOverMeanLoad({{5.0, &hot}}, 256), 256 * (0.05 + 0.95 / 256), 1e-9);
  // The larger the group, the more a hot id stands out.
  const PositionShares hot_1d = TablePositionShares({ShardingType::kRowWise, -1, 1}, 0, 4096, 8, 0.05);
  EXPECT_GT(MaxOverMeanLoad({{5.0, &hot_1d}}, 4096), MaxOverMeanLoad({{5.0, &hot}}, 256));
  // No traffic: 1.
  EXPECT_EQ(MaxOverMeanLoad({}, 256), 1.0);
}

// The engine prices a sparse all-to-allv as a uniform one whose bytes (what the average member
// sends to the others, S = B (M - 1) / M) are scaled by the max-row factor. At equal batches this is
// the per-rank matrix's slowest member: every member sends B L_q to position q, so the hottest
// position receives B L_max from each peer, spread over the tiers as a uniform exchange is, and no
// member sends or receives more on any tier. (With unequal batches the engine takes the heaviest
// member's B, so the equivalent is conservative: the hot receiver's bytes are L_max times the sum of
// the others' B.)
TEST(PlacementTest, MaxRowEquivalentEqualsTheMatrixSlowestMemberAtEqualBatches) {
  sim::Cluster cluster;
  cluster.world_size = 32;
  cluster.gpus_per_host = 4;
  cluster.zone_size = 16;
  cluster.tiers = {{"nvlink", 450e9, 400e9, 2e-6, 1}, {"zone", 50e9, 50e9, 5e-6, 1}, {"cross", 50e9, 50e9, 8e-6, 4}};
  const int M = 32;
  sim::GroupLayout all;
  all.size = M;
  all.stride = 1;
  all.count = 1;
  absl::StatusOr<sim::CollectiveTiming> timing = sim::CollectiveTiming::Create(cluster, sim::CollectivesPlan{}, {all});
  ASSERT_TRUE(timing.ok()) << timing.status();
  absl::StatusOr<sim::GroupShape> shape = sim::ContiguousGroupShape(cluster, M);
  ASSERT_TRUE(shape.ok()) << shape.status();
  absl::StatusOr<sim::CollectiveCostModel> model = sim::CollectiveCostModel::Create(cluster, sim::CollectivesPlan{});
  ASSERT_TRUE(model.ok()) << model.status();
  // A row-wise table with a hot block on position 9 and a table-wise table on position 20.
  const PositionShares rw = TablePositionShares({ShardingType::kRowWise, -1, 1}, 9, M, 4, 0.2);
  const PositionShares tw = TablePositionShares({ShardingType::kTableWise, -1, 1}, 20, M, 4, 0.0);
  const double b_rw = 3e6, b_tw = 1e6;  // every member's lookup bytes per table, self share included
  std::vector<double> load(M, b_rw * rw.spread / M + b_tw * tw.spread / M);
  for (const auto& [q, share] : rw.points) load[q] += b_rw * share;
  for (const auto& [q, share] : tw.points) load[q] += b_tw * share;
  std::vector<double> matrix(static_cast<size_t>(M) * M);
  for (int i = 0; i < M; ++i) {
    for (int q = 0; q < M; ++q) matrix[static_cast<size_t>(i) * M + q] = load[q];
  }
  absl::StatusOr<sim::CollectiveCostModel::AllToAllvResult> exact = model->EstimateAllToAllvMatrix(*shape, matrix);
  ASSERT_TRUE(exact.ok()) << exact.status();
  const double factor = MaxOverMeanLoad({{b_rw, &rw}, {b_tw, &tw}}, M);
  ASSERT_GT(factor, 2.0);
  const double S = (b_rw + b_tw) * (M - 1) / M;
  const double equivalent = timing->Cost(0, sim::CollectiveOp::kAllToAll, S * factor, /*a2av=*/true).duration_s;
  EXPECT_NEAR(equivalent, exact->slowest.duration_s, 1e-12 * exact->slowest.duration_s);
  EXPECT_EQ(exact->slowest_member, std::max_element(load.begin(), load.end()) - load.begin());
}

}  // namespace
}  // namespace gemtb
