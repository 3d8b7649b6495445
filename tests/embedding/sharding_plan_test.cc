// The sparse sharding plan's one parser (model/sharding/sharding_plan_json.h): every
// field validated, errors naming the JSON path and value; defaults resolved per table.
#include "model/sharding/comm_pattern.h"
#include "model/sharding/sharding_plan_json.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "reference/sharding/sharded_executor.h"
#include "tests/embedding/sharding_cases.h"
#include "tests/testing/status_matchers.h"

namespace gemtb::reference {
namespace {

using ::gemtb::testing::StatusIs;
using sharding_cases::MakeConfig;
using ::testing::HasSubstr;

TEST(ShardingPlan, InvalidPlansNameTheField) {
  const EmbeddingConfig config = MakeConfig();
  struct Case {
    std::string json;
    int world = 8;
    int gph = 8;
    std::string message;
  };
  const std::vector<Case> cases = {
      {R"({"default": {"type": "TW"}, "mp_group": 3})", 8, 8, "plan.mp_group: 3 does not divide world_size 8"},
      {R"({"default": {"type": "CW", "shards": 3}})", 8, 8,
       "plan.default.shards: 3 does not divide dim 8 of table 'users'"},
      {R"({"default": {"type": "TW"}, "tables": {"ads": {"type": "TW", "owner": 9}}})", 8, 8,
       "plan.tables.ads.owner: 9 is out of range [0, 8)"},
      {R"({"default": {"type": "TW"}, "mp_group": 2, "tables": {"ads": {"owner": 2}}})", 8, 8,
       "plan.tables.ads.owner: 2 is out of range [0, 2)"},
      {R"({"default": {"type": "TW"}, "bogus": 1})", 8, 8, "plan.bogus: unknown key (known: default, tables,"},
      {R"({"default": {"type": "TW"}, "tables": {"users": {"type": "TW", "rows": 2}}})", 8, 8,
       "plan.tables.users.rows: unknown key (known: type, owner, shards)"},
      {R"({"default": {"type": "TW"}, "tables": {"nope": {"type": "TW"}}})", 8, 8,
       "plan.tables.nope: {\"type\":\"TW\"} names no table"},
      {R"({"default": {"type": "TW"}, "sync_period": "3"})", 8, 8, "plan.sync_period: \"3\" is not an integer"},
      {R"({"default": {"type": "TW"}, "sync_period": 0})", 8, 8, "plan.sync_period: 0 must be in [1, "},
      {R"({"default": {"type": "TW"}, "fully_sharded": 1})", 8, 8, "plan.fully_sharded: 1 is not true or false"},
      {R"({"default": {"type": "TW"}, "state_sync": "yes"})", 8, 8, "plan.state_sync: \"yes\" is not true or false"},
      {R"({"default": {"type": "XW"}})", 8, 8, "plan.default.type: \"XW\" is not one of DP, TW, RW, CW, TWRW, GRID"},
      {R"({"default": {"type": "TW"}, "cw_state": "private"})", 8, 8, "plan.cw_state: \"private\" is not one of shared, per_shard"},
      {R"({"default": {"type": "TW"}, "gather": "some"})", 8, 8, "plan.gather: \"some\" is not one of all, touched"},
      {R"({"default": {"type": "RW", "owner": 1}})", 8, 8, "plan.default.owner: 1: only TW tables have an owner"},
      {R"({"default": {"type": "RW"}, "tables": {"geo": {"shards": 2}}})", 8, 8,
       "plan.tables.geo.shards: 2: only CW and GRID tables have shards"},
      {R"({"default": {"type": "CW"}})", 8, 8, "plan.default.shards: missing: CW table 'users'"},
      {R"({"default": {"type": "TWRW"}})", 8, 3, "plan.default.type: TWRW on hosts: hosts of 3 MP-group positions"},
      {R"({"default": {"type": "GRID", "shards": 2}, "mp_group": 4})", 8, 3,
       "plan.default.type: GRID on hosts: gpus_per_host 3 and the replica count N=2"},
      {R"([])", 8, 8, "plan: [] is not an object"},
      {R"({"default": {"type": "TW"}, "mp_group": -2})", 8, 8, "plan.mp_group: -2 must be in [1, "},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ParseShardingPlan(nlohmann::json::parse(c.json), PlanTablesOf(config), c.world, c.gph),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message)))
        << c.json;
  }
}

