// The communication report of a sharded run: every
// collective of a small 2D and fully sharded 2D plan, with byte counts worked out by hand from the
// formulas.
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/sharding/sharding_plan_json.h"
#include "nlohmann/json.hpp"
#include "reference/sharding/sharded_executor.h"
#include "tests/embedding/sharding_cases.h"

namespace gemtb::reference {
namespace {

// Two tables over R = 4, M = 2, N = 2 (groups {0, 2} and {1, 3}), B = 8 (local batch 2):
//   a: 6 rows x 4, fp32, rowwise Adagrad, TW on position 1; feature fa (SUM)
//   b: 5 rows x 8, bf16, Adam, RW (blocks of ceil(5/2) = 3 rows: [0,3) on m=0, [3,5) on m=1); fb (SUM)
struct HandCase {
  EmbeddingConfig config;
  KeyedJaggedTensor kjt;
  EmbeddingGrads grads;
};

HandCase MakeHandCase() {
  HandCase h;
  TableConfig a;
  a.name = "a";
  a.rows = 6;
  a.dim = 4;
  a.optimizer.kind = OptimizerKind::kRowwiseAdagrad;
  TableConfig b;
  b.name = "b";
  b.rows = 5;
  b.dim = 8;
  b.dtype = ElementType::kBFloat16;
  b.optimizer.kind = OptimizerKind::kAdam;
  h.config.tables = {a, b};
  h.config.features = {{"fa", 0, Pooling::kSum}, {"fb", 1, Pooling::kSum}};
  h.kjt.keys = {"fa", "fb"};
  h.kjt.stride = 8;
  // fa per sample: 1, 2, 0, 1, 3, 1, 2, 0 ids; fb: [0 4] [3] [1 1 2] [] [4] [0 3] [2] [4 4].
  h.kjt.lengths = {1, 2, 0, 1, 3, 1, 2, 0, 2, 1, 3, 0, 1, 2, 1, 2};
  h.kjt.values = {0, 1, 2, 3, 4, 5, 0, 1, 2, 3,         // fa
                  0, 4, 3, 1, 1, 2, 4, 0, 3, 2, 4, 4};  // fb
  h.grads.pooled.assign(8 * 12, 0.5f);
  return h;
}

CollectiveRecord Rec(CommPhase phase, CollectiveOp op, GroupClass c, std::vector<int> group, std::vector<int64_t> send,
                     std::vector<int64_t> recv) {
  return CollectiveRecord{0, phase, op, c, std::move(group), std::move(send), std::move(recv)};
}

// Forward and backward of the MP groups: identical for V2 and V3.
//   ids to a's owner (m=1): kappa = 4*B|F| + 8*nu = 8 + 8*nu; ranks 0, 1, 2, 3 hold samples
//   {0,1}, {2,3}, {4,5}, {6,7} with nu = 3, 1, 4, 2 ids of fa; the owner's own ids do not count.
//   ids of b bucketed: every destination gets 8 bytes of lengths + 8 per id in its block:
//   rank 0 -> rank 2: ids 4, 3 (24); rank 2 -> rank 0: id 0 (16); rank 1 -> rank 3: none (8);
//   rank 3 -> rank 1: id 2 (16).
//   a's pooled back: pi = B*|F|*D*4 = 2*1*4*4 = 32 from the owner; b: RS(2) of 2*pi = 2*64 bytes,
//   64 each way. Backward: a's grads A2A 32 to the owner; b: AG(2), 64 each way.
std::vector<CollectiveRecord> HandGroupTraffic() {
  using P = CommPhase;
  using O = CollectiveOp;
  const GroupClass mp = GroupClass::kSparseMp;
  return {
      Rec(P::kForward, O::kAllToAll, mp, {0, 2}, {32, 0}, {0, 32}),
      Rec(P::kForward, O::kAllToAll, mp, {0, 2}, {24, 16}, {16, 24}),
      Rec(P::kForward, O::kAllToAll, mp, {1, 3}, {16, 0}, {0, 16}),
      Rec(P::kForward, O::kAllToAll, mp, {1, 3}, {8, 16}, {16, 8}),
      Rec(P::kForward, O::kAllToAll, mp, {0, 2}, {0, 32}, {32, 0}),
      Rec(P::kForward, O::kReduceScatter, mp, {0, 2}, {64, 64}, {64, 64}),
      Rec(P::kForward, O::kAllToAll, mp, {1, 3}, {0, 32}, {32, 0}),
      Rec(P::kForward, O::kReduceScatter, mp, {1, 3}, {64, 64}, {64, 64}),
      Rec(P::kBackward, O::kAllToAll, mp, {0, 2}, {32, 0}, {0, 32}),
      Rec(P::kBackward, O::kAllGather, mp, {0, 2}, {64, 64}, {64, 64}),
      Rec(P::kBackward, O::kAllToAll, mp, {1, 3}, {32, 0}, {0, 32}),
      Rec(P::kBackward, O::kAllGather, mp, {1, 3}, {64, 64}, {64, 64}),
  };
}

TEST(ShardingReport, TwoDPlanMovesTheBytesOfThePattern) {
  const HandCase h = MakeHandCase();
  const nlohmann::json json = {{"default", {{"type", "TW"}}},
                               {"tables", {{"a", {{"type", "TW"}, {"owner", 1}}}, {"b", {{"type", "RW"}}}}},
                               {"mp_group", 2}};
  const ShardingPlanSpec plan = sharding_cases::ParsePlan(h.config, json, 4, 8);
  absl::StatusOr<ShardedRun> run = RunSharded(h.config, plan, 4, 8, InitEmbeddingState(h.config), h.kjt, &h.grads, 1);
  ASSERT_TRUE(run.ok()) << run.status();
  std::vector<CollectiveRecord> want = HandGroupTraffic();
  // Sync per position m over {2m, 2m+1}, shards in layout order (a on m=1; b's blocks on m=0, 1):
  // weights rows*D*e_w, AR counts 2*(p-1)/p of it: a 6*4*4 = 96; b 3*8*2 = 48 and 2*8*2 = 32;
  // state: a's rowwise Adagrad 4*6 = 24; b's Adam m and v 8*rows*D = 192 and 128.
  const GroupClass rep = GroupClass::kSparseReplica;
  const auto ar = CollectiveOp::kAllReduce;
  for (auto [group, bytes] : std::vector<std::pair<std::vector<int>, int64_t>>{
           {{2, 3}, 96}, {{2, 3}, 24}, {{0, 1}, 48}, {{0, 1}, 192}, {{2, 3}, 32}, {{2, 3}, 128}}) {
    want.push_back(Rec(CommPhase::kSync, ar, rep, group, {bytes, bytes}, {bytes, bytes}));
  }
  EXPECT_EQ(run->report.collectives.size(), want.size());
  for (size_t i = 0; i < want.size() && i < run->report.collectives.size(); ++i) {
    EXPECT_EQ(run->report.collectives[i], want[i])
        << "record " << i << ": " << CommReportToJson({4, {run->report.collectives[i]}}).dump();
  }
  EXPECT_EQ(CommReportToJson(run->report)["wire_bytes_per_element"], 4);
}

TEST(ShardingReport, FullyShardedPlanAddsTheReplicaGatherAndScatter) {
  const HandCase h = MakeHandCase();
  const nlohmann::json json = {{"tables", {{"a", {{"type", "TW"}, {"owner", 1}}}, {"b", {{"type", "RW"}}}}},
                               {"mp_group", 2},
                               {"fully_sharded", true}};
  const ShardingPlanSpec plan = sharding_cases::ParsePlan(h.config, json, 4, 8);
  absl::StatusOr<ShardedRun> run = RunSharded(h.config, plan, 4, 8, InitEmbeddingState(h.config), h.kjt, &h.grads, 1);
  ASSERT_TRUE(run.ok()) << run.status();
  // AG(N=2) of sub-blocks (ceil(rows/2) rows) in the replica groups, e_w bytes per element:
  //   a (6 rows on m=1, group {2,3}): 3*4*4 = 48 each;
  //   b block 0 (3 rows on m=0, group {0,1}): sub-blocks of 2 and 1 rows: 2*8*2 = 32, 16;
  //   b block 1 (2 rows on m=1, group {2,3}): 1 row each, 16.
  // RS(2) of the updated copies: send buffer - own chunk, receive (p-1)*own chunk:
  //   a: 96 - 48; b block 0: 48 - 32 = 16 and 48 - 16 = 32; b block 1: 16.
  const GroupClass intra = GroupClass::kSparseIntra;
  auto gathers = [&](CommPhase phase) {
    return std::vector<CollectiveRecord>{
        Rec(phase, CollectiveOp::kAllGather, intra, {2, 3}, {48, 48}, {48, 48}),
        Rec(phase, CollectiveOp::kAllGather, intra, {0, 1}, {32, 16}, {16, 32}),
        Rec(phase, CollectiveOp::kAllGather, intra, {2, 3}, {16, 16}, {16, 16}),
    };
  };
  const std::vector<CollectiveRecord> group = HandGroupTraffic();
  std::vector<CollectiveRecord> want = gathers(CommPhase::kForward);
  want.insert(want.end(), group.begin(), group.begin() + 8);
  const std::vector<CollectiveRecord> again = gathers(CommPhase::kBackward);
  want.insert(want.end(), again.begin(), again.end());
  want.insert(want.end(), group.begin() + 8, group.end());
  want.push_back(Rec(CommPhase::kBackward, CollectiveOp::kReduceScatter, intra, {2, 3}, {48, 48}, {48, 48}));
  want.push_back(Rec(CommPhase::kBackward, CollectiveOp::kReduceScatter, intra, {0, 1}, {16, 32}, {32, 16}));
  want.push_back(Rec(CommPhase::kBackward, CollectiveOp::kReduceScatter, intra, {2, 3}, {16, 16}, {16, 16}));
  EXPECT_EQ(run->report.collectives.size(), want.size());
  for (size_t i = 0; i < want.size() && i < run->report.collectives.size(); ++i) {
    EXPECT_EQ(run->report.collectives[i], want[i])
        << "record " << i << ": " << CommReportToJson({4, {run->report.collectives[i]}}).dump();
  }
}

}  // namespace
}  // namespace gemtb::reference
