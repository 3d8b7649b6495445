// Sharded embeddings: every sharding type over
// R = 1..8 virtual ranks is byte-identical to its exact reference: the unsharded oracle with the
// induced partition (1D), or N unsharded replicas averaged every k steps (2D, fully sharded 2D).
#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/sharding/sharding_plan_json.h"
#include "nlohmann/json.hpp"
#include "reference/sharding/sharded_executor.h"
#include "tests/embedding/sharding_cases.h"
#include "tests/testing/status_matchers.h"

namespace gemtb::reference {
namespace {

using ::gemtb::testing::StatusIs;
using ::testing::HasSubstr;
using namespace sharding_cases;  // NOLINT

constexpr int kSteps = 5;
constexpr int64_t kLocalBatch = 4;

// One table's entry of a plan.
struct TablePlan {
  std::string type;
  int shards = 0;  // CW, GRID
  int owner = -1;  // TW
};

nlohmann::json PlanJson(const EmbeddingConfig& config, const std::vector<TablePlan>& tables) {
  nlohmann::json plan;
  for (size_t t = 0; t < tables.size(); ++t) {
    nlohmann::json e = {{"type", tables[t].type}};
    if (tables[t].shards > 0) e["shards"] = tables[t].shards;
    if (tables[t].owner >= 0) e["owner"] = tables[t].owner;
    plan["tables"][config.tables[t].name] = e;
  }
  return plan;
}

// Written from the sharding rules, independently of the executor's InducedSumPartition: batch blocks are
// the M local batches; RW pools over M row blocks of ceil(N_t/M) rows, TWRW/GRID over g blocks of
// ceil(N_t/g) rows (g = MP-group positions per host); CW/GRID split the Adagrad norm over c shards.
SumPartition HandPartition(const EmbeddingConfig& config, const std::vector<TablePlan>& tables, int m, int g) {
  SumPartition p;
  p.batch_blocks.assign(m, kLocalBatch);
  for (size_t t = 0; t < tables.size(); ++t) {
    const int64_t rows = config.tables[t].rows;
    const std::string& type = tables[t].type;
    if (type == "RW") {
      p.pool_row_blocks.push_back({(rows + m - 1) / m, m});
    } else if (type == "TWRW" || type == "GRID") {
      p.pool_row_blocks.push_back({(rows + g - 1) / g, g});
    } else {
      p.pool_row_blocks.push_back({0, 1});
    }
    p.norm_col_shards.push_back(type == "CW" || type == "GRID" ? tables[t].shards : 1);
  }
  return p;
}

std::vector<TablePlan> Uniform(const EmbeddingConfig& config, const std::string& type, int r) {
  std::vector<TablePlan> out;
  for (size_t t = 0; t < config.tables.size(); ++t) {
    TablePlan p{type};
    if (type == "CW" || type == "GRID") p.shards = config.tables[t].dim % 3 == 0 ? 3 : (t % 2 == 0 ? 2 : 4);
    if (type == "TW" && t == 2) p.owner = r - 1;  // an explicit owner; the others default to t mod M
    out.push_back(p);
  }
  return out;
}

// Every table a different type.
std::vector<TablePlan> Mixed(int m) {
  return {{"DP"}, {"CW", 3}, {"RW"}, {"TWRW"}, {"GRID", 2}, {"TW", 0, m - 1}, {"RW"}};
}

ShardedRun RunPlan(const EmbeddingConfig& config, const ShardingPlanSpec& plan, int r, int gph, const Batch& batch,
                   int threads = 0, int steps = kSteps) {
  absl::StatusOr<ShardedRun> run =
      RunSharded(config, plan, r, gph, InitEmbeddingState(config), batch.kjt, &batch.grads, steps, threads);
  EXPECT_TRUE(run.ok()) << run.status();
  return run.ok() ? *std::move(run) : ShardedRun{};
}

void ExpectSameRun(const ShardedRun& a, const ShardedRun& b, const std::string& what) {
  ExpectSameOutput(a.output, b.output, what);
  ExpectSameState(a.state, b.state, what);
  ASSERT_EQ(a.replica_states.size(), b.replica_states.size()) << what;
  for (size_t i = 0; i < a.replica_states.size(); ++i) {
    ExpectSameState(a.replica_states[i], b.replica_states[i], what + " replica " + std::to_string(i));
  }
}

void Expect1DMatchesOracle(const EmbeddingConfig& config, const std::vector<TablePlan>& tables, int r, int gph,
                           const std::string& what) {
  const Batch batch = MakeBatch(config, kLocalBatch * r, 1000 + r);
  const ShardingPlanSpec plan = ParsePlan(config, PlanJson(config, tables), r, gph);
  const ShardedRun run = RunPlan(config, plan, r, gph, batch);
  const Reference ref = RunReference(config, InitEmbeddingState(config), batch, r, r,
                                     HandPartition(config, tables, r, std::min(gph, r)), kSteps, 0, false);
  ExpectSameOutput(run.output, ref.output, what);
  ExpectSameState(run.state, ref.replicas[0], what);
  EXPECT_EQ(run.replica_states.size(), 1u);
  EXPECT_EQ(run.state.step, kSteps);
}

// gpus_per_host for R ranks: hosts of 2 when R is even, else of 1 (every rank its own host).
int HostSize(int r) { return r % 2 == 0 ? 2 : 1; }

TEST(Sharding1D, EveryTypeMatchesOracleWithInducedPartition) {
  const EmbeddingConfig config = MakeConfig();
  for (const char* type : {"DP", "TW", "CW", "RW", "TWRW", "GRID"}) {
    for (int r = 1; r <= 8; ++r) {
      Expect1DMatchesOracle(config, Uniform(config, type, r), r, HostSize(r),
                            std::string(type) + " R=" + std::to_string(r));
    }
  }
}

TEST(Sharding1D, TableRowWiseOnWiderHostsMatchesOracle) {
  const EmbeddingConfig config = MakeConfig();
  for (const char* type : {"TWRW", "GRID"}) {
    for (auto [r, gph] : {std::pair{6, 3}, {8, 4}, {8, 8}, {3, 3}, {5, 8}}) {
      Expect1DMatchesOracle(config, Uniform(config, type, r), r, gph,
                            std::string(type) + " R=" + std::to_string(r) + " gpus_per_host=" + std::to_string(gph));
    }
  }
}

TEST(Sharding1D, MixedPlanMatchesOracle) {
  const EmbeddingConfig config = MakeConfig();
  for (int r = 1; r <= 8; ++r) Expect1DMatchesOracle(config, Mixed(r), r, HostSize(r), "mixed R=" + std::to_string(r));
}

TEST(Sharding1D, ComparisonSeesTheInducedPartition) {
  // The comparisons above are sensitive: without the induced partition (one block everywhere) the
  // oracle's bits differ from the sharded run's.
  const EmbeddingConfig config = MakeConfig();
  const int r = 4;
  const std::vector<TablePlan> tables = Uniform(config, "GRID", r);
  const Batch batch = MakeBatch(config, kLocalBatch * r, 1000 + r);
  const ShardedRun run = RunPlan(config, ParsePlan(config, PlanJson(config, tables), r, 2), r, 2, batch);
  const Reference plain =
      RunReference(config, InitEmbeddingState(config), batch, r, r, SumPartition{}, kSteps, 0, false);
  bool differs = !SameBytes(run.output.pooled, plain.output.pooled);
  for (size_t t = 0; t < config.tables.size(); ++t) {
    differs |= !SameBytes(run.state.tables[t].weights, plain.replicas[0].tables[t].weights);
  }
  EXPECT_TRUE(differs);
}

TEST(Sharding1D, ForwardOnlyMatchesOracleAndLeavesStateAlone) {
  const EmbeddingConfig config = MakeConfig();
  for (int r : {1, 3, 8}) {
    const std::vector<TablePlan> tables = Mixed(r);
    const Batch batch = MakeBatch(config, kLocalBatch * r, 7 + r);
    const ShardingPlanSpec plan = ParsePlan(config, PlanJson(config, tables), r, HostSize(r));
    const EmbeddingState initial = InitEmbeddingState(config);
    absl::StatusOr<ShardedRun> run = RunSharded(config, plan, r, HostSize(r), initial, batch.kjt, nullptr, 2);
    ASSERT_TRUE(run.ok()) << run.status();
    absl::StatusOr<EmbeddingOutput> want =
        EmbeddingForward(config, initial, batch.kjt, HandPartition(config, tables, r, HostSize(r)));
    ASSERT_TRUE(want.ok());
    ExpectSameOutput(run->output, *want, "forward only R=" + std::to_string(r));
    ExpectSameState(run->state, initial, "forward only R=" + std::to_string(r));
  }
}

TEST(Sharding1D, RankWithoutAnyIdMatchesOracle) {
  // Rank 1's local batch has no ids at all (its slice of a weighted KJT has no weights either).
  const EmbeddingConfig config = MakeConfig();
  const int r = 4;
  const Batch full = MakeBatch(config, kLocalBatch * r, 31);
  std::vector<int64_t> rank1;
  for (int64_t i = 0; i < kLocalBatch; ++i) rank1.push_back(kLocalBatch + i);
  const Batch batch = EmptySamples(config, full, rank1);
  for (const char* type : {"DP", "TW", "CW", "RW", "TWRW", "GRID"}) {
    const std::vector<TablePlan> tables = Uniform(config, type, r);
    const ShardedRun run = RunPlan(config, ParsePlan(config, PlanJson(config, tables), r, 2), r, 2, batch);
    const Reference ref = RunReference(config, InitEmbeddingState(config), batch, r, r,
                                       HandPartition(config, tables, r, 2), kSteps, 0, false);
    ExpectSameOutput(run.output, ref.output, type);
    ExpectSameState(run.state, ref.replicas[0], type);
  }
}

TEST(Sharding1D, CwPerShardStateMatchesShardLocalAdagrad) {
  // cw_state=per_shard (TorchRec): each column shard runs rowwise Adagrad over its own columns with
  // its own state. Reference: the oracle's G_r, then Adagrad applied slice by slice by hand.
  const EmbeddingConfig config = MakeConfig();
  for (int r = 1; r <= 4; ++r) {
    std::vector<TablePlan> tables = Uniform(config, "CW", r);
    nlohmann::json json = PlanJson(config, tables);
    json["cw_state"] = "per_shard";
    const Batch batch = MakeBatch(config, kLocalBatch * r, 300 + r);
    const ShardedRun run = RunPlan(config, ParsePlan(config, json, r, 1), r, 1, batch);
    SumPartition part = HandPartition(config, tables, r, 1);
    part.norm_col_shards.clear();
    EmbeddingState state = InitEmbeddingState(config);
    std::vector<std::vector<float>> shard_state(config.tables.size());
    for (size_t t = 0; t < config.tables.size(); ++t) {
      shard_state[t].assign(static_cast<size_t>(tables[t].shards * config.tables[t].rows), 0.0f);
    }
    EmbeddingOutput out;
    for (int s = 0; s < kSteps; ++s) {
      out = *EmbeddingForward(config, state, batch.kjt, part, 1);
      absl::StatusOr<std::vector<RowGradients>> g = EmbeddingRowGradients(config, batch.kjt, batch.grads, part);
      ASSERT_TRUE(g.ok());
      for (size_t t = 0; t < config.tables.size(); ++t) {
        const TableConfig& tc = config.tables[t];
        TableState& ts = state.tables[t];
        if (tc.optimizer.kind != OptimizerKind::kRowwiseAdagrad) {
          if (tc.optimizer.kind == OptimizerKind::kAdam)
            ts.adam_step = embedding::NextAdamStep(ts.adam_step, tc.optimizer);
          ApplyOptimizer(config, static_cast<int>(t), ts, (*g)[t], state.step, 1);
          continue;
        }
        const int c = tables[t].shards;
        const int64_t w = tc.dim / c;
        const bool sr = tc.stochastic_rounding && tc.dtype != ElementType::kFloat32;
        for (size_t k = 0; k < (*g)[t].rows.size(); ++k) {
          const int64_t row = (*g)[t].rows[k];
          for (int i = 0; i < c; ++i) {
            float* wr = ts.weights.data() + row * tc.dim + i * w;
            const float* gr = (*g)[t].grads.data() + k * tc.dim + i * w;
            const float sq = embedding::RowwiseAdagradSquareSum(wr, gr, w, tc.optimizer);
            embedding::RowwiseAdagradApply(wr, gr, w, sq, w, &shard_state[t][i * tc.rows + row], tc.optimizer);
            for (int64_t j = 0; j < w; ++j) {
              const int64_t col = i * w + j;
              wr[j] = embedding::StoreUpdated(
                  wr[j], tc.dtype, sr,
                  sr ? embedding::SrBits(config.seed, static_cast<int>(t), state.step, tc.dim, row, col) : 0);
            }
          }
        }
      }
      ++state.step;
    }
    const std::string what = "per_shard R=" + std::to_string(r);
    ExpectSameOutput(run.output, out, what);
    for (size_t t = 0; t < config.tables.size(); ++t) {
      EXPECT_TRUE(SameBytes(run.state.tables[t].weights, state.tables[t].weights)) << what << " table " << t;
      if (config.tables[t].optimizer.kind == OptimizerKind::kRowwiseAdagrad) {
        EXPECT_TRUE(SameBytes(run.per_shard_adagrad[t], shard_state[t])) << what << " table " << t;
      }
    }
  }
}

// (R, M) with N = R/M a power of two.
const std::vector<std::pair<int, int>> kTwoDShapes = {{2, 1}, {4, 2}, {4, 1}, {6, 3}, {8, 4}, {8, 2}, {8, 1}};

// gpus_per_host for 2D: hosts hold 2 positions of each MP group when M is even, else 1.
int HostSize2D(int r, int m) { return (m % 2 == 0 ? 2 : 1) * (r / m); }

void ExpectTwoDMatchesReplicas(const EmbeddingConfig& config, const std::vector<TablePlan>& tables, int r, int m, int k,
                               bool state_sync, const std::string& what, int gph = 0) {
  const int n = r / m;
  if (gph == 0) gph = HostSize2D(r, m);
  // MP-group positions per host: gph / N when N divides it, else 1 (hosts smaller than N).
  const int per_host = gph % n == 0 ? std::min(gph / n, m) : 1;
  nlohmann::json json = PlanJson(config, tables);
  json["mp_group"] = m;
  json["sync_period"] = k;
  json["state_sync"] = state_sync;
  const Batch batch = MakeBatch(config, kLocalBatch * r, 500 + r * 10 + m);
  const ShardedRun run = RunPlan(config, ParsePlan(config, json, r, gph), r, gph, batch);
  const Reference ref = RunReference(config, InitEmbeddingState(config), batch, r, m,
                                     HandPartition(config, tables, m, per_host), kSteps, k, state_sync);
  ExpectSameOutput(run.output, ref.output, what);
  ASSERT_EQ(run.replica_states.size(), static_cast<size_t>(n)) << what;
  for (int rho = 0; rho < n; ++rho) {
    ExpectSameState(run.replica_states[rho], ref.replicas[rho], what + " replica " + std::to_string(rho));
  }
  ExpectSameState(run.state, ref.replicas[0], what + " state");
}

TEST(Sharding2D, MixedPlanMatchesAveragedReplicas) {
  const EmbeddingConfig config = MakeConfig();
  for (auto [r, m] : kTwoDShapes) {
    for (int k : {1, 3}) {
      for (bool state_sync : {true, false}) {
        ExpectTwoDMatchesReplicas(config, Mixed(m), r, m, k, state_sync,
                                  "2D R=" + std::to_string(r) + " M=" + std::to_string(m) + " k=" + std::to_string(k) +
                                      (state_sync ? " state" : " weights only"));
      }
    }
  }
}

TEST(Sharding2D, EveryTypeMatchesAveragedReplicas) {
  const EmbeddingConfig config = MakeConfig();
  for (const char* type : {"DP", "TW", "CW", "RW", "TWRW", "GRID"}) {
    for (auto [r, m] : kTwoDShapes) {
      for (int k : {1, 3}) {
        ExpectTwoDMatchesReplicas(
            config, Uniform(config, type, m), r, m, k, true,
            std::string(type) + " 2D R=" + std::to_string(r) + " M=" + std::to_string(m) + " k=" + std::to_string(k));
      }
    }
  }
}

TEST(Sharding2D, TableRowWiseWithHostsSmallerThanTheReplicaGroupMatches) {
  // gpus_per_host < N: every MP-group position is on its own host (g = 1).
  const EmbeddingConfig config = MakeConfig();
  for (const char* type : {"TWRW", "GRID"}) {
    for (auto [r, m, gph] : {std::tuple{8, 2, 2}, {8, 2, 1}, {8, 4, 1}, {4, 2, 1}}) {
      ExpectTwoDMatchesReplicas(config, Uniform(config, type, m), r, m, 3, true,
                                std::string(type) + " 2D R=" + std::to_string(r) + " M=" + std::to_string(m) +
                                    " gpus_per_host=" + std::to_string(gph),
                                gph);
    }
  }
}

TEST(Sharding2D, RowsNoReplicaTouchesStayIdenticalForTwoAndFourReplicas) {
  // seqsum of N equal values / N is the value again for N = 2 and 4 (fp32 and narrower storage).
  const EmbeddingConfig config = MakeConfig();
  for (auto [r, m] : {std::pair{2, 1}, {4, 1}, {8, 2}, {8, 4}}) {
    nlohmann::json json = PlanJson(config, Mixed(m));
    json["mp_group"] = m;
    const Batch batch = MakeBatch(config, r, 77 + r);  // one sample per rank leaves rows untouched
    const ShardedRun run = RunPlan(config, ParsePlan(config, json, r, HostSize2D(r, m)), r, HostSize2D(r, m), batch);
    const EmbeddingState initial = InitEmbeddingState(config);
    KjtLayout layout;
    ASSERT_TRUE(ValidateKjt(batch.kjt, config, &layout).ok());
    int checked = 0;
    for (size_t t = 0; t < config.tables.size(); ++t) {
      const TableConfig& tc = config.tables[t];
      std::vector<bool> touched(static_cast<size_t>(tc.rows), false);
      for (size_t f = 0; f < layout.feature.size(); ++f) {
        if (config.features[layout.feature[f]].table != static_cast<int>(t)) continue;
        for (int64_t v = layout.offsets[f * batch.kjt.stride]; v < layout.offsets[(f + 1) * batch.kjt.stride]; ++v) {
          int64_t row = 0;
          if (embedding::IdToRow(batch.kjt.values[v], tc.hashing, tc.rows, tc.hash_seed, &row)) touched[row] = true;
          if (tc.bounds == BoundsMode::kRemap0) touched[0] = true;
        }
      }
      for (int64_t row = 0; row < tc.rows; ++row) {
        if (touched[row]) continue;
        const std::vector<float> a(run.state.tables[t].weights.begin() + row * tc.dim,
                                   run.state.tables[t].weights.begin() + (row + 1) * tc.dim);
        const std::vector<float> b(initial.tables[t].weights.begin() + row * tc.dim,
                                   initial.tables[t].weights.begin() + (row + 1) * tc.dim);
        EXPECT_TRUE(SameBytes(a, b)) << "R=" << r << " M=" << m << " table " << t << " row " << row;
        ++checked;
      }
    }
    EXPECT_GT(checked, 3) << "R=" << r << " M=" << m;
  }
}

void ExpectFullyShardedMatches(const EmbeddingConfig& config, int r, int m, const char* gather, bool keep,
                               const std::vector<TablePlan>& tables) {
  const int gph = HostSize2D(r, m);
  const std::string what = std::string("V3 R=") + std::to_string(r) + " M=" + std::to_string(m) + " gather=" + gather +
                           (keep ? " keep_gathered" : "");
  nlohmann::json v2 = PlanJson(config, tables);
  v2["mp_group"] = m;
  v2["sync_period"] = 1;
  v2["state_sync"] = false;
  nlohmann::json v3 = v2;
  v3["fully_sharded"] = true;
  v3["gather"] = gather;
  v3["keep_gathered"] = keep;
  const Batch batch = MakeBatch(config, kLocalBatch * r, 900 + r * 10 + m);
  const ShardedRun run3 = RunPlan(config, ParsePlan(config, v3, r, gph), r, gph, batch);
  const ShardedRun run2 = RunPlan(config, ParsePlan(config, v2, r, gph), r, gph, batch);
  ExpectSameRun(run3, run2, what + " vs V2");
  const Reference ref = RunReference(config, InitEmbeddingState(config), batch, r, m,
                                     HandPartition(config, tables, m, gph / (r / m)), kSteps, 1, false);
  ExpectSameOutput(run3.output, ref.output, what);
  for (int rho = 0; rho < r / m; ++rho) {
    ExpectSameState(run3.replica_states[rho], ref.replicas[rho], what + " replica " + std::to_string(rho));
  }
}

TEST(FullySharded2D, EqualsTwoDWithK1AndNoStateSync) {
  const EmbeddingConfig config = MakeConfig();
  for (auto [r, m] : kTwoDShapes) {
    for (bool keep : {false, true}) ExpectFullyShardedMatches(config, r, m, "all", keep, Mixed(m));
  }
  for (const char* type : {"DP", "TW", "CW", "RW", "TWRW", "GRID"}) {
    for (auto [r, m] : {std::pair{8, 4}, {8, 2}, {6, 3}, {8, 1}}) {
      ExpectFullyShardedMatches(config, r, m, "all", false, Uniform(config, type, m));
      if (r / m <= 4) ExpectFullyShardedMatches(config, r, m, "touched", true, Uniform(config, type, m));
    }
  }
}

TEST(FullySharded2D, TouchedGatherEqualsTwoDForUpToFourReplicas) {
  // gather=touched leaves rows no replica references out of the reduce-scatter; V2 averages them,
  // which returns them unchanged only while seqsum of N equal values / N is exact (N = 2, 4).
  const EmbeddingConfig config = MakeConfig();
  for (auto [r, m] : {std::pair{2, 1}, {4, 2}, {4, 1}, {6, 3}, {8, 4}, {8, 2}}) {
    for (bool keep : {false, true}) ExpectFullyShardedMatches(config, r, m, "touched", keep, Mixed(m));
  }
}

TEST(Sharding, BitsDoNotDependOnThreadCount) {
  const EmbeddingConfig config = MakeConfig();
  const int r = 8;
  const Batch batch = MakeBatch(config, kLocalBatch * r, 4242);
  std::vector<nlohmann::json> plans;
  plans.push_back(PlanJson(config, Mixed(8)));
  plans.push_back(PlanJson(config, Mixed(4)));
  plans.back()["mp_group"] = 4;
  plans.back()["sync_period"] = 2;
  plans.push_back(PlanJson(config, Mixed(2)));
  plans.back()["mp_group"] = 2;
  plans.back()["fully_sharded"] = true;
  plans.back()["gather"] = "touched";
  const int gph[] = {2, 4, 8};
  for (size_t i = 0; i < plans.size(); ++i) {
    const ShardingPlanSpec plan = ParsePlan(config, plans[i], r, gph[i]);
    const ShardedRun one = RunPlan(config, plan, r, gph[i], batch, 1);
    for (int threads : {2, 7, 16}) {
      const ShardedRun many = RunPlan(config, plan, r, gph[i], batch, threads);
      ExpectSameRun(many, one, plans[i].dump() + " threads=" + std::to_string(threads));
      EXPECT_EQ(many.report, one.report);
    }
  }
}

TEST(Sharding, BatchNotDivisibleByWorldSizeIsRejected) {
  const EmbeddingConfig config = MakeConfig();
  const Batch batch = MakeBatch(config, 10, 5);
  const ShardingPlanSpec plan = ParsePlan(config, PlanJson(config, Uniform(config, "RW", 4)), 4, 1);
  EXPECT_THAT(
      RunSharded(config, plan, 4, 1, InitEmbeddingState(config), batch.kjt, &batch.grads),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("kjt.stride: B=10 is not divisible by world_size 4")));
  EmbeddingGrads short_grads = batch.grads;
  short_grads.pooled.pop_back();
  const ShardingPlanSpec plan2 = ParsePlan(config, PlanJson(config, Uniform(config, "RW", 2)), 2, 1);
  EXPECT_THAT(RunSharded(config, plan2, 2, 1, InitEmbeddingState(config), batch.kjt, &short_grads),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("grads.pooled")));
}

}  // namespace
}  // namespace gemtb::reference