TEST(ShardingPlan, ValidPlanResolvesDefaultsPerTable) {
  const EmbeddingConfig config = MakeConfig();
  absl::StatusOr<ShardingPlanSpec> plan = ParseShardingPlan(
      nlohmann::json::parse(R"({"default": {"type": "CW", "shards": 2}, "tables": {"ads": {"type": "TW", "owner": 1},
          "items": {"shards": 4}}, "mp_group": 4, "fully_sharded": true, "sync_period": 3, "state_sync": false,
          "cw_state": "per_shard", "gather": "touched", "keep_gathered": true})"),
      PlanTablesOf(config), 8, 8);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->tables[0].type, ShardingType::kColumnWise);
  EXPECT_EQ(plan->tables[0].shards, 2);
  EXPECT_EQ(plan->tables[1].shards, 4);
  EXPECT_EQ(plan->tables[2].type, ShardingType::kTableWise);
  EXPECT_EQ(plan->tables[2].owner, 1);
  EXPECT_EQ(plan->mp_group, 4);
  EXPECT_TRUE(plan->fully_sharded);
  EXPECT_EQ(plan->sync_period, 3);
  EXPECT_FALSE(plan->state_sync);
  EXPECT_EQ(plan->cw_state, CwState::kPerShard);
  EXPECT_EQ(plan->gather, GatherMode::kTouched);
  EXPECT_TRUE(plan->keep_gathered);
}

// A table that neither its entry nor the default types is table-wise; every key is optional.
TEST(ShardingPlan, UntypedTablesAreTableWise) {
  const EmbeddingConfig config = MakeConfig();
  absl::StatusOr<ShardingPlanSpec> plan =
      ParseShardingPlan(nlohmann::json::parse(R"({"tables": {"users": {"type": "RW"}}})"), PlanTablesOf(config), 8, 8);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->tables.size(), config.tables.size());
  EXPECT_EQ(plan->tables[0].type, ShardingType::kRowWise);
  for (size_t t = 1; t < plan->tables.size(); ++t) EXPECT_EQ(plan->tables[t], TableSharding{}) << t;
  absl::StatusOr<ShardingPlanSpec> empty = ParseShardingPlan(nlohmann::json::object(), PlanTablesOf(config), 8, 8);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->tables, std::vector<TableSharding>(config.tables.size()));
}

