// For sparse sharding plans over R ranks,
//  * the oracle's communication report moves exactly the bytes of model/sharding's pattern
//    (comm_pattern.h) evaluated on the batch the oracle ran (its bags, ids and distinct rows U), and
//  * the simulator's step template (sim/workload/sparse_bytes.h: the template's own byte formulas on
//    each rank's explicit batch) moves the same bytes as the oracle.
// Both read the plan through the one parser (model/sharding/sharding_plan_json.h).
//
// What is compared: per (phase, op, group class, process group), the bytes all members send in
// total over the step's calls, in the report's direct-exchange convention (A2A S; AG and RS
// (p-1)/p of S; AR twice that). The pattern and the simulator price an average rank (a table's owner
// is any MP position, ids spread over row blocks), so the batches are ones every rank shares in shape
// and whose ids spread evenly over the row blocks: then the average is exact for the total of a group
// class, and for the total of each group where every group carries the same load (Granularity).
//
// The simulator estimates distinct rows from each rank's ids (comm_pattern.h's TrafficTerm): the MP
// group's U as its ids without repeats, V3's touched rows as the rank's own ids. The oracle is always
// checked against the pattern for the rows it measured, the simulator against the pattern for its
// estimates, and the simulator against the oracle directly where the estimates are exact (the
// sweep's batch repeats no id) or unused.
//
// The simulator's activations travel in bf16 (e_a = 2, GPU) and the oracle's in fp32 (e_a = 4): the
// report says which (wire_bytes_per_element), and the embedding-carrying call sites are scaled by
// that ratio; ids (4 and 8 bytes), weights (e_w) and optimizer values (fp32) are not.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "model/sharding/comm_pattern.h"
#include "model/sharding/sharding_plan_json.h"
#include "nlohmann/json.hpp"
#include "reference/collectives/comm_report.h"
#include "reference/embedding/tbe.h"
#include "reference/sharding/sharded_executor.h"
#include "sim/network/collective_cost.h"
#include "sim/workload/rank_groups.h"
#include "sim/workload/sparse_bytes.h"
#include "sim/workload/step_template.h"
#include "tests/sim/engine/test_scenario.h"

