// Sharded checkpoints (reference/dist/sharded_checkpoint.h) with ranks as threads: every rank gets
// its own shard back, a failed shard or manifest leaves the previous checkpoint the newest, and a
// checkpoint of another world size, config or plan, a damaged shard or a stale copy of the folder
// is refused on every rank by name. Killed processes are in sharded_resume_test.cc.
#include "reference/dist/sharded_checkpoint.h"

#include <filesystem>
#include <functional>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/dist/dist_test_util.h"
#include "tests/testing/status_matchers.h"

namespace gemtb::reference::dist {
namespace {

namespace fs = std::filesystem;
using ::gemtb::testing::IsOk;
using ::gemtb::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int kWorld = 4;

CheckpointIdentity Identity(int world = kWorld) { return {world, "config-a", "plan-a"}; }

// Runs `body(store)` on every rank of a fresh store, one thread each; the statuses in rank order.
std::vector<absl::Status> OnEveryRank(int world, const std::function<absl::Status(launch::TcpStoreClient&)>& body) {
  std::vector<absl::Status> out;
  for (const absl::StatusOr<bool>& r : testutil::RunOnRanks<bool>(
           world, [&](launch::TcpStoreClient& store, int) -> absl::StatusOr<bool> {
             if (absl::Status s = body(store); !s.ok()) return s;
             return true;
           })) {
    out.push_back(r.status());
  }
  return out;
}

absl::Status WriteStep(const std::string& dir, int64_t step) {
  std::vector<absl::Status> s = OnEveryRank(kWorld, [&](launch::TcpStoreClient& store) {
    return WriteShardedCheckpoint(dir, step, Identity(), testutil::RankArrays(store.rank(), step), store);
  });
  for (const absl::Status& r : s)
    if (!r.ok()) return r;
  return absl::OkStatus();
}

class ShardedCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testutil::FreshDir("sharded_checkpoint"); }
  std::string dir_;
};

TEST_F(ShardedCheckpoint, EveryRankReadsBackItsOwnShardOfTheNewestStep) {
  ASSERT_THAT(WriteStep(dir_, 3), IsOk());
  ASSERT_THAT(WriteStep(dir_, 6), IsOk());
  EXPECT_FALSE(fs::exists(fs::path(dir_) / "step-3")) << "earlier steps are removed after a commit";
  std::vector<absl::Status> s = OnEveryRank(kWorld, [&](launch::TcpStoreClient& store) -> absl::Status {
    auto loaded = LoadShardedCheckpoint(dir_, Identity(), store);
    if (!loaded.ok()) return loaded.status();
    if (loaded->step != 6) return absl::InternalError(absl::StrCat("step ", loaded->step));
    if (!testutil::SameArrays(loaded->arrays, testutil::RankArrays(store.rank(), 6)))
      return absl::InternalError(absl::StrCat("rank ", store.rank(), ": other arrays"));
    return absl::OkStatus();
  });
  for (const absl::Status& r : s) EXPECT_THAT(r, IsOk());
}

TEST_F(ShardedCheckpoint, AShardThatFailsMidWriteFailsEveryRankAndLeavesThePreviousCheckpoint) {
  ASSERT_THAT(WriteStep(dir_, 2), IsOk());
  ShardedWriteOptions failing;
  failing.shard.fail_after_bytes = 40;
  std::vector<absl::Status> s = OnEveryRank(kWorld, [&](launch::TcpStoreClient& store) {
    const ShardedWriteOptions options = store.rank() == 2 ? failing : ShardedWriteOptions{};
    return WriteShardedCheckpoint(dir_, 4, Identity(), testutil::RankArrays(store.rank(), 4), store, options);
  });
  for (const absl::Status& r : s)
    EXPECT_THAT(r, StatusIs(absl::StatusCode::kAborted, HasSubstr("checkpoint step 4: rank 2 could not write its shard")));
  EXPECT_FALSE(fs::exists(fs::path(dir_) / "step-4" / "manifest.json"));
  for (int r = 0; r < kWorld; ++r) {
    auto loaded = ReadShardOfNewestCheckpoint(dir_, Identity(), r);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->step, 2);
    EXPECT_TRUE(testutil::SameArrays(loaded->arrays, testutil::RankArrays(r, 2)));
  }
}

TEST_F(ShardedCheckpoint, AManifestThatFailsMidWriteLeavesThePreviousCheckpoint) {
  ASSERT_THAT(WriteStep(dir_, 2), IsOk());
  ShardedWriteOptions failing;
  failing.manifest.fail_after_bytes = 30;
  std::vector<absl::Status> s = OnEveryRank(kWorld, [&](launch::TcpStoreClient& store) {
    const ShardedWriteOptions options = store.rank() == 0 ? failing : ShardedWriteOptions{};
    return WriteShardedCheckpoint(dir_, 4, Identity(), testutil::RankArrays(store.rank(), 4), store, options);
  });
  EXPECT_THAT(s[0], StatusIs(absl::StatusCode::kAborted, HasSubstr("injected failure")));
  for (int r = 1; r < kWorld; ++r) EXPECT_THAT(s[r], StatusIs(absl::StatusCode::kAborted, HasSubstr("rank 0: checkpoint step 4: manifest")));
  auto loaded = ReadShardOfNewestCheckpoint(dir_, Identity(), 1);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->step, 2);
}