// The simulator's options: its path prefix in errors and plan.cap_groups_at_world_size.
TEST(ShardingPlan, OptionsSetThePathAndCapTheMpGroup) {
  const EmbeddingConfig config = MakeConfig();
  ShardingPlanOptions options;
  options.path = "plan.sparse";
  EXPECT_THAT(ParseShardingPlan(nlohmann::json::parse(R"({"mp_group": 16})"), PlanTablesOf(config), 8, 8, options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plan.sparse.mp_group: 16 does not divide world_size 8")));
  options.cap_mp_group_at_world_size = true;
  absl::StatusOr<ShardingPlanSpec> capped =
      ParseShardingPlan(nlohmann::json::parse(R"({"mp_group": 16})"), PlanTablesOf(config), 8, 8, options);
  ASSERT_TRUE(capped.ok()) << capped.status();
  EXPECT_EQ(capped->mp_group, 8);
}

TEST(ShardingPlan, NamesRoundTripThroughTheirTables) {
  for (const std::string& name : ShardingTypeNames()) {
    const std::optional<ShardingType> type = ShardingTypeFromName(name);
    ASSERT_TRUE(type.has_value()) << name;
    EXPECT_EQ(ShardingTypeName(*type), name);
  }
  EXPECT_EQ(ShardingTypeNames().size(), 6u);
  EXPECT_FALSE(ShardingTypeFromName("tw").has_value());
  EXPECT_EQ(CwStateFromName("per_shard"), CwState::kPerShard);
  EXPECT_EQ(GatherModeFromName("touched"), GatherMode::kTouched);
  EXPECT_FALSE(GatherModeFromName("some").has_value());
}

// ---- the communication pattern (model/sharding/comm_pattern.h), worked by hand ------------------

const CommCall* Find(const std::vector<CommCall>& calls, CommSite site) {
  for (const CommCall& c : calls) {
    if (c.site == site) return &c;
  }
  return nullptr;
}

CommBytes Bytes(std::initializer_list<std::pair<TrafficTerm, double>> terms) {
  CommBytes b;
  for (const auto& [t, v] : terms) b[t] = v;
  return b;
}

TEST(CommPattern, TableWiseSendsIdsAndEmbeddingsOffRank) {
  const CommTable table{100, 8, 4.0, OptimizerKind::kSgd};
  const std::vector<CommCall> calls =
      TableCommPattern(TableSharding{}, table, ShardingPlanSpec{}, CommWorld{4, 1, 4});
  ASSERT_EQ(calls.size(), 3u);  // ids, embeddings, their gradients; one replica: no sync
  const CommCall* ids = Find(calls, CommSite::kIdsA2a);
  ASSERT_NE(ids, nullptr);
  EXPECT_EQ(ids->op, Collective::kAllToAll);
  EXPECT_EQ(ids->size, 4);
  EXPECT_EQ(ids->bytes.coef, Bytes({{TrafficTerm::kKjt, 0.75}}).coef);
  const CommCall* emb = Find(calls, CommSite::kEmbGradA2a);
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->bytes.coef, Bytes({{TrafficTerm::kPooled, 0.75}, {TrafficTerm::kSequence, 0.75}}).coef);
  EXPECT_EQ(CommSitePhase(emb->site), ::gemtb::CommPhase::kBackward);
}

TEST(CommPattern, RowWiseReduceScattersPooledSums) {
  const CommTable table{100, 8, 4.0, OptimizerKind::kSgd};
  const std::vector<CommCall> calls =
      TableCommPattern(TableSharding{ShardingType::kRowWise}, table, ShardingPlanSpec{}, CommWorld{4, 1, 4});
  const CommCall* ids = Find(calls, CommSite::kIdsA2a);
  ASSERT_NE(ids, nullptr);
  // Lengths to each of the 3 other row blocks (4 bytes a bag), each id to its block's holder.
  EXPECT_EQ(ids->bytes.coef, Bytes({{TrafficTerm::kBags, 12.0}, {TrafficTerm::kIds, 6.0}}).coef);
  const CommCall* rs = Find(calls, CommSite::kPooledRs);
  ASSERT_NE(rs, nullptr);
  EXPECT_EQ(rs->op, Collective::kReduceScatter);
  EXPECT_EQ(rs->bytes.coef, Bytes({{TrafficTerm::kPooled, 4.0}}).coef);  // buffer M * pi
  const CommCall* ag = Find(calls, CommSite::kPooledGradAg);
  ASSERT_NE(ag, nullptr);
  EXPECT_EQ(ag->op, Collective::kAllGather);
}

TEST(CommPattern, ColumnShardsWithSharedAdagradStateGatherPartialSquareSums) {
  const CommTable adagrad{100, 8, 4.0, OptimizerKind::kRowwiseAdagrad};
  const TableSharding cw{ShardingType::kColumnWise, -1, 2};
  // p = 2 holders of M = 4 positions, 2 * 4U gathered: the average rank 2/4 of it.
  const std::vector<CommCall> ag_calls = TableCommPattern(cw, adagrad, ShardingPlanSpec{}, CommWorld{4, 1, 4});
  const CommCall* ag = Find(ag_calls, CommSite::kColumnNormAg);
  ASSERT_NE(ag, nullptr);
  EXPECT_EQ(ag->size, 2);
  EXPECT_EQ(ag->stride, 1);
  EXPECT_EQ(ag->bytes.coef, Bytes({{TrafficTerm::kMpUniqueRows, 4.0}}).coef);
  ShardingPlanSpec per_shard;
  per_shard.cw_state = CwState::kPerShard;
  EXPECT_EQ(Find(TableCommPattern(cw, adagrad, per_shard, CommWorld{4, 1, 4}), CommSite::kColumnNormAg), nullptr);
  const CommTable sgd{100, 8, 4.0, OptimizerKind::kSgd};
  EXPECT_EQ(Find(TableCommPattern(cw, sgd, ShardingPlanSpec{}, CommWorld{4, 1, 4}), CommSite::kColumnNormAg), nullptr);
  // GRID: 4 column shards on the 4 hosts of g = 2 positions: holders 2 positions apart.
  const std::vector<CommCall> grid_calls =
      TableCommPattern(TableSharding{ShardingType::kGrid, -1, 4}, adagrad, ShardingPlanSpec{}, CommWorld{8, 1, 2});
  const CommCall* grid = Find(grid_calls, CommSite::kColumnNormAg);
  ASSERT_NE(grid, nullptr);
  EXPECT_EQ(grid->size, 4);
  EXPECT_EQ(grid->stride, 2);
  EXPECT_EQ(grid->bytes.coef, Bytes({{TrafficTerm::kMpUniqueRows, 8.0}}).coef);  // 4 * 4U * 4/8
}

TEST(CommPattern, FullyShardedGathersTheShardOrACopy) {
  const CommTable table{100, 8, 4.0, OptimizerKind::kSgd};
  ShardingPlanSpec v3;
  v3.fully_sharded = true;
  const std::vector<CommCall> tw = TableCommPattern(TableSharding{}, table, v3, CommWorld{2, 2, 1});
  const CommCall* ag = Find(tw, CommSite::kV3Gather);
  ASSERT_NE(ag, nullptr);
  EXPECT_EQ(ag->group_class, CommGroupClass::kSparseIntra);
  EXPECT_EQ(ag->bytes.coef, Bytes({{TrafficTerm::kOne, 1600.0}}).coef);  // 100 rows * 8 * 4 B / M
  EXPECT_NE(Find(tw, CommSite::kV3GatherBwd), nullptr);
  EXPECT_NE(Find(tw, CommSite::kV3Scatter), nullptr);
  EXPECT_EQ(Find(tw, CommSite::kReplicaSync), nullptr);
  // A DP table's every position holds a whole copy.
  const std::vector<CommCall> dp_calls =
      TableCommPattern(TableSharding{ShardingType::kDataParallel}, table, v3, CommWorld{2, 2, 1});
  const CommCall* dp = Find(dp_calls, CommSite::kV3Gather);
  ASSERT_NE(dp, nullptr);
  EXPECT_EQ(dp->bytes.coef, Bytes({{TrafficTerm::kOne, 3200.0}}).coef);
  v3.gather = GatherMode::kTouched;
  v3.keep_gathered = true;
  const std::vector<CommCall> touched = TableCommPattern(TableSharding{}, table, v3, CommWorld{2, 2, 1});
  const CommCall* t = Find(touched, CommSite::kV3Gather);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->bytes.coef, Bytes({{TrafficTerm::kShardTouchedRows, 32.0}}).coef);  // 8 * 4 B a row
  EXPECT_EQ(Find(touched, CommSite::kV3GatherBwd), nullptr);
}

