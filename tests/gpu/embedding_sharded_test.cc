// The sharded embedding module on the GPU (gpu/embedding/sharded_tbe.h) against the oracle's
// sharded executor: M virtual positions on one GPU, each a host thread with its own module, the
// all-to-alls carried by device copies between them. Every position's output and, after each step,
// every shard's table and optimizer state equal the oracle's byte for byte, for TW, RW, CW (shared
// and per-shard Adagrad state), TWRW and GRID, over fp32, bf16 and fp16 tables with stochastic
// rounding. Skipped without an sm_90 GPU.
#include <cuda_runtime_api.h>

#include <cstring>
#include <deque>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gpu/common/device_buffer.h"
#include "gpu/embedding/api.h"
#include "gpu/embedding/sharded_tbe.h"
#include "gtest/gtest.h"
#include "model/description/gem_geometry.h"
#include "model/description/model_config.h"
#include "model/sharding/sharding_plan_json.h"
#include "reference/sharding/sharded_executor.h"
#include "tests/embedding/sharding_cases.h"
#include "tests/gpu/in_process_shard_exchange.h"

namespace gemtb::gpu::embedding {
namespace {

using reference::sharding_cases::Batch;
using reference::sharding_cases::MakeBatch;
using reference::sharding_cases::MakeConfig;
using reference::sharding_cases::ParsePlan;
using reference::sharding_cases::SubBatch;
using reference::sharding_cases::UniformPlanJson;

constexpr int64_t kLocalBatch = 4;
constexpr int kSteps = 2;

// Column shards of a multiple of 4 columns, at most `max_shards` (shared Adagrad state needs no
// more shards than positions).
ShardingPlanSpec Plan(const EmbeddingConfig& config, const std::string& type, const char* cw_state, int m, int gph,
                      const nlohmann::json& extra = nlohmann::json::object(), int64_t max_shards = 3) {
  nlohmann::json plan = extra;
  plan.update(UniformPlanJson(config, type, max_shards));
  plan["cw_state"] = cw_state;
  return ParsePlan(config, plan, m, gph);
}

bool SameBits(const std::vector<float>& a, const float* b) {
  return a.empty() || std::memcmp(a.data(), b, a.size() * sizeof(float)) == 0;
}

// Runs kSteps steps on the oracle and on m virtual ranks and compares everything: each rank's output
// rows, and each rank's shards against its replica's state in the oracle (1D: the one replica).
// With `semi_sync`, batch s + 1's forward comes between batch s's forward and backward (the
// semi-synchronous pipeline): the oracle's executor holds two batches, the module swaps them.
void ExpectModuleMatchesOracle(const EmbeddingConfig& config, const ShardingPlanSpec& plan, int m, int gph,
                               const std::string& what, bool semi_sync = false) {
  SCOPED_TRACE(what);
  const reference::EmbeddingState initial = reference::InitEmbeddingState(config);
  absl::StatusOr<std::unique_ptr<reference::ShardedExecutor>> oracle =
      reference::ShardedExecutor::Create(config, plan, m, gph, initial);
  ASSERT_TRUE(oracle.ok()) << oracle.status();
  std::vector<Batch> batches;
  for (int s = 0; s < kSteps; ++s) batches.push_back(MakeBatch(config, m * kLocalBatch, 7000 + 10 * s + m));
  std::vector<reference::EmbeddingOutput> want_out;
  auto oracle_forward = [&](int s) {
    absl::StatusOr<reference::EmbeddingOutput> out = (*oracle)->Forward(batches[static_cast<size_t>(s)].kjt);
    ASSERT_TRUE(out.ok()) << out.status();
    want_out.push_back(*std::move(out));
  };
  if (semi_sync) oracle_forward(0);
  for (int s = 0; s < kSteps; ++s) {
    if (!semi_sync) oracle_forward(s);
    if (semi_sync && s + 1 < kSteps) oracle_forward(s + 1);
    ASSERT_TRUE((*oracle)->Backward(batches[static_cast<size_t>(s)].grads).ok());
  }
  absl::StatusOr<reference::ShardedRun> want = (*oracle)->Result();
  ASSERT_TRUE(want.ok()) << want.status();

  gpu::test::InProcessShardGroup group(m);
  std::vector<std::string> errors(static_cast<size_t>(m));
  std::vector<std::vector<HostTable>> shards(static_cast<size_t>(m));
  std::vector<std::unique_ptr<ShardedDeviceTbe>> modules(static_cast<size_t>(m));
  std::vector<std::thread> threads;
  for (int p = 0; p < m; ++p) {
    threads.emplace_back([&, p] {
      gpu::test::InProcessShardExchange exchange(group, p);
      std::string& error = errors[static_cast<size_t>(p)];
      absl::StatusOr<std::unique_ptr<ShardedDeviceTbe>> module =
          ShardedDeviceTbe::Create(config, plan, gph, kLocalBatch, &exchange, {}, initial.step);
      if (!module.ok()) {
        error = module.status().ToString();
        return;  // every position fails the same way (the same plan): nobody waits at a barrier
      }
      auto local_batch = [&](int s) {
        std::vector<int64_t> samples;
        for (int64_t i = 0; i < kLocalBatch; ++i) samples.push_back(p * kLocalBatch + i);
        return SubBatch(config, batches[static_cast<size_t>(s)], samples);
      };
      auto forward = [&](int s) -> bool {
        const Batch local = local_batch(s);
        KjtView v;
        v.keys = local.kjt.keys;
        v.batch = kLocalBatch;
        v.lengths = local.kjt.lengths;
        v.values = local.kjt.values;
        v.weights = local.kjt.weights;
        v.has_weights = true;
        if (absl::Status st = (*module)->Forward(v); !st.ok()) {
          error = st.ToString();
          return false;
        }
        absl::StatusOr<DeviceOutputView> out = (*module)->DeviceOutput();
        std::vector<float> pooled(static_cast<size_t>(kLocalBatch * out->pooled_width));
        cudaMemcpy(pooled.data(), out->pooled, pooled.size() * sizeof(float), cudaMemcpyDeviceToHost);
        const reference::EmbeddingOutput& w = want_out[static_cast<size_t>(s)];
        if (!SameBits(pooled, w.pooled.data() + p * kLocalBatch * out->pooled_width)) {
          error += "pooled output differs at step " + std::to_string(s) + "; ";
        }
        return true;
      };
      auto backward = [&](int s) -> bool {
        // Gradients: this position's rows of the global ones, uploaded.
        const Batch local = local_batch(s);
        DeviceArray<float> d_pooled;
        std::deque<DeviceArray<float>> d_seq;
        std::vector<const float*> seq_ptrs;
        (void)d_pooled.Upload(local.grads.pooled, "pooled gradient");
        for (const std::vector<float>& g : local.grads.sequence) {
          d_seq.emplace_back();
          (void)d_seq.back().Upload(g, "sequence gradient");
          seq_ptrs.push_back(d_seq.back().get());
        }
        if (absl::Status st = (*module)->Backward(d_pooled.get(), seq_ptrs); !st.ok()) {
          error = st.ToString();
          return false;
        }
        return true;
      };
      auto swap = [&]() -> bool {
        if (absl::Status st = (*module)->SwapBatch(); !st.ok()) {
          error = st.ToString();
          return false;
        }
        return true;
      };
      if (semi_sync && !forward(0)) return;
      for (int s = 0; s < kSteps; ++s) {
        if (!semi_sync && !forward(s)) return;
        const bool ahead = semi_sync && s + 1 < kSteps;
        if (ahead && !(swap() && forward(s + 1) && swap())) return;
        if (!backward(s)) return;
        if (ahead && !swap()) return;
      }
      absl::StatusOr<std::vector<HostTable>> down = (*module)->DownloadShards();
      if (!down.ok()) {
        error = down.status().ToString();
        return;
      }
      shards[static_cast<size_t>(p)] = *std::move(down);
      modules[static_cast<size_t>(p)] = *std::move(module);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int p = 0; p < m; ++p)
    ASSERT_TRUE(errors[static_cast<size_t>(p)].empty()) << "position " << p << ": " << errors[static_cast<size_t>(p)];
  // Every shard's rectangle against the oracle's reassembled tables of the rank's replica.
  const int replicas = m / MpGroupSize(plan, m);
  ASSERT_EQ(want->replica_states.size(), static_cast<size_t>(replicas));
  for (int p = 0; p < m; ++p) {
    const ShardRouting& routing = modules[static_cast<size_t>(p)]->routing();
    const reference::EmbeddingState& replica = want->replica_states[static_cast<size_t>(p % replicas)];
    for (size_t i = 0; i < routing.held().size(); ++i) {
      const HeldShard& h = routing.held()[i];
      const Shard& s = routing.layout().shards[static_cast<size_t>(h.shard)];
      const TableConfig& tc = config.tables[static_cast<size_t>(h.table)];
      const reference::TableState& e = replica.tables[static_cast<size_t>(h.table)];
      const HostTable& got = shards[static_cast<size_t>(p)][i];
      for (int64_t r = 0; r < s.rows(); ++r) {
        for (int64_t c = 0; c < s.cols(); ++c) {
          const size_t wi = static_cast<size_t>((s.row_begin + r) * tc.dim + s.col_begin + c);
          const size_t gi = static_cast<size_t>(r * s.cols() + c);
          EXPECT_EQ(std::memcmp(&got.weights[gi], &e.weights[wi], 4), 0)
              << "table " << h.table << " row " << s.row_begin + r << " column " << s.col_begin + c;
          if (!e.adam_m.empty()) {
            EXPECT_EQ(std::memcmp(&got.adam_m[gi], &e.adam_m[wi], 4), 0) << "Adam m, table " << h.table;
            EXPECT_EQ(std::memcmp(&got.adam_v[gi], &e.adam_v[wi], 4), 0) << "Adam v, table " << h.table;
          }
        }
        if (!got.adagrad.empty()) {
          const std::vector<float>& per_shard = want->per_shard_adagrad.empty()
                                                    ? std::vector<float>{}
                                                    : want->per_shard_adagrad[static_cast<size_t>(h.table)];
          const float expect = per_shard.empty()
                                   ? e.adagrad[static_cast<size_t>(s.row_begin + r)]
                                   : per_shard[static_cast<size_t>(s.col_shard * tc.rows + s.row_begin + r)];
          EXPECT_EQ(std::memcmp(&got.adagrad[static_cast<size_t>(r)], &expect, 4), 0)
              << "Adagrad, table " << h.table << " row " << s.row_begin + r;
        }
      }
    }
  }
}

TEST(EmbeddingSharded, EveryOneDimensionalTypeEqualsTheOraclesShardedExecutor) {
  if (absl::Status s = EmbeddingDeviceAvailable(); !s.ok()) GTEST_SKIP() << s.message();
  const EmbeddingConfig config = MakeConfig();
  for (const char* type : {"TW", "RW", "CW", "TWRW", "GRID"}) {
    for (int m : {2, 4}) {
      ExpectModuleMatchesOracle(config, Plan(config, type, "per_shard", m, 2), m, 2,
                                std::string(type) + " per_shard M=" + std::to_string(m));
    }
  }
  // Shared Adagrad state: no position holds two column shards of one row block (c <= M; GRID: c <= hosts).
  ExpectModuleMatchesOracle(config, Plan(config, "CW", "shared", 4, 2), 4, 2, "CW shared M=4");
  ExpectModuleMatchesOracle(config, Plan(config, "CW", "shared", 3, 1), 3, 1, "CW shared M=3");
  ExpectModuleMatchesOracle(config, Plan(config, "GRID", "shared", 4, 1), 4, 1, "GRID shared M=4 hosts of 1");
}

// The semi-synchronous pipeline's order (the next batch forwarded between a batch's forward and
// backward, the module swapping them) under 1D plans and V2; V3 refuses the swap.
TEST(EmbeddingSharded, SemiSynchronousOrderEqualsTheOraclesShardedExecutor) {
  if (absl::Status s = EmbeddingDeviceAvailable(); !s.ok()) GTEST_SKIP() << s.message();
  const EmbeddingConfig config = MakeConfig();
  for (const char* type : {"TW", "RW", "CW", "TWRW"}) {
    ExpectModuleMatchesOracle(config, Plan(config, type, "per_shard", 4, 2), 4, 2,
                              std::string(type) + " per_shard M=4, semi-sync", true);
  }
  ExpectModuleMatchesOracle(config, Plan(config, "CW", "shared", 4, 2), 4, 2, "CW shared M=4, semi-sync", true);
  ExpectModuleMatchesOracle(config, Plan(config, "RW", "shared", 4, 2, {{"mp_group", 2}}, 2), 4, 2,
                            "RW V2 k=1, semi-sync", true);
}

// 2D plans on 4 ranks (M = 2 positions, N = 2 replicas): V2 syncing every step and every second
// step (with and without the optimizer state), and V3 (fully sharded) with and without the
// forward's gathered copy kept, and gathering only the rows the step's ids touch.
TEST(EmbeddingSharded, TwoDimensionalPlansEqualTheOraclesShardedExecutor) {
  if (absl::Status s = EmbeddingDeviceAvailable(); !s.ok()) GTEST_SKIP() << s.message();
  const EmbeddingConfig config = MakeConfig();
  const std::vector<std::pair<std::string, nlohmann::json>> modes = {
      {"V2 k=1", {{"mp_group", 2}}},
      {"V2 k=2 no state sync", {{"mp_group", 2}, {"sync_period", 2}, {"state_sync", false}}},
      {"V3", {{"mp_group", 2}, {"fully_sharded", true}}},
      {"V3 keep_gathered", {{"mp_group", 2}, {"fully_sharded", true}, {"keep_gathered", true}}},
      {"V3 gather=touched", {{"mp_group", 2}, {"fully_sharded", true}, {"gather", "touched"}}},
  };
  for (const auto& [name, extra] : modes) {
    for (const char* type : {"TW", "RW", "CW"}) {
      ExpectModuleMatchesOracle(config, Plan(config, type, "shared", 4, 2, extra, 2), 4, 2,
                                std::string(type) + " " + name);
    }
  }
}

// A plan the module does not run is a named error before anything moves.
TEST(EmbeddingSharded, PlansItDoesNotRunAreNamedErrors) {
  const EmbeddingConfig config = MakeConfig();
  absl::StatusOr<ShardRouting> cw = ShardRouting::Create(config, Plan(config, "CW", "shared", 2, 2), 2, 2, 0, 4);
  ASSERT_FALSE(cw.ok());
  EXPECT_NE(cw.status().message().find("two column shards"), std::string::npos) << cw.status();
  absl::StatusOr<ShardRouting> dp = ShardRouting::Create(config, Plan(config, "DP", "shared", 2, 2), 2, 2, 0, 4);
  ASSERT_FALSE(dp.ok());
  EXPECT_NE(dp.status().message().find("DP"), std::string::npos) << dp.status();
  // The plan's check alone gives the same errors.
  EXPECT_EQ(ShardRouting::CheckedLayout(config, Plan(config, "CW", "shared", 2, 2), 2, 2).status(), cw.status());
  EXPECT_EQ(ShardRouting::CheckedLayout(config, Plan(config, "DP", "shared", 2, 2), 2, 2).status(), dp.status());
  // What it runs: every 2D mode of the test below is a valid routing.
  for (const nlohmann::json& extra :
       {nlohmann::json{{"mp_group", 2}}, nlohmann::json{{"mp_group", 2}, {"fully_sharded", true}}}) {
    absl::StatusOr<ShardRouting> ok =
        ShardRouting::Create(config, Plan(config, "CW", "shared", 4, 2, extra, 2), 4, 2, 1, 4);
    ASSERT_TRUE(ok.ok()) << ok.status();
    // What a checkpoint names a position's shards by: its held shards' places and sizes.
    const std::vector<HeldShardShape> shapes = ShardRouting::HeldShapes(ok->layout(), 1);
    ASSERT_EQ(shapes.size(), ok->held().size());
    for (size_t i = 0; i < shapes.size(); ++i) {
      EXPECT_EQ(shapes[i].shard, ok->held()[i].shard);
      EXPECT_EQ(shapes[i].table, ok->held()[i].table);
      EXPECT_EQ(shapes[i].rows, ok->held()[i].config.tables[0].rows);
      EXPECT_EQ(shapes[i].cols, ok->held()[i].config.tables[0].dim);
    }
  }
}

// The plans the device scripts run (tools/bench/plans) route the tiny config's tables on 2 and 4 ranks.
TEST(EmbeddingSharded, TheDeviceScriptsPlansRouteTheTinyConfig) {
  absl::StatusOr<gemtb::model::ModelConfig> config = gemtb::model::LoadModelConfig("tiny");
  ASSERT_TRUE(config.ok()) << config.status();
  const EmbeddingConfig emb = gemtb::model::GemEmbeddingConfig(*config, 0.01f, 1);
  for (const char* name : {"tiny_mixed_1d", "tiny_fully_sharded_2d"}) {
    const std::string path = std::string(GEMTB_SOURCE_DIR) + "/tools/bench/plans/" + name + ".json";
    std::ifstream in(path);
    ASSERT_TRUE(in) << path;
    const nlohmann::json json = nlohmann::json::parse(in);
    for (int world : {2, 4}) {
      absl::StatusOr<ShardingPlanSpec> plan = ParseShardingPlan(json, PlanTablesOf(emb), world, world);
      ASSERT_TRUE(plan.ok()) << name << ": " << plan.status();
      for (int p = 0; p < MpGroupSize(*plan, world); ++p) {
        absl::StatusOr<ShardRouting> routing = ShardRouting::Create(emb, *plan, world, world, p, 16);
        EXPECT_TRUE(routing.ok()) << name << " on " << world << " ranks, position " << p << ": " << routing.status();
      }
    }
  }
}

}  // namespace
}  // namespace gemtb::gpu::embedding
