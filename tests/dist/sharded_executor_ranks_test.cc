// The sharded embedding executor with one rank per thread, each holding only its shards and talking
// through the rendezvous store (StoreCollectives), ends every step with the in-process run's output,
// tables, replica states and per-shard Adagrad states, bit for bit: on the sharding tests' config
// (every pooling, hashing, optimizer and storage type, SR on fp16/bf16) under a plan mixing every
// 1D type, 2D with replica syncs of weights and state, fully sharded 2D with the gathered copy kept,
// and per-shard column-wise Adagrad state.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "model/sharding/sharding_plan_json.h"
#include "nlohmann/json.hpp"
#include "reference/dist/store_collectives.h"
#include "reference/sharding/sharded_executor.h"
#include "tests/dist/dist_test_util.h"
#include "tests/embedding/sharding_cases.h"

namespace gemtb::reference::dist {
namespace {

using namespace sharding_cases;  // NOLINT

constexpr int kWorld = 4;
constexpr int kGpusPerHost = 2;
constexpr int kSteps = 3;

// The config's seven tables: DP, CW, RW, TWRW, GRID, TW, RW (the 1D mix of the sharding tests).
nlohmann::json Tables(const EmbeddingConfig& config) {
  const char* types[] = {"DP", "CW", "RW", "TWRW", "GRID", "TW", "RW"};
  nlohmann::json tables;
  for (size_t t = 0; t < config.tables.size(); ++t) {
    nlohmann::json e = {{"type", types[t % 7]}};
    if (e["type"] == "CW") e["shards"] = config.tables[t].dim % 3 == 0 ? 3 : 2;
    if (e["type"] == "GRID") e["shards"] = 2;
    tables[config.tables[t].name] = e;
  }
  return tables;
}

void ExpectRanksEqualInProcess(const nlohmann::json& extra, const std::string& what) {
  const EmbeddingConfig config = MakeConfig();
  nlohmann::json json = {{"tables", Tables(config)}};
  json.update(extra);
  absl::StatusOr<ShardingPlanSpec> plan = ParseShardingPlan(json, PlanTablesOf(config), kWorld, kGpusPerHost);
  ASSERT_TRUE(plan.ok()) << plan.status() << " " << json.dump();
  const Batch batch = MakeBatch(config, 4 * kWorld, 77);
  const EmbeddingState initial = InitEmbeddingState(config);
  absl::StatusOr<ShardedRun> alone =
      RunSharded(config, *plan, kWorld, kGpusPerHost, initial, batch.kjt, &batch.grads, kSteps, 1);
  ASSERT_TRUE(alone.ok()) << alone.status();

  std::vector<absl::StatusOr<ShardedRun>> ranks = testutil::RunOnRanks<ShardedRun>(
      kWorld, [&](launch::TcpStoreClient& store, int) -> absl::StatusOr<ShardedRun> {
        StoreCollectives collectives(store);
        auto executor = ShardedExecutor::Create(config, *plan, kWorld, kGpusPerHost, initial, &collectives);
        if (!executor.ok()) return executor.status();
        for (int s = 0; s < kSteps; ++s) {
          if (auto out = (*executor)->Forward(batch.kjt); !out.ok()) return out.status();
          if (absl::Status st = (*executor)->Backward(batch.grads); !st.ok()) return st;
        }
        return (*executor)->Result();
      });
  for (int r = 0; r < kWorld; ++r) {
    absl::StatusOr<ShardedRun>& run = ranks[r];
    ASSERT_TRUE(run.ok()) << run.status();
    const std::string at = what + " rank " + std::to_string(r);
    ExpectSameOutput(run->output, alone->output, at);
    ExpectSameState(run->state, alone->state, at);
    ASSERT_EQ(run->replica_states.size(), alone->replica_states.size()) << at;
    for (size_t i = 0; i < run->replica_states.size(); ++i)
      ExpectSameState(run->replica_states[i], alone->replica_states[i], at + " replica " + std::to_string(i));
    ASSERT_EQ(run->per_shard_adagrad.size(), alone->per_shard_adagrad.size()) << at;
    for (size_t t = 0; t < run->per_shard_adagrad.size(); ++t)
      EXPECT_TRUE(SameBytes(run->per_shard_adagrad[t], alone->per_shard_adagrad[t])) << at << " table " << t;
  }
}

TEST(ShardedExecutorRanks, EveryOneDimensionalTypeEqualsTheInProcessRun) {
  ExpectRanksEqualInProcess(nlohmann::json::object(), "1D mix");
}
TEST(ShardedExecutorRanks, PerShardColumnWiseStateEqualsTheInProcessRun) {
  ExpectRanksEqualInProcess({{"cw_state", "per_shard"}}, "cw_state per_shard");
}
TEST(ShardedExecutorRanks, TwoDimensionalWithStateSyncsEqualsTheInProcessRun) {
  ExpectRanksEqualInProcess({{"mp_group", 2}, {"sync_period", 2}}, "2D k=2");
}
TEST(ShardedExecutorRanks, FullyShardedKeepingTheGatheredCopyEqualsTheInProcessRun) {
  ExpectRanksEqualInProcess({{"mp_group", 2}, {"fully_sharded", true}, {"keep_gathered", true}}, "V3 keep_gathered");
}

}  // namespace
}  // namespace gemtb::reference::dist
