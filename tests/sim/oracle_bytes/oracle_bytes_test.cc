// simulator.md §6.8: for sparse plans over R <= 8 ranks, one step's collectives as the simulator's
// step template costs them (sim/workload/sparse_bytes.h: the template's own byte formulas evaluated
// on each rank's explicit batch) move the bytes of the oracle's communication report
// (embeddings-and-model.md §3.1) for the same plan and the same batch.
//
// What is compared: per (phase, op, group class, process group), the bytes all members send in
// total over the step's calls, with the simulator's S converted to the report's direct-exchange
// convention (§3.1: A2A S; AG and RS (p-1)/p of S; AR twice that). The simulator prices an average
// rank (a table's owner is any MP position, ids spread over row blocks), so the batch is one every
// rank shares in shape: local batch 8, one id per pooled bag, the same 16 sequence ids per rank,
// every rank's ids spread evenly over the row blocks of M = 2, 4 and 8. On such a batch the average
// is exact for a group's total, and any difference is a formula that deviates from spec §3.2.
// Table-wise tables in 2D put a replica group's sync or gather on their owner's group only: those
// plans are compared per group class (summed over its groups), see Granularity.
//
// The simulator's activations travel in bf16 (e_a = 2, GPU) and the oracle's in fp32 (e_a = 4): the
// report says which (wire_bytes_per_element), and the embedding-carrying call sites are scaled by
// that ratio; ids (4 and 8 bytes), weights (e_w) and DP gradients (fp32) are not.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "reference/collectives/comm_report.h"
#include "reference/embedding/tbe.h"
#include "reference/sharding/sharded_executor.h"
#include "reference/sharding/sharding_plan.h"
#include "sim/network/collective_cost.h"
#include "sim/workload/rank_groups.h"
#include "sim/workload/sparse_bytes.h"
#include "sim/workload/step_template.h"
#include "tests/sim/engine/test_scenario.h"

