// The CPU trainer with its tables sharded by a plan across ranks (threads here, each with its own
// trainer, store connection and store-backed collectives, holding only its shards) ends with the
// state of the single-process trainer whose sharded executor runs the same ranks virtually, bit for
// bit: a plan mixing the 1D types on 2 and 4 ranks, fully sharded 2D and 2D with replica syncs;
// and under the semi-synchronous pipeline, whose lookups read the shards before the last update.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "model/data/batch.h"
#include "model/data/shape_from_config.h"
#include "model/description/model_config.h"
#include "model/sharding/sharding_plan_json.h"
#include "nlohmann/json.hpp"
#include "reference/dist/store_collectives.h"
#include "reference/dist/store_group.h"
#include "reference/model/batch.h"
#include "reference/model/trainer.h"
#include "reference/sharding/sharded_executor.h"
#include "tests/dist/dist_test_util.h"
#include "tests/testing/status_matchers.h"

namespace gemtb::reference::dist {
namespace {

using ::gemtb::testing::StatusIs;
using ::testing::HasSubstr;

// Every 1D type on the tiny config's tables (TWRW and GRID place on hosts of 2 ranks).
constexpr char kMixed[] = R"({"default": {"type": "TW"}, "tables": {
  "user": {"type": "RW"}, "ad": {"type": "CW", "shards": 2}, "advertiser": {"type": "TWRW"},
  "page": {"type": "GRID", "shards": 2}, "device": {"type": "DP"}, "category": {"type": "RW"},
  "items": {"type": "RW"}, "actions": {"type": "TW", "owner": 1}, "dt": {"type": "CW", "shards": 4}}})";
constexpr char kFullySharded[] = R"({"default": {"type": "RW"}, "tables": {"items": {"type": "TW"},
  "ad": {"type": "CW", "shards": 2}}, "mp_group": 2, "fully_sharded": true})";
constexpr char kReplicas[] = R"({"default": {"type": "TW"}, "tables": {"items": {"type": "RW"}},
  "mp_group": 2, "sync_period": 2})";
constexpr int kGpusPerHost = 2;

model::TrainOptions Options(gemtb::model::SparsePipeline pipeline = gemtb::model::SparsePipeline::kSync) {
  model::TrainOptions o;
  o.pipeline = pipeline;
  o.batch = 16;
  o.grad_blocks = 4;
  o.total_steps = 10;
  o.threads = 1;
  return o;
}

ShardingPlanSpec Plan(const gemtb::model::ModelConfig& config, const char* json, int world) {
  const model::TrainOptions o = Options();
  const EmbeddingConfig emb = model::ModelEmbeddingConfig(config, o.table_lr, o.seed);
  absl::StatusOr<ShardingPlanSpec> plan =
      ParseShardingPlan(nlohmann::json::parse(json), PlanTablesOf(emb), world, kGpusPerHost);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : ShardingPlanSpec{};
}

absl::StatusOr<model::NamedArrays> TrainAlone(const gemtb::model::ModelConfig& config, const ShardingPlanSpec& plan,
                                              int world, int steps,
                                              const model::TrainOptions& options = Options()) {
  auto trainer = model::Trainer::Create(config, options);
  if (!trainer.ok()) return trainer.status();
  if (absl::Status s = (*trainer)->UseShardedTables(plan, world, kGpusPerHost, nullptr); !s.ok()) return s;
  for (int s = 0; s < steps; ++s)
    if (auto step = (*trainer)->Step(); !step.ok()) return step.status();
  if (absl::Status s = (*trainer)->GatherTables(); !s.ok()) return s;
  return (*trainer)->StateArrays();
}

std::vector<model::NamedArrays> TrainOnRanks(const gemtb::model::ModelConfig& config, const ShardingPlanSpec& plan,
                                             int world, int steps, const model::TrainOptions& options = Options()) {
  return testutil::ArraysOrEmpty(testutil::RunOnRanks<model::NamedArrays>(
      world, [&](launch::TcpStoreClient& store, int) -> absl::StatusOr<model::NamedArrays> {
        auto trainer = model::Trainer::Create(config, options);
        if (!trainer.ok()) return trainer.status();
        StoreDataParallelGroup group(store);
        StoreCollectives collectives(store);
        if (absl::Status s = (*trainer)->UseDataParallel(&group); !s.ok()) return s;
        if (absl::Status s = (*trainer)->UseShardedTables(plan, world, kGpusPerHost, &collectives); !s.ok()) return s;
        for (int s = 0; s < steps; ++s)
          if (auto step = (*trainer)->Step(); !step.ok()) return step.status();
        if (absl::Status s = (*trainer)->GatherTables(); !s.ok()) return s;
        return (*trainer)->StateArrays();
      }));
}