TEST(CommPattern, ReplicaSyncCarriesWeightsAndState) {
  const CommTable adam{100, 8, 2.0, OptimizerKind::kAdam};
  ShardingPlanSpec v2;
  const std::vector<CommCall> ar_calls =
      TableCommPattern(TableSharding{ShardingType::kRowWise}, adam, v2, CommWorld{4, 2, 1});
  const CommCall* ar = Find(ar_calls, CommSite::kReplicaSync);
  ASSERT_NE(ar, nullptr);
  EXPECT_EQ(ar->op, Collective::kAllReduce);
  EXPECT_EQ(ar->group_class, CommGroupClass::kSparseReplica);
  EXPECT_EQ(ar->size, 2);
  EXPECT_EQ(ar->bytes.coef, Bytes({{TrafficTerm::kOne, 100 * (8 * 2.0 + 64.0) / 4}}).coef);
  v2.state_sync = false;
  const std::vector<CommCall> weights_calls =
      TableCommPattern(TableSharding{ShardingType::kRowWise}, adam, v2, CommWorld{4, 2, 1});
  const CommCall* weights = Find(weights_calls, CommSite::kReplicaSync);
  ASSERT_NE(weights, nullptr);
  EXPECT_EQ(weights->bytes.coef, Bytes({{TrafficTerm::kOne, 100 * 8 * 2.0 / 4}}).coef);
}

}  // namespace
}  // namespace gemtb::reference