TEST_F(ShardedCheckpoint, AnotherWorldSizeConfigOrPlanIsRefusedByName) {
  ASSERT_THAT(WriteStep(dir_, 5), IsOk());
  EXPECT_THAT(ReadShardOfNewestCheckpoint(dir_, Identity(2), 0),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("world_size 4, this job's is 2")));
  EXPECT_THAT(ReadShardOfNewestCheckpoint(dir_, {kWorld, "config-b", "plan-a"}, 0),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("config_hash config-a, this job's is config-b")));
  EXPECT_THAT(ReadShardOfNewestCheckpoint(dir_, {kWorld, "config-a", "plan-b"}, 0),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("plan_hash plan-a, this job's is plan-b")));
  // Every rank of a job of the wrong world size says so.
  std::vector<absl::Status> s = OnEveryRank(2, [&](launch::TcpStoreClient& store) {
    return LoadShardedCheckpoint(dir_, Identity(2), store).status();
  });
  for (const absl::Status& r : s) EXPECT_THAT(r, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("world_size 4")));
}

TEST_F(ShardedCheckpoint, ADamagedShardIsDataLossOnItsRankAndNamedOnEveryOther) {
  ASSERT_THAT(WriteStep(dir_, 1), IsOk());
  const fs::path shard = fs::path(dir_) / "step-1" / "rank-3.ckpt";
  fs::resize_file(shard, fs::file_size(shard) - 1);
  std::vector<absl::Status> s = OnEveryRank(kWorld, [&](launch::TcpStoreClient& store) {
    return LoadShardedCheckpoint(dir_, Identity(), store).status();
  });
  EXPECT_THAT(s[3], StatusIs(absl::StatusCode::kDataLoss, HasSubstr("rank-3.ckpt")));
  for (int r = 0; r < 3; ++r)
    EXPECT_THAT(s[r], StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("rank 3 cannot resume")));
}

TEST_F(ShardedCheckpoint, AStaleCopyOfTheFolderOnOneRankIsRefusedOnEveryRank) {
  const std::string stale = testutil::FreshDir("sharded_checkpoint_stale");
  ASSERT_THAT(WriteStep(stale, 2), IsOk());
  ASSERT_THAT(WriteStep(dir_, 2), IsOk());
  ASSERT_THAT(WriteStep(dir_, 4), IsOk());
  std::vector<absl::Status> s = OnEveryRank(kWorld, [&](launch::TcpStoreClient& store) {
    return LoadShardedCheckpoint(store.rank() == 1 ? stale : dir_, Identity(), store).status();
  });
  for (const absl::Status& r : s)
    EXPECT_THAT(r, StatusIs(absl::StatusCode::kFailedPrecondition,
                            HasSubstr("ranks disagree on the checkpoint to resume")));
  EXPECT_THAT(s[0], StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("rank 0 has step 4")));
  EXPECT_THAT(s[0], StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("rank 1 has step 2")));
}

TEST_F(ShardedCheckpoint, NoCheckpointIsNotFound) {
  EXPECT_THAT(ReadShardOfNewestCheckpoint(dir_, Identity(), 0), StatusIs(absl::StatusCode::kNotFound, HasSubstr("no checkpoint")));
  fs::create_directories(fs::path(dir_) / "step-9");  // shards of an unfinished write, no manifest
  EXPECT_THAT(ReadShardOfNewestCheckpoint(dir_, Identity(), 0), StatusIs(absl::StatusCode::kNotFound));
}

// One process alone (gemtb train): the same folder, read back as rank 0 of a world of 1; a failed
// shard leaves no manifest and the previous step stays the newest.
TEST_F(ShardedCheckpoint, OneProcessWritesTheSameLayoutWithoutAStore) {
  const CheckpointIdentity one{1, "config-a", "plan-a"};
  ASSERT_THAT(WriteOneProcessCheckpoint(dir_, 3, one, testutil::RankArrays(0, 3)), IsOk());
  ASSERT_THAT(WriteOneProcessCheckpoint(dir_, 6, one, testutil::RankArrays(0, 6)), IsOk());
  EXPECT_FALSE(fs::exists(fs::path(dir_) / "step-3")) << "earlier steps are removed after a commit";
  ShardedWriteOptions failing;
  failing.shard.fail_after_bytes = 40;
  EXPECT_THAT(WriteOneProcessCheckpoint(dir_, 9, one, testutil::RankArrays(0, 9), failing),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("injected failure")));
  EXPECT_FALSE(fs::exists(fs::path(dir_) / "step-9" / "manifest.json"));
  auto loaded = ReadShardOfNewestCheckpoint(dir_, one, 0);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->step, 6);
  EXPECT_TRUE(testutil::SameArrays(loaded->arrays, testutil::RankArrays(0, 6)));
  EXPECT_THAT(WriteOneProcessCheckpoint(dir_, 7, Identity(), testutil::RankArrays(0, 7)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("world_size 4")));
}

}  // namespace
}  // namespace gemtb::reference::dist