namespace gemtb {
namespace {

constexpr int64_t kDim = 8;

// Two tables: "user" (fp32, one pooled SUM feature, one id per sample) and "item" (bf16, one
// sequence feature of model sequence 0).
EmbeddingConfig OracleConfig(OptimizerKind optimizer, int64_t rows) {
  EmbeddingConfig c;
  c.seed = 20261130;
  TableConfig user;
  user.name = "user";
  user.rows = rows;
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

// A global batch of R equal local batches: rank r's samples are [rB, rB + B), each with one pooled
// id; `seq_lengths` are the sequence lengths of a rank's B samples (the same on every rank).
struct Batch {
  int world = 1;
  int64_t rows = 0;
  int64_t local_batch = 0;
  std::vector<int64_t> seq_lengths;                  // [B]
  std::vector<std::vector<int64_t>> user_ids, item_ids;  // [rank][ids in sample order]
  int64_t SeqIdsPerRank() const { return std::accumulate(seq_lengths.begin(), seq_lengths.end(), int64_t{0}); }
};

reference::KeyedJaggedTensor Kjt(const Batch& b) {
  reference::KeyedJaggedTensor kjt;
  kjt.keys = {"userid", "seq0.item"};
  kjt.stride = b.world * b.local_batch;
  for (int r = 0; r < b.world; ++r) {
    for (int64_t s = 0; s < b.local_batch; ++s) kjt.lengths.push_back(1);
  }
  for (int r = 0; r < b.world; ++r) kjt.lengths.insert(kjt.lengths.end(), b.seq_lengths.begin(), b.seq_lengths.end());
  for (const auto& ids : b.user_ids) kjt.values.insert(kjt.values.end(), ids.begin(), ids.end());
  for (const auto& ids : b.item_ids) kjt.values.insert(kjt.values.end(), ids.begin(), ids.end());
  return kjt;
}

reference::EmbeddingGrads Grads(const Batch& b) {
  reference::EmbeddingGrads g;
  g.pooled.assign(static_cast<size_t>(b.world * b.local_batch * kDim), 0.25f);
  g.sequence.push_back(std::vector<float>(static_cast<size_t>(b.world * b.SeqIdsPerRank() * kDim), -0.5f));
  return g;
}

// The per-group tests' batch over 8 ranks and 64 rows: pooled id of sample b on rank r is row 8b + r
// (all distinct); the k-th sequence id of a rank is row 8(k mod 8) + k / 8, the same 16 rows on every
// rank. Each rank thus has 1 pooled and 2 sequence ids in every 8-row chunk, hence 8/M and 16/M in
// every row block of M = 8, 4, 2 (blocks of 64/M rows).
Batch RepeatingBatch() {
  Batch b;
  b.world = 8;
  b.rows = 64;
  b.local_batch = 8;
  b.seq_lengths = {1, 2, 3, 2, 1, 2, 3, 2};
  for (int r = 0; r < b.world; ++r) {
    std::vector<int64_t> user, item;
    for (int64_t s = 0; s < b.local_batch; ++s) user.push_back(8 * s + r);
    for (int64_t k = 0; k < b.SeqIdsPerRank(); ++k) item.push_back(8 * (k % 8) + k / 8);
    b.user_ids.push_back(user);
    b.item_ids.push_back(item);
  }
  return b;
}

// The sweep's batch over R ranks: K = lcm(R, 8) ids per rank and table, rows 2RK; rank r's k-th id
// is row r + 2Rk. No id repeats, half the rows stay untouched, and every rank has K/M ids in each
// row block of every M dividing K (blocks of 2RK/M rows); sequence lengths 0, 2, 1, 1 repeating.
Batch DistinctBatch(int world) {
  Batch b;
  b.world = world;
  const int64_t k_ids = std::lcm(int64_t{world}, int64_t{8});
  b.rows = 2 * world * k_ids;
  b.local_batch = k_ids;
  constexpr int64_t kLengths[4] = {0, 2, 1, 1};
  for (int64_t s = 0; s < b.local_batch; ++s) b.seq_lengths.push_back(kLengths[s % 4]);
  for (int r = 0; r < world; ++r) {
    std::vector<int64_t> ids;
    for (int64_t k = 0; k < k_ids; ++k) ids.push_back(r + 2 * world * k);
    b.user_ids.push_back(ids);
    b.item_ids.push_back(ids);
  }
  return b;
}

// Hosts of 4 GPUs where they split the world evenly, else one host: TWRW and GRID have host
// groups for every MP group of the sweep.
int GpusPerHost(int world) { return world % 4 == 0 ? 4 : world; }

// phase, op, group class, the group's members (ascending): one entry per process group that issues
// collectives of that kind, summed over its calls and members.
using Key = std::tuple<std::string, std::string, std::string, std::string>;
using Totals = std::map<Key, double>;

std::string Members(std::vector<int> group) {
  std::sort(group.begin(), group.end());
  return absl::StrJoin(group, ",");
}

// The simulator prices an average rank: a table-wise table's bytes are spread over every group,
// where the oracle puts them on its owner's group. So per group the two agree only when every group
// carries the same load (row-wise and data-parallel placements, 1D plans); otherwise they agree in
// total over the groups of a class.
enum class Granularity { kPerGroup, kPerClass };

Totals Normalized(const Totals& t, Granularity granularity) {
  Totals out;
  for (const auto& [k, v] : t) {
    if (v == 0.0) continue;  // a collective over one rank, or of nothing
    Key key = k;
    if (granularity == Granularity::kPerClass) std::get<3>(key) = "all groups";
    out[key] += v;
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

// Equal keys, and values equal up to the rounding of the average rank's fractions (M-1)/M.
void ExpectSameTotals(const Totals& got, const Totals& want, const std::string& got_name) {
  bool same = got.size() == want.size();
  for (auto g = got.begin(), w = want.begin(); same && g != got.end(); ++g, ++w) {
    same = g->first == w->first && std::fabs(g->second - w->second) <= 1e-9 * std::max(1.0, std::fabs(w->second));
  }
  EXPECT_TRUE(same) << got_name << ":\n" << Dump(got) << "oracle:\n" << Dump(want);
}

// ---- the oracle ----------------------------------------------------------------------------------

struct OracleRun {
  ShardingPlanSpec plan;
  Totals totals;
  double wire = 4;  // e_a of the report
};

OracleRun RunOracle(const nlohmann::json& plan_json, OptimizerKind optimizer, const Batch& batch, int gph) {
  const EmbeddingConfig config = OracleConfig(optimizer, batch.rows);
  absl::StatusOr<ShardingPlanSpec> plan = ParseShardingPlan(plan_json, PlanTablesOf(config), batch.world, gph);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return {};
  const reference::KeyedJaggedTensor kjt = Kjt(batch);
  const reference::EmbeddingGrads grads = Grads(batch);
  absl::StatusOr<reference::ShardedRun> run = reference::RunSharded(
      config, *plan, batch.world, gph, reference::InitEmbeddingState(config), kjt, &grads, 1, 1);
  EXPECT_TRUE(run.ok()) << run.status();
  if (!run.ok()) return {};
  OracleRun out;
  out.plan = *plan;
  out.wire = static_cast<double>(run->report.wire_bytes_per_element);
  for (const reference::CollectiveRecord& c : run->report.collectives) {
    double& t = out.totals[{reference::CommPhaseName(c.phase), reference::CollectiveOpName(c.op),
                            reference::GroupClassName(c.group_class), Members(c.group)}];
    for (int64_t b : c.send_bytes) t += static_cast<double>(b);
  }
  return out;
}

// ---- model/sharding's pattern on the oracle's batch ------------------------------------------------

size_t Distinct(const std::vector<const std::vector<int64_t>*>& lists) {
  std::set<int64_t> rows;
  for (const auto* ids : lists) rows.insert(ids->begin(), ids->end());
  return rows.size();
}

// Whose distinct-row counts a traffic row holds: the batch's (what the oracle moved), or the
// simulator's estimates from each rank's ids (step_template.cc: U = M nu, V3's touched rows = nu).
enum class DistinctRows { kMeasured, kSimulatorEstimate };

// Every rank's traffic of table t (0 user, 1 item) in the report's units (e_a = `wire`): [rank].
std::vector<TableTraffic> TrafficOf(const Batch& b, int table, bool data_parallel, int mp_group, double wire,
                                    DistinctRows rows) {
  using T = TrafficTerm;
  const int n = b.world / mp_group;
  const auto& per_rank = table == 0 ? b.user_ids : b.item_ids;
  std::vector<const std::vector<int64_t>*> all;
  for (const auto& ids : per_rank) all.push_back(&ids);
  const double world_rows = static_cast<double>(Distinct(all));
  std::vector<double> group_rows(n);  // MP group rho = ranks {m*N + rho}
  for (int rho = 0; rho < n; ++rho) {
    std::vector<const std::vector<int64_t>*> group;
    for (int m = 0; m < mp_group; ++m) group.push_back(&per_rank[m * n + rho]);
    group_rows[rho] = static_cast<double>(Distinct(group));
  }
  std::vector<TableTraffic> out;
  for (int r = 0; r < b.world; ++r) {
    const double bags = static_cast<double>(b.local_batch), ids = static_cast<double>(per_rank[r].size());
    TableTraffic x{};
    x[static_cast<int>(T::kOne)] = 1;
    x[static_cast<int>(T::kBags)] = bags;
    x[static_cast<int>(T::kIds)] = ids;
    x[static_cast<int>(T::kKjt)] = 4.0 * bags + 8.0 * ids;
    x[static_cast<int>(T::kPooled)] = table == 0 ? bags * kDim * wire : 0.0;
    x[static_cast<int>(T::kSequence)] = table == 1 ? ids * kDim * wire : 0.0;
    if (rows == DistinctRows::kMeasured) {
      x[static_cast<int>(T::kMpUniqueRows)] = group_rows[r % n];
      // A touched row lives in one row block of one MP position, in every position for a DP table:
      // summed over positions, the positions' touched rows are world_rows (DP: M world_rows).
      x[static_cast<int>(T::kShardTouchedRows)] = data_parallel ? world_rows : world_rows / mp_group;
    } else {
      x[static_cast<int>(T::kMpUniqueRows)] = mp_group * ids;
      x[static_cast<int>(T::kShardTouchedRows)] = ids;
    }
    out.push_back(x);
  }
  return out;
}

const char* PhaseName(CommPhase p) {
  switch (p) {
    case CommPhase::kForward: return "fwd";
    case CommPhase::kBackward: return "bwd";
    case CommPhase::kSync: return "sync";
  }
  return "?";
}

// The share of S a member sends in the report's direct-exchange convention.
double ReportShare(const std::string& op, double p) {
  if (op == "all_gather" || op == "reduce_scatter") return (p - 1) / p;
  if (op == "all_reduce") return 2 * (p - 1) / p;
  return 1.0;
}

// Per group class: the pattern's bytes summed over every rank's traffic.
Totals PatternTotals(const ShardingPlanSpec& plan, OptimizerKind optimizer, const Batch& b, int gph, double wire,
                     DistinctRows rows) {
  const int M = MpGroupSize(plan, b.world), N = ReplicaCount(plan, b.world);
  absl::StatusOr<int> g = HostGroupPositions(M, N, gph);
  const CommWorld world{M, N, g.ok() ? *g : 1};
  const EmbeddingConfig config = OracleConfig(optimizer, b.rows);
  Totals totals;
  for (int t = 0; t < 2; ++t) {
    const TableConfig& tc = config.tables[t];
    const std::vector<TableTraffic> traffic =
        TrafficOf(b, t, plan.tables[t].type == ShardingType::kDataParallel, M, wire, rows);
    const CommTable table{tc.rows, tc.dim, tc.dtype == ElementType::kFloat32 ? 4.0 : 2.0, optimizer};
    for (const CommCall& call : TableCommPattern(plan.tables[t], table, plan, world)) {
      const std::string op = CollectiveName(call.op);
      const char* cls = call.group_class == CommGroupClass::kSparseMp        ? "sparse-mp"
                        : call.group_class == CommGroupClass::kSparseReplica ? "sparse-replica"
                                                                             : "sparse-intra";
      double& total = totals[{PhaseName(CommSitePhase(call.site)), op, cls, "all groups"}];
      for (const TableTraffic& x : traffic) total += call.bytes.Eval(x) * ReportShare(op, call.size);
    }
  }
  return totals;
}

// ---- the simulator -------------------------------------------------------------------------------

bool CarriesActivations(const std::string& task) {
  return absl::StartsWith(task, "sparse.emb_a2a") || absl::StartsWith(task, "sparse.pooled_rs") ||
         absl::StartsWith(task, "sparse.twrw_");
}

// Bytes every member sends, per key, as the simulator's template costs them on this batch, for the
// plan the oracle parsed.
Totals SimTotals(const ShardingPlanSpec& plan, OptimizerKind optimizer, const Batch& b, int gph, double oracle_wire) {
  auto m = sim::testing::ToyModel(1, 1e6, 1000);
  model::GraphTable user;
  user.name = "user";
  user.rows = b.rows;
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
  sim::Scenario s = sim::testing::ToyScenario(b.world, b.local_batch, m);
  s.cluster.gpus_per_host = gph;
  s.plan.sparse = plan;
  absl::StatusOr<sim::RankGroups> groups = sim::BuildRankGroups(s.plan, b.world);
  EXPECT_TRUE(groups.ok()) << groups.status();
  if (!groups.ok()) return {};
  absl::StatusOr<sim::StepTemplate> tpl = sim::BuildStepTemplate(s, *groups);
  EXPECT_TRUE(tpl.ok()) << tpl.status();
  if (!tpl.ok()) return {};
  // Tokens of sequence 0: its ids plus n_s CLS tokens per sample.
  const int64_t tokens = b.SeqIdsPerRank() + m->sequences[0].n_s * b.local_batch;
  std::vector<double> stats;
  for (int r = 0; r < b.world; ++r) {
    absl::StatusOr<std::vector<double>> row = sim::ExplicitStatsRow(tpl->layout, b.local_batch, {tokens});
    EXPECT_TRUE(row.ok()) << row.status();
    if (!row.ok()) return {};
    stats.insert(stats.end(), row->begin(), row->end());
  }
  absl::StatusOr<std::vector<sim::SparseCollectiveBytes>> calls = sim::SparseStepBytes(*tpl, stats, b.world);
  EXPECT_TRUE(calls.ok()) << calls.status();
  if (!calls.ok()) return {};
  Totals totals;
  for (const sim::SparseCollectiveBytes& c : *calls) {
    const std::string op(sim::CollectiveOpName(c.op));
    double share = ReportShare(op, static_cast<double>(c.group.size()));
    if (CarriesActivations(c.task)) share *= oracle_wire / sim::kWireBytesPerActivation;
    double& t = totals[{c.phase, op, std::string(sim::GroupClassName(c.group_class)), Members(c.group)}];
    for (double bytes : c.bytes) t += bytes * share;
  }
  return totals;
}

// ---- the checks ----------------------------------------------------------------------------------

// What ExpectBytes compares. Always: the oracle moves the pattern's bytes for the batch it ran, and
// the simulator's template moves the pattern's bytes for its own estimates of distinct rows (per
// group class, e_a converted). `simulator` also compares the simulator with the oracle directly, at
// `granularity`: where the estimates are exact or unused.
struct Check {
  bool simulator = true;
  Granularity granularity = Granularity::kPerClass;
};

void ExpectBytes(const nlohmann::json& plan_json, OptimizerKind optimizer, const Batch& batch, int gph,
                 const Check& check) {
  SCOPED_TRACE(absl::StrCat("R=", batch.world, " optimizer=", std::string(NameIn(kOptimizerKindNames, optimizer)), " plan=", plan_json.dump()));
  const OracleRun oracle = RunOracle(plan_json, optimizer, batch, gph);
  if (oracle.plan.tables.empty()) return;  // reported above
  const Totals oracle_per_class = Normalized(oracle.totals, Granularity::kPerClass);
  ExpectSameTotals(Normalized(PatternTotals(oracle.plan, optimizer, batch, gph, oracle.wire, DistinctRows::kMeasured),
                              Granularity::kPerClass),
                   oracle_per_class, "model/sharding pattern on the oracle's batch");
  const Totals sim = SimTotals(oracle.plan, optimizer, batch, gph, oracle.wire);
  ExpectSameTotals(Normalized(sim, Granularity::kPerClass),
                   Normalized(PatternTotals(oracle.plan, optimizer, batch, gph, oracle.wire,
                                            DistinctRows::kSimulatorEstimate),
                              Granularity::kPerClass),
                   "simulator vs the pattern on its estimates (as 'oracle' below)");
  if (check.simulator) {
    ExpectSameTotals(Normalized(sim, check.granularity), Normalized(oracle.totals, check.granularity), "simulator");
  }
}

// The per-group tests: 8 ranks, 2 hosts of 4, the batch with repeated sequence ids.
void ExpectSameBytes(const nlohmann::json& plan_json, OptimizerKind optimizer = OptimizerKind::kRowwiseAdagrad,
                     Granularity granularity = Granularity::kPerGroup) {
  ExpectBytes(plan_json, optimizer, RepeatingBatch(), 4, Check{true, granularity});
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
  auto m = sim::testing::ToyModel(1, 1e6, 1000);
  const sim::Scenario s = sim::testing::ToyScenario(8, 8, m);
  absl::StatusOr<sim::RankGroups> groups = sim::BuildRankGroups(s.plan, 8);
  ASSERT_TRUE(groups.ok()) << groups.status();
  absl::StatusOr<sim::StepTemplate> tpl = sim::BuildStepTemplate(s, *groups);
  ASSERT_TRUE(tpl.ok()) << tpl.status();
  const std::vector<double> short_stats(3, 1.0);
  EXPECT_FALSE(sim::SparseStepBytes(*tpl, short_stats, 8).ok());
  EXPECT_FALSE(sim::ExplicitStatsRow(tpl->layout, 8, {}).ok());
  EXPECT_FALSE(sim::ExplicitStatsRow(tpl->layout, -1, {16}).ok());
}

// TWRW and GRID: RS(g) of the M*pi buffer inside the table's host group only; the
// average rank carries g/M of the hosts' buffers (tables spread over the M/g hosts).
TEST(OracleBytes, TableRowWise) {
  ExpectSameBytes(Plan1D("TWRW"), OptimizerKind::kRowwiseAdagrad, Granularity::kPerClass);
}

TEST(OracleBytes, Grid) { ExpectSameBytes(Plan1D("GRID", 2), OptimizerKind::kSgd, Granularity::kPerClass); }

// DP: the dense gradient N_t * D_t * 4 of the sharding rules' DP row plus the per-row touch count N_t * 4
// the oracle all-reduces so that only looked-up rows update (reference/sharding/mp_group.h).
TEST(OracleBytes, DataParallel) { ExpectSameBytes(Plan1D("DP")); }

TEST(OracleBytes, TwoDimensionalRowWiseWithReplicaSync) {
  ExpectSameBytes({{"default", {{"type", "RW"}}}, {"mp_group", 4}});
}

TEST(OracleBytes, TwoDimensionalWithReplicaSync) {
  ExpectSameBytes({{"default", {{"type", "TW"}}}, {"tables", {{"item", {{"type", "RW"}}}}}, {"mp_group", 4}},
                  OptimizerKind::kRowwiseAdagrad, Granularity::kPerClass);
}

TEST(OracleBytes, TwoDimensionalWithoutStateSync) {
  ExpectSameBytes({{"default", {{"type", "RW"}}}, {"mp_group", 2}, {"state_sync", false}}, OptimizerKind::kSgd);
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

// V2 state sync with Adam tables: m and v, 8 * rows * D bytes per table.
TEST(OracleBytes, TwoDimensionalAdamStateSync) {
  ExpectSameBytes({{"default", {{"type", "RW"}}}, {"mp_group", 4}}, OptimizerKind::kAdam);
}

// Rowwise Adagrad on column shards (cw_state=shared) all-gathers the partial square sums, 4U bytes
// per shard (the sharding rules' CW row). On the batch with repeated sequence ids the simulator's U (the MP
// group's ids) overcounts: the oracle moves the pattern's bytes for the U it measured; on a batch
// without repeats the simulator moves the oracle's bytes.
TEST(OracleBytes, ColumnWiseWithRowwiseAdagrad) {
  ExpectBytes(Plan1D("CW", 2), OptimizerKind::kRowwiseAdagrad, RepeatingBatch(), 4, Check{false, {}});
  ExpectBytes(Plan1D("CW", 2), OptimizerKind::kRowwiseAdagrad, DistinctBatch(8), 4, Check{true, Granularity::kPerClass});
}

// V3 with gather=touched: the oracle gathers (and reduce-scatters) the rows of a shard that any MP
// group touches, each once ("only the U needed rows"): the pattern's bytes for the rows it
// measured. The simulator estimates them from the rank's own ids (the replica groups touching the
// same rows) and moves the pattern's bytes for that estimate.
TEST(OracleBytes, FullyShardedGatheringTouchedRows) {
  const nlohmann::json plan = {{"default", {{"type", "RW"}}}, {"mp_group", 4}, {"fully_sharded", true}, {"gather", "touched"}};
  ExpectBytes(plan, OptimizerKind::kRowwiseAdagrad, RepeatingBatch(), 4, Check{false, {}});
  ExpectBytes(plan, OptimizerKind::kRowwiseAdagrad, DistinctBatch(8), 4, Check{false, {}});
}

// ---- every sharding type for R in {1..8, 16, 64} ---------------------------------------------------

// Plans of one sharding type: 1D, and where R is even 2D with N = 2 (V2 with and without state sync,
// V3 gathering all or touched rows, keeping the gathered copy or not), CW and GRID with both
// cw_state; table "item" of TW plans row-wise (a mixed plan).
std::vector<nlohmann::json> PlansOf(const std::string& type, int world) {
  nlohmann::json d = {{"type", type}};
  if (type == "CW" || type == "GRID") d["shards"] = 2;
  std::vector<nlohmann::json> plans = {{{"default", d}}};
  if (type == "TW") plans.push_back({{"default", d}, {"tables", {{"item", {{"type", "RW"}}}}}});
  if (type == "CW" || type == "GRID") plans.push_back({{"default", d}, {"cw_state", "per_shard"}});
  if (world % 2 == 0) {
    const int m = world / 2;
    plans.push_back({{"default", d}, {"mp_group", m}});
    plans.push_back({{"default", d}, {"mp_group", m}, {"state_sync", false}});
    plans.push_back({{"default", d}, {"mp_group", m}, {"fully_sharded", true}});
    plans.push_back({{"default", d}, {"mp_group", m}, {"fully_sharded", true}, {"gather", "touched"}});
    plans.push_back({{"default", d}, {"mp_group", m}, {"fully_sharded", true}, {"keep_gathered", true}});
  }
  return plans;
}

class EveryShardingType : public ::testing::TestWithParam<int> {};

TEST_P(EveryShardingType, OracleMovesThePatternsBytesAndTheSimulatorPricesThem) {
  const int world = GetParam();
  const Batch batch = DistinctBatch(world);
  const int gph = GpusPerHost(world);
  for (const std::string type : {"DP", "TW", "RW", "CW", "TWRW", "GRID"}) {
    for (const nlohmann::json& plan : PlansOf(type, world)) {
      // The optimizer moves bytes in the V2 sync (its state) and on column shards (Adagrad's row
      // norms); elsewhere one is enough.
      const bool v2 = plan.contains("mp_group") && !plan.value("fully_sharded", false);
      const bool column_shards = type == "CW" || type == "GRID";
      std::vector<OptimizerKind> optimizers = {OptimizerKind::kRowwiseAdagrad};
      if (v2 || column_shards) optimizers = {OptimizerKind::kSgd, OptimizerKind::kRowwiseAdagrad, OptimizerKind::kAdam};
      for (OptimizerKind optimizer : optimizers) {
        // The simulator's estimate of V3's touched rows is its own ids: exact when N = 1 only.
        const bool estimated = plan.value("gather", std::string("all")) == "touched";
        ExpectBytes(plan, optimizer, batch, gph, Check{!estimated, Granularity::kPerClass});
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, EveryShardingType, ::testing::Values(1, 2, 3, 4, 5, 6, 7, 8, 16, 64),
                         [](const ::testing::TestParamInfo<int>& world) { return absl::StrCat("R", world.param); });

}  // namespace
}  // namespace gemtb