void ExpectRanksEqualAlone(const char* json, int world, int steps, const model::TrainOptions& options = Options()) {
  auto config = gemtb::model::LoadModelConfig("tiny");
  ASSERT_TRUE(config.ok());
  const ShardingPlanSpec plan = Plan(*config, json, world);
  auto alone = TrainAlone(*config, plan, world, steps, options);
  ASSERT_TRUE(alone.ok()) << alone.status();
  std::vector<model::NamedArrays> ranks = TrainOnRanks(*config, plan, world, steps, options);
  for (int r = 0; r < world; ++r)
    EXPECT_TRUE(testutil::SameArrays(ranks[r], *alone)) << "world " << world << " rank " << r;
}

TEST(ShardedTrain, MixedPlanOnTwoRanksEqualsTheVirtualRanksBitForBit) { ExpectRanksEqualAlone(kMixed, 2, 2); }
TEST(ShardedTrain, MixedPlanOnFourRanksEqualsTheVirtualRanksBitForBit) { ExpectRanksEqualAlone(kMixed, 4, 2); }
TEST(ShardedTrain, FullySharded2DEqualsTheVirtualRanksBitForBit) { ExpectRanksEqualAlone(kFullySharded, 4, 2); }
TEST(ShardedTrain, ReplicasSyncedEverySecondStepEqualTheVirtualRanks) { ExpectRanksEqualAlone(kReplicas, 4, 2); }

// The semi-synchronous pipeline: each step's executor holds two batches between forward and
// backward (the next one's lookups come before this one's update); the pending lookups are in the
// state arrays compared.
TEST(ShardedTrain, SemiSyncMixedPlanOnTwoRanksEqualsTheVirtualRanksBitForBit) {
  ExpectRanksEqualAlone(kMixed, 2, 3, Options(gemtb::model::SparsePipeline::kSemiSync));
}
TEST(ShardedTrain, SemiSyncReplicasEqualTheVirtualRanks) {
  ExpectRanksEqualAlone(kReplicas, 4, 3, Options(gemtb::model::SparsePipeline::kSemiSync));
}

TEST(ShardedTrain, SemiSyncLookupsReadTheShardsBeforeTheLastUpdate) {
  // After s + 1 steps the pending lookups are step s + 1's batch through an executor placed from
  // the tables after s steps; the synchronous run reads them after s + 1 updates.
  auto config = gemtb::model::LoadModelConfig("tiny");
  ASSERT_TRUE(config.ok());
  const model::TrainOptions o = Options(gemtb::model::SparsePipeline::kSemiSync);
  const ShardingPlanSpec plan = Plan(*config, kMixed, 2);
  const EmbeddingConfig emb = model::ModelEmbeddingConfig(*config, o.table_lr, o.seed);
  for (int s = 0; s < 2; ++s) {
    auto trainer = model::Trainer::Create(*config, o);
    ASSERT_TRUE(trainer.ok());
    ASSERT_TRUE((*trainer)->UseShardedTables(plan, 2, kGpusPerHost, nullptr).ok());
    for (int k = 0; k < s; ++k) ASSERT_TRUE((*trainer)->Step().ok());
    ASSERT_TRUE((*trainer)->GatherTables().ok());
    const EmbeddingState before = (*trainer)->state().tables;
    ASSERT_TRUE((*trainer)->Step().ok());
    auto gen = data::MakeGenerator("tiny");
    ASSERT_TRUE(gen.ok());
    const data::Batch next = data::GenerateBatch(*gen, o.data_seed, (s + 1) * o.batch, o.batch);
    const KeyedJaggedTensor kjt = model::KjtOfBatch(next);
    auto executor = ShardedExecutor::Create(emb, plan, 2, kGpusPerHost, before, nullptr);
    ASSERT_TRUE(executor.ok()) << executor.status();
    auto want = (*executor)->Forward(kjt);
    ASSERT_TRUE(want.ok()) << want.status();
    const model::NamedArrays arrays = (*trainer)->StateArrays();
    const io::NpyArray* pooled = nullptr;
    for (const auto& [name, a] : arrays)
      if (name == "pipeline.pooled") pooled = &a;
    ASSERT_NE(pooled, nullptr);
    std::vector<float> got(want->pooled.size());
    ASSERT_EQ(pooled->NumElements(), static_cast<int64_t>(got.size()));
    std::memcpy(got.data(), pooled->data.data(), got.size() * sizeof(float));
    EXPECT_EQ(got, want->pooled) << "step " << s;
    // Not vacuous: the step's update changed what the next batch reads.
    ASSERT_TRUE((*trainer)->GatherTables().ok());
    auto updated = ShardedExecutor::Create(emb, plan, 2, kGpusPerHost, (*trainer)->state().tables, nullptr);
    ASSERT_TRUE(updated.ok()) << updated.status();
    auto later = (*updated)->Forward(kjt);
    ASSERT_TRUE(later.ok()) << later.status();
    EXPECT_NE(later->pooled, want->pooled) << "step " << s;
  }
}