namespace gemtb {
namespace {

constexpr int kWorld = 8;
constexpr int kGpusPerHost = 4;   // two hosts: TWRW and GRID have host groups of 4 in 1D
constexpr int64_t kLocalBatch = 8;
constexpr int64_t kRows = 64;     // divisible by M * N for every plan here: no ragged blocks
constexpr int64_t kDim = 8;
// The step template's wire bytes per activation element is sim::kWireBytesPerActivation; the
// oracle's comes from its report.
// Sequence lengths of a rank's 8 samples: 16 ids, a multiple of every M.
constexpr int kSeqLengths[kLocalBatch] = {1, 2, 3, 2, 1, 2, 3, 2};
constexpr int64_t kSeqIdsPerRank = 16;

// Two tables: "user" (fp32, one pooled SUM feature, one id per sample) and "item" (bf16, one
// sequence feature of model sequence 0).
EmbeddingConfig OracleConfig(OptimizerKind optimizer) {
  EmbeddingConfig c;
  c.seed = 20261130;
  TableConfig user;
  user.name = "user";
  user.rows = kRows;
  user.dim = kDim;
  user.dtype = ElementType::kFloat32;
  user.optimizer.kind = optimizer;
  TableConfig item = user;
  item.name = "item";
  item.dtype = ElementType::kBFloat16;
  c.tables = {user, item};
  FeatureConfig fu;
  fu.key = "userid";
  fu.table = 0;
  fu.pooling = Pooling::kSum;
  FeatureConfig fi;
  fi.key = "seq0.item";
  fi.table = 1;
  fi.pooling = Pooling::kNone;
  c.features = {fu, fi};
  return c;
}

// The global batch: rank r's samples are [8r, 8r + 8). Pooled id of sample b: row 8b + r (row
// chunk b of 8 rows); the k-th sequence id of a rank: row 8(k mod 8) + k / 8 (two per 8-row chunk).
// Each rank thus has 1 pooled and 2 sequence ids in every 8-row chunk, hence 8/M and 16/M in every
// row block of M = 8, 4, 2 (blocks of 64/M rows).
struct OracleBatch {
  reference::KeyedJaggedTensor kjt;
  reference::EmbeddingGrads grads;
};

OracleBatch MakeOracleBatch() {
  OracleBatch o;
  const int64_t global = kWorld * kLocalBatch;
  o.kjt.keys = {"userid", "seq0.item"};
  o.kjt.stride = global;
  std::vector<int64_t> user_ids, item_ids;
  int64_t seq_total = 0;
  for (int r = 0; r < kWorld; ++r) {
    int k = 0;
    for (int b = 0; b < kLocalBatch; ++b) {
      o.kjt.lengths.push_back(1);
      user_ids.push_back(8 * b + r);
      for (int p = 0; p < kSeqLengths[b]; ++p, ++k) item_ids.push_back(8 * (k % 8) + k / 8);
    }
  }
  for (int r = 0; r < kWorld; ++r) {
    for (int b = 0; b < kLocalBatch; ++b) {
      o.kjt.lengths.push_back(kSeqLengths[b]);
      seq_total += kSeqLengths[b];
    }
  }
  o.kjt.values = user_ids;
  o.kjt.values.insert(o.kjt.values.end(), item_ids.begin(), item_ids.end());
  o.grads.pooled.assign(static_cast<size_t>(global * kDim), 0.25f);
  o.grads.sequence.push_back(std::vector<float>(static_cast<size_t>(seq_total * kDim), -0.5f));
  return o;
}

// The simulator's side: the toy model's dense part with the same two tables.
sim::Scenario SimScenario(const nlohmann::json& plan_json, OptimizerKind optimizer) {
  auto m = sim::testing::ToyModel(1, 1e6, 1000);
  model::GraphTable user;
  user.name = "user";
  user.rows = kRows;
  user.dim = kDim;
  user.dtype = ElementType::kFloat32;
  user.pooling = Pooling::kSum;
  user.features = {"userid"};
  user.optimizer = optimizer;
  model::GraphTable item = user;
  item.name = "item";
  item.dtype = ElementType::kBFloat16;
  item.pooling = Pooling::kNone;
  item.features = {"seq0.item"};
  m->tables = {user, item};
  sim::Scenario s = sim::testing::ToyScenario(kWorld, kLocalBatch, m);
  s.cluster.gpus_per_host = kGpusPerHost;
  sim::SparsePlan& sp = s.plan.sparse;
  auto spec_of = [](const nlohmann::json& j) {
    sim::TableShardingSpec t;
    t.type = j.at("type").get<std::string>();
    if (j.contains("owner")) t.owner = j["owner"].get<int>();
    if (j.contains("shards")) t.shards = j["shards"].get<int>();
    return t;
  };
  if (plan_json.contains("default")) sp.default_sharding = spec_of(plan_json["default"]);
  if (plan_json.contains("tables")) {
    for (const auto& [name, t] : plan_json["tables"].items()) sp.tables[name] = spec_of(t);
  }
  sp.mp_group = plan_json.value("mp_group", kWorld);
  sp.fully_sharded = plan_json.value("fully_sharded", false);
  sp.sync_period = plan_json.value("sync_period", 1);
  sp.state_sync = plan_json.value("state_sync", true);
  sp.keep_gathered = plan_json.value("keep_gathered", false);
  sp.gather = plan_json.value("gather", std::string("all"));
  return s;
}

// phase, op, group class, the group's members (ascending): one entry per process group that issues
// collectives of that kind, summed over its calls and members.
using Key = std::tuple<std::string, std::string, std::string, std::string>;
using Totals = std::map<Key, double>;

std::string Members(std::vector<int> group) {
  std::sort(group.begin(), group.end());
  return absl::StrJoin(group, ",");
}

bool CarriesActivations(const std::string& task) {
  return absl::StartsWith(task, "sparse.emb_a2a") || absl::StartsWith(task, "sparse.pooled_rs") ||
         absl::StartsWith(task, "sparse.twrw_");
}

// Bytes every member sends, per key, as the simulator's template costs them on this batch.
Totals SimTotals(const nlohmann::json& plan_json, OptimizerKind optimizer, double oracle_wire) {
  const sim::Scenario s = SimScenario(plan_json, optimizer);
  absl::StatusOr<sim::RankGroups> groups = sim::BuildRankGroups(s.plan, kWorld);
  EXPECT_TRUE(groups.ok()) << groups.status();
  if (!groups.ok()) return {};
  absl::StatusOr<sim::StepTemplate> tpl = sim::BuildStepTemplate(s, *groups);
  EXPECT_TRUE(tpl.ok()) << tpl.status();
  if (!tpl.ok()) return {};
  std::vector<double> stats;
  for (int r = 0; r < kWorld; ++r) {
    absl::StatusOr<std::vector<double>> row = sim::ExplicitStatsRow(tpl->layout, kLocalBatch, {kSeqIdsPerRank});
    EXPECT_TRUE(row.ok()) << row.status();
    stats.insert(stats.end(), row->begin(), row->end());
  }
  absl::StatusOr<std::vector<sim::SparseCollectiveBytes>> calls = sim::SparseStepBytes(*tpl, stats, kWorld);
  EXPECT_TRUE(calls.ok()) << calls.status();
  if (!calls.ok()) return {};
  Totals totals;
  for (const sim::SparseCollectiveBytes& c : *calls) {
    const double p = static_cast<double>(c.group.size());
    double share = 1.0;  // all_to_all: S is what one rank sends
    if (c.op == sim::CollectiveOp::kAllGather || c.op == sim::CollectiveOp::kReduceScatter) share = (p - 1) / p;
    if (c.op == sim::CollectiveOp::kAllReduce) share = 2 * (p - 1) / p;
    if (CarriesActivations(c.task)) share *= oracle_wire / sim::kWireBytesPerActivation;
    double& t = totals[{c.phase, std::string(sim::CollectiveOpName(c.op)), std::string(sim::GroupClassName(c.group_class)),
                        Members(c.group)}];
    for (double b : c.bytes) t += b * share;
  }
  return totals;
}

struct OracleResult {
  Totals totals;
  double wire = 4;
};

OracleResult OracleTotals(const nlohmann::json& plan_json, OptimizerKind optimizer) {
  const EmbeddingConfig config = OracleConfig(optimizer);
  absl::StatusOr<reference::ShardingPlanSpec> plan =
      reference::ParseShardingPlan(plan_json, config, kWorld, kGpusPerHost);
  EXPECT_TRUE(plan.ok()) << plan.status() << " in " << plan_json.dump();
  if (!plan.ok()) return {};
  const OracleBatch batch = MakeOracleBatch();
  absl::StatusOr<reference::ShardedRun> run =
      reference::RunSharded(config, *plan, kWorld, kGpusPerHost, reference::InitEmbeddingState(config), batch.kjt,
                            &batch.grads, 1, 1);
  EXPECT_TRUE(run.ok()) << run.status();
  if (!run.ok()) return {};
  OracleResult out;
  out.wire = static_cast<double>(run->report.wire_bytes_per_element);
  for (const reference::CollectiveRecord& c : run->report.collectives) {
    double& t = out.totals[{reference::CommPhaseName(c.phase), reference::CollectiveOpName(c.op),
                            reference::GroupClassName(c.group_class), Members(c.group)}];
    for (int64_t b : c.send_bytes) t += static_cast<double>(b);
  }
  return out;
}

std::string Dump(const Totals& t) {
  std::string s;
  for (const auto& [k, v] : t) {
    absl::StrAppend(&s, "  ", std::get<0>(k), " ", std::get<1>(k), " ", std::get<2>(k), " {", std::get<3>(k), "}: ", v,
                    "\n");
  }
  return s;
}

// The simulator prices an average rank: a table-wise table's bytes are spread over every group,
// where the oracle puts them on its owner's group. So per group the two agree only when every group
// carries the same load (row-wise and data-parallel placements, 1D plans); with table-wise tables in
// 2D, the replica groups' syncs and gathers agree in total over the groups of a class.
enum class Granularity { kPerGroup, kPerClass };

Totals OverGroups(const Totals& t) {
  Totals out;
  for (const auto& [k, v] : t) out[{std::get<0>(k), std::get<1>(k), std::get<2>(k), "all groups"}] += v;
  return out;
}

void ExpectSameBytes(const nlohmann::json& plan_json, OptimizerKind optimizer = OptimizerKind::kRowwiseAdagrad,
                     Granularity granularity = Granularity::kPerGroup) {
  SCOPED_TRACE(plan_json.dump());
  const OracleResult oracle = OracleTotals(plan_json, optimizer);
  Totals sim = SimTotals(plan_json, optimizer, oracle.wire);
  Totals want = oracle.totals;
  ASSERT_FALSE(want.empty());
  if (granularity == Granularity::kPerClass) {
    sim = OverGroups(sim);
    want = OverGroups(want);
  }
  EXPECT_EQ(sim, want) << "simulator:\n" << Dump(sim) << "oracle:\n" << Dump(want);
}

nlohmann::json Plan1D(const std::string& type, int shards = 0) {
  nlohmann::json d = {{"type", type}};
  if (shards > 0) d["shards"] = shards;
  return {{"default", d}};
}

TEST(OracleBytes, TableWise) { ExpectSameBytes(Plan1D("TW")); }

TEST(OracleBytes, RowWise) { ExpectSameBytes(Plan1D("RW")); }

TEST(OracleBytes, MixedTableWiseAndRowWise) {
  ExpectSameBytes({{"default", {{"type", "TW"}}}, {"tables", {{"item", {{"type", "RW"}}}}}});
}

// SGD: column shards need no exchange of row-norm partial sums (see the Adagrad case below).
TEST(OracleBytes, ColumnWiseWithSgd) { ExpectSameBytes(Plan1D("CW", 2), OptimizerKind::kSgd); }

TEST(OracleBytes, FullyShardedKeepingTheGatheredCopy) {
  ExpectSameBytes({{"default", {{"type", "RW"}}}, {"mp_group", 2}, {"fully_sharded", true}, {"keep_gathered", true}});
}

TEST(OracleBytes, SparseStepBytesRejectsAStatsArrayOfTheWrongSize) {
  const sim::Scenario s = SimScenario(Plan1D("TW"), OptimizerKind::kSgd);
  absl::StatusOr<sim::RankGroups> groups = sim::BuildRankGroups(s.plan, kWorld);
  ASSERT_TRUE(groups.ok()) << groups.status();
  absl::StatusOr<sim::StepTemplate> tpl = sim::BuildStepTemplate(s, *groups);
  ASSERT_TRUE(tpl.ok()) << tpl.status();
  const std::vector<double> short_stats(3, 1.0);
  EXPECT_FALSE(sim::SparseStepBytes(*tpl, short_stats, kWorld).ok());
  EXPECT_FALSE(sim::ExplicitStatsRow(tpl->layout, 8, {}).ok());
  EXPECT_FALSE(sim::ExplicitStatsRow(tpl->layout, -1, {16}).ok());
}

// TWRW and GRID: RS(g) of the M*pi buffer inside the table's host group only (spec §3.2); the
// average rank carries g/M of the hosts' buffers (tables spread over the M/g hosts).
TEST(OracleBytes, TableRowWise) {
  ExpectSameBytes(Plan1D("TWRW"), OptimizerKind::kRowwiseAdagrad, Granularity::kPerClass);
}

TEST(OracleBytes, Grid) { ExpectSameBytes(Plan1D("GRID", 2), OptimizerKind::kSgd, Granularity::kPerClass); }

// DP: the dense gradient N_t * D_t * 4 of spec §3.2's DP row plus the per-row touch count N_t * 4
// the oracle all-reduces so that only looked-up rows update (reference/sharding/mp_group.h); the
// simulator's sparse.dp_ar carries both.
TEST(OracleBytes, DataParallel) { ExpectSameBytes(Plan1D("DP")); }

TEST(OracleBytes, TwoDimensionalRowWiseWithReplicaSync) {
  ExpectSameBytes({{"default", {{"type", "RW"}}}, {"mp_group", 4}});
}

TEST(OracleBytes, TwoDimensionalWithReplicaSync) {
  ExpectSameBytes({{"default", {{"type", "TW"}}}, {"tables", {{"item", {{"type", "RW"}}}}}, {"mp_group", 4}},
                  OptimizerKind::kRowwiseAdagrad, Granularity::kPerClass);
}

TEST(OracleBytes, TwoDimensionalWithoutStateSync) {
  ExpectSameBytes(
      {{"default", {{"type", "RW"}}}, {"mp_group", 2}, {"state_sync", false}}, OptimizerKind::kSgd);
}

TEST(OracleBytes, FullyShardedRowWise) {
  ExpectSameBytes({{"default", {{"type", "RW"}}}, {"mp_group", 4}, {"fully_sharded", true}});
}

TEST(OracleBytes, FullySharded) {
  ExpectSameBytes({{"default", {{"type", "TW"}}},
                   {"tables", {{"item", {{"type", "RW"}}}}},
                   {"mp_group", 4},
                   {"fully_sharded", true}},
                  OptimizerKind::kRowwiseAdagrad, Granularity::kPerClass);
}

// Rowwise Adagrad on column shards (cw_state=shared) all-gathers the partial square sums, 4U bytes
// per shard (spec §3.2's CW row); the simulator's template has no such collective (bwd all_gather
// sparse-mp: oracle 640 bytes, simulator none). Disabled until the template adds it.
TEST(OracleBytes, DISABLED_ColumnWiseWithRowwiseAdagrad) {
  ExpectSameBytes(Plan1D("CW", 2), OptimizerKind::kRowwiseAdagrad, Granularity::kPerClass);
}

// V2 state sync with Adam tables: m and v, 8 * rows * D bytes per table (spec §3.2).
TEST(OracleBytes, TwoDimensionalAdamStateSync) {
  ExpectSameBytes({{"default", {{"type", "RW"}}}, {"mp_group", 4}}, OptimizerKind::kAdam);
}

// V3 with gather=touched: the oracle gathers (and reduce-scatters) the rows U of a shard that either
// MP group of the replica group touches, each once; step_template.cc prices U as this rank's share of
// its own MP group's ids, nu * D * e_w, with neither the deduplication nor the union over the N
// groups: per replica group 512 bytes where the oracle moves 576 (user: 16 unique rows of a block
// across both MP groups vs 8 ids per rank; item: 4 unique rows vs 16 ids per rank). Disabled until
// the template estimates unique rows (spec §3.2: "only the U needed rows").
TEST(OracleBytes, DISABLED_FullyShardedGatheringTouchedRows) {
  ExpectSameBytes({{"default", {{"type", "RW"}}}, {"mp_group", 4}, {"fully_sharded", true}, {"gather", "touched"}});
}

}  // namespace
}  // namespace gemtb

