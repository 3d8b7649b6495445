// The sparse sharding plan (spec/embeddings-and-model.md §3.1): every field validated, errors
// naming the JSON path and value; defaults resolved per table.
#include "reference/sharding/sharding_plan.h"

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
      {R"({"default": {"type": "TW"}, "bogus": 1})", 8, 8, "plan.bogus: 1 is not a known key"},
      {R"({"default": {"type": "TW"}, "tables": {"users": {"type": "TW", "rows": 2}}})", 8, 8,
       "plan.tables.users.rows: 2 is not a known key"},
      {R"({"default": {"type": "TW"}, "tables": {"nope": {"type": "TW"}}})", 8, 8,
       "plan.tables.nope: {\"type\":\"TW\"} names no table"},
      {R"({"default": {"type": "TW"}, "sync_period": "3"})", 8, 8, "plan.sync_period: \"3\" is not an integer"},
      {R"({"default": {"type": "TW"}, "sync_period": 0})", 8, 8, "plan.sync_period: 0 is out of range"},
      {R"({"default": {"type": "TW"}, "fully_sharded": 1})", 8, 8, "plan.fully_sharded: 1 is not a boolean"},
      {R"({"default": {"type": "TW"}, "state_sync": "yes"})", 8, 8, "plan.state_sync: \"yes\" is not a boolean"},
      {R"({"default": {"type": "XW"}})", 8, 8, "plan.default.type: \"XW\" is not one of"},
      {R"({"default": {"type": "TW"}, "cw_state": "private"})", 8, 8, "plan.cw_state: \"private\" is not"},
      {R"({"default": {"type": "TW"}, "gather": "some"})", 8, 8, "plan.gather: \"some\" is not"},
      {R"({"tables": {"users": {"type": "TW"}}})", 8, 8, "plan.default: missing: table 'items'"},
      {R"({"default": {"type": "RW", "owner": 1}})", 8, 8, "plan.default.owner: 1: only TW tables have an owner"},
      {R"({"default": {"type": "RW"}, "tables": {"geo": {"shards": 2}}})", 8, 8,
       "plan.tables.geo.shards: 2: only CW and GRID tables have shards"},
      {R"({"default": {"type": "CW"}})", 8, 8, "plan.default.shards: missing: CW table 'users'"},
      {R"({"default": {"type": "TWRW"}})", 8, 3, "plan.default.type: TWRW on hosts: hosts of 3 MP-group positions"},
      {R"({"default": {"type": "GRID", "shards": 2}, "mp_group": 4})", 8, 3,
       "plan.default.type: GRID on hosts: gpus_per_host 3 and the replica count N=2"},
      {R"([])", 8, 8, "plan: [] is not an object"},
      {R"({"default": {"type": "TW"}, "mp_group": -2})", 8, 8, "plan.mp_group: -2 is out of range"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ParseShardingPlan(nlohmann::json::parse(c.json), config, c.world, c.gph),
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
      config, 8, 8);
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

}  // namespace
}  // namespace gemtb::reference
