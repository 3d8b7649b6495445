// The sparse collectives of the step template per sharding type:
// TWRW and GRID get their own collectives (RS inside the host, A2A across hosts; mirrored in the
// backward), with byte counts worked out by hand here from the toy model's table sizes.
#include <algorithm>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/workload/rank_groups.h"
#include "sim/workload/step_template.h"
#include "tests/sim/engine/test_scenario.h"

namespace gemtb::sim {
namespace {

constexpr int64_t kDim = 64;     // the pooled table's embedding dimension
constexpr double kWire = 2.0;    // bf16 activations on the wire

// The toy model plus a pooled table ("user.id": one bag per sample).
Scenario WithPooledTable(int world, int mp_group, ShardingType type, int shards = 1) {
  auto m = testing::ToyModel(2, 1e6, 1000);
  model::GraphTable user;
  user.name = "user";
  user.rows = 1'000'000;
  user.dim = kDim;
  user.dtype = ElementType::kFloat16;
  user.pooling = Pooling::kSum;
  user.features = {"userid"};
  m->tables.push_back(user);
  Scenario s = testing::ToyScenario(world, 64, m);
  s.plan.sparse.mp_group = mp_group;
  s.plan.sparse.fully_sharded = false;
  s.plan.sparse.tables = {TableSharding{}, TableSharding{type, -1, HasColumnShards(type) ? shards : 1}};
  return s;
}

struct Built {
  StepTemplate tpl;
  const TaskTemplate* Find(const std::string& name) const {
    for (const TaskTemplate& t : tpl.tasks) if (t.name == name) return &t;
    return nullptr;
  }
};

Built Build(const Scenario& s) {
  absl::StatusOr<RankGroups> g = BuildRankGroups(s.plan, s.cluster.world_size);
  EXPECT_TRUE(g.ok()) << g.status();
  absl::StatusOr<StepTemplate> t = BuildStepTemplate(s, *g);
  EXPECT_TRUE(t.ok()) << t.status();
  return Built{*std::move(t)};
}

double PerSample(const TaskTemplate& t) { return t.bytes.coef[StatLayout::kB]; }

TEST(ShardingCollectivesTest, TwrwReduceScattersInsideTheHostAndExchangesAcrossHosts) {
  // 16 ranks, one MP group of 16 (no replicas): 8 members per host, so g = 8 and 2 hosts.
  const Built b = Build(WithPooledTable(16, 16, ShardingType::kTableRowWise));
  const TaskTemplate* rs = b.Find("sparse.twrw_rs");
  const TaskTemplate* a2a = b.Find("sparse.twrw_a2a");
  ASSERT_NE(rs, nullptr);
  ASSERT_NE(a2a, nullptr);
  EXPECT_EQ(rs->op, CollectiveOp::kReduceScatter);
  EXPECT_EQ(b.tpl.layouts[rs->layout].size, 8);
  EXPECT_EQ(b.tpl.layouts[rs->layout].stride, 1);
  EXPECT_EQ(a2a->op, CollectiveOp::kAllToAll);
  EXPECT_EQ(b.tpl.layouts[a2a->layout].size, 2);
  EXPECT_EQ(b.tpl.layouts[a2a->layout].stride, 8);
  // RS buffer M * pi = 16 * (1 feature * 64 * 2 bytes) per sample on the owner host's 8 ranks, none
  // on the other host: g * pi = 8 * pi for the average rank; A2A pi * (1 - 1/2).
  EXPECT_DOUBLE_EQ(PerSample(*rs), 8 * kDim * kWire);
  EXPECT_DOUBLE_EQ(PerSample(*a2a), kDim * kWire * 0.5);
  // The pooled embeddings no longer travel in the MP group's embedding A2A (only the sequence
  // table's, which has no per-sample term).
  const TaskTemplate* emb = b.Find("sparse.emb_a2a");
  ASSERT_NE(emb, nullptr);
  EXPECT_DOUBLE_EQ(PerSample(*emb), 0.0);
  // Backward: the gradient A2A, then AG(g) of the same buffer.
  const TaskTemplate* a2a_grad = b.Find("sparse.twrw_a2a_grad");
  const TaskTemplate* ag_grad = b.Find("sparse.twrw_ag_grad");
  ASSERT_NE(a2a_grad, nullptr);
  ASSERT_NE(ag_grad, nullptr);
  EXPECT_EQ(ag_grad->op, CollectiveOp::kAllGather);
  EXPECT_EQ(ag_grad->layout, rs->layout);
  EXPECT_DOUBLE_EQ(PerSample(*ag_grad), PerSample(*rs));
  ASSERT_EQ(ag_grad->deps.size(), 1u);
  EXPECT_EQ(b.tpl.tasks[ag_grad->deps[0]].name, "sparse.twrw_a2a_grad");
}

TEST(ShardingCollectivesTest, TwrwIdsGoToEveryRankOfTheOwnerHost) {
  const Built tw = Build(WithPooledTable(16, 16, ShardingType::kTableWise));
  const Built twrw = Build(WithPooledTable(16, 16, ShardingType::kTableRowWise));
  const Built grid = Build(WithPooledTable(16, 16, ShardingType::kGrid, 2));
  const double off = 15.0 / 16.0;
  // One bag per sample: TW sends 4 (length) + 8 (id) bytes; TWRW the length to each of g = 8 ranks.
  const double tw_ids = PerSample(*tw.Find("sparse.ids_a2a"));
  EXPECT_DOUBLE_EQ(PerSample(*twrw.Find("sparse.ids_a2a")) - tw_ids, (4.0 * 8 - 4.0) * off);
  // GRID: each of the 2 column shards is placed TWRW and gets the ids.
  EXPECT_DOUBLE_EQ(PerSample(*grid.Find("sparse.ids_a2a")) - tw_ids, (2 * (4.0 * 8 + 8.0) - 12.0) * off);
  // Its pooled sizes equal TWRW's (each shard moves pi / 2).
  EXPECT_DOUBLE_EQ(PerSample(*grid.Find("sparse.twrw_rs")), PerSample(*twrw.Find("sparse.twrw_rs")));
  EXPECT_EQ(tw.Find("sparse.twrw_rs"), nullptr);
}

TEST(ShardingCollectivesTest, TwrwWithOneMemberPerHostIsTableWise) {
  // 2D: 32 ranks, MP groups of 4 with 8 replicas (rank = m * 8 + rho): MP members are 8 ranks
  // apart, one per host, so g = 1: no reduce-scatter, and the exchange is TW's over the MP group.
  const Built tw = Build(WithPooledTable(32, 4, ShardingType::kTableWise));
  const Built twrw = Build(WithPooledTable(32, 4, ShardingType::kTableRowWise));
  EXPECT_EQ(twrw.Find("sparse.twrw_rs"), nullptr);
  EXPECT_EQ(twrw.Find("sparse.twrw_ag_grad"), nullptr);
  const TaskTemplate* a2a = twrw.Find("sparse.twrw_a2a");
  ASSERT_NE(a2a, nullptr);
  EXPECT_EQ(twrw.tpl.layouts[a2a->layout].size, 4);
  EXPECT_EQ(twrw.tpl.layouts[a2a->layout].stride, 8);
  EXPECT_DOUBLE_EQ(PerSample(*a2a), PerSample(*tw.Find("sparse.emb_a2a")));
  EXPECT_DOUBLE_EQ(PerSample(*twrw.Find("sparse.ids_a2a")), PerSample(*tw.Find("sparse.ids_a2a")));
}

// V3's order: the ids exchange needs only the
// batch, not the gather; the backward re-gather starts the sparse backward (after the last dense
// backward task) beside the gradient exchange; the update waits for both.
TEST(ShardingCollectivesTest, FullyShardedGathersWhereTheSparseOrderNeedsThem) {
  Scenario s = WithPooledTable(32, 4, ShardingType::kRowWise);
  s.plan.sparse.fully_sharded = true;
  const Built b = Build(s);
  auto index = [&](const std::string& name) {
    for (int i = 0; i < static_cast<int>(b.tpl.tasks.size()); ++i) if (b.tpl.tasks[i].name == name) return i;
    return -1;
  };
  const int ag = index("sparse.v3_ag"), ids = index("sparse.ids_a2a"), lookup = index("sparse.lookup");
  const int ag_bwd = index("sparse.v3_ag_bwd"), grad = index("sparse.emb_a2a_grad"), update = index("sparse.update");
  ASSERT_GE(ag, 0);
  ASSERT_GE(ids, 0);
  ASSERT_GE(ag_bwd, 0);
  ASSERT_GE(grad, 0);
  ASSERT_GE(update, 0);
  EXPECT_TRUE(b.tpl.tasks[ids].deps.empty());
  const std::vector<int>& lk = b.tpl.tasks[lookup].deps;
  EXPECT_NE(std::find(lk.begin(), lk.end(), ag), lk.end());
  EXPECT_NE(std::find(lk.begin(), lk.end(), ids), lk.end());
  // Both backward exchanges wait for the same task: the dense backward's last.
  EXPECT_EQ(b.tpl.tasks[ag_bwd].deps, b.tpl.tasks[grad].deps);
  ASSERT_EQ(b.tpl.tasks[ag_bwd].deps.size(), 1u);
  EXPECT_FALSE(b.tpl.tasks[b.tpl.tasks[ag_bwd].deps[0]].collective);
  const std::vector<int>& up = b.tpl.tasks[update].deps;
  EXPECT_NE(std::find(up.begin(), up.end(), ag_bwd), up.end());
  EXPECT_NE(std::find(up.begin(), up.end(), grad), up.end());
}

}  // namespace
}  // namespace gemtb::sim