TEST(ShardedTrain, SemiSyncResumeEqualsTheUninterruptedRun) {
  // The checkpoint's pending lookups are the resumed step's; its executor routes that batch again
  // for the backward.
  auto config = gemtb::model::LoadModelConfig("tiny");
  ASSERT_TRUE(config.ok());
  const model::TrainOptions o = Options(gemtb::model::SparsePipeline::kSemiSync);
  const ShardingPlanSpec plan = Plan(*config, kMixed, 2);
  auto straight = TrainAlone(*config, plan, 2, 4, o);
  auto half = TrainAlone(*config, plan, 2, 2, o);
  ASSERT_TRUE(straight.ok() && half.ok());
  auto trainer = model::Trainer::Create(*config, o);
  ASSERT_TRUE(trainer.ok());
  ASSERT_TRUE((*trainer)->LoadStateArrays(*half).ok());
  ASSERT_TRUE((*trainer)->UseShardedTables(plan, 2, kGpusPerHost, nullptr).ok());
  for (int s = 0; s < 2; ++s) ASSERT_TRUE((*trainer)->Step().ok());
  ASSERT_TRUE((*trainer)->GatherTables().ok());
  EXPECT_TRUE(testutil::SameArrays((*trainer)->StateArrays(), *straight));
}

TEST(ShardedTrain, SemiSyncUnderAFullyShardedPlanIsNamed) {
  auto config = gemtb::model::LoadModelConfig("tiny");
  ASSERT_TRUE(config.ok());
  auto trainer = model::Trainer::Create(*config, Options(gemtb::model::SparsePipeline::kSemiSync));
  ASSERT_TRUE(trainer.ok());
  EXPECT_THAT((*trainer)->UseShardedTables(Plan(*config, kFullySharded, 4), 4, kGpusPerHost, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("plan.fully_sharded: the semi-synchronous pipeline does not run")));
}

TEST(ShardedTrain, TheShardedRunMovesTheTables) {
  // Not vacuous: two steps change the tables, and a plan's run is not the unsharded one's bits
  // everywhere (RW partitions the pooled sums by row block).
  auto config = gemtb::model::LoadModelConfig("tiny");
  ASSERT_TRUE(config.ok());
  auto start = TrainAlone(*config, Plan(*config, kMixed, 4), 4, 0);
  auto two = TrainAlone(*config, Plan(*config, kMixed, 4), 4, 2);
  ASSERT_TRUE(start.ok() && two.ok());
  EXPECT_FALSE(testutil::SameArrays(*start, *two));
}

TEST(ShardedTrain, GatheringOnlyTouchedRowsAcrossProcessesIsNamed) {
  auto config = gemtb::model::LoadModelConfig("tiny");
  ASSERT_TRUE(config.ok());
  auto trainer = model::Trainer::Create(*config, Options());
  ASSERT_TRUE(trainer.ok());
  ShardingPlanSpec plan = Plan(*config, kFullySharded, 4);
  plan.gather = GatherMode::kTouched;
  EXPECT_TRUE((*trainer)->UseShardedTables(plan, 4, kGpusPerHost, nullptr).ok());  // one process: fine
  auto server = launch::TcpStoreServer::Start(0, 1);
  ASSERT_TRUE(server.ok());
  auto store = launch::TcpStoreClient::Connect({"127.0.0.1", (*server)->port()}, 0, 1, launch::Millis(10000));
  ASSERT_TRUE(store.ok());
  StoreCollectives collectives(**store);
  EXPECT_THAT(
      (*trainer)->UseShardedTables(plan, 4, kGpusPerHost, &collectives),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plan.gather: 'touched' runs in one process only")));
  EXPECT_TRUE((*store)->Close().ok());
  EXPECT_TRUE((*server)->Shutdown(launch::Millis(5000)).ok());
}

TEST(ShardedTrain, ABatchThatDoesNotSplitIntoTheRanksIsNamed) {
  auto config = gemtb::model::LoadModelConfig("tiny");
  ASSERT_TRUE(config.ok());
  model::TrainOptions o = Options();
  o.batch = 18;
  auto trainer = model::Trainer::Create(*config, o);
  ASSERT_TRUE(trainer.ok());
  EXPECT_THAT((*trainer)->UseShardedTables(Plan(*config, kMixed, 4), 4, kGpusPerHost, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--batch: 18 is not divisible by the plan's world size 4")));
}

}  // namespace
}  // namespace gemtb::reference::dist
