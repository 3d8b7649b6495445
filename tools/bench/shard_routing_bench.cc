// The host side of the GPU's sharded tables per step (gpu/embedding/shard_routing.h), on the CPU:
// a rank's RouteIds of its local batch, and a holder's ReceiveIds of every source's ids, for the
// small config's generator batches at local batch 256 on 4 ranks, every table under one sharding
// type (TW, RW, CW with 2 column shards). The GPU trainer pays this on the host every step before
// the ids' all-to-all (RouteIds) and after it (ReceiveIds); the job's step times include it.
//
//   build/bin/shard_routing_bench --benchmark_format=json
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "gpu/embedding/kjt_check.h"
#include "gpu/embedding/kjt_of_batch.h"
#include "gpu/embedding/shard_routing.h"
#include "model/data/data_params_json.h"
#include "model/data/generator.h"
#include "model/data/parallel_batch.h"
#include "model/data/shape_from_config.h"
#include "model/description/gem_geometry.h"
#include "model/description/model_config.h"
#include "model/sharding/sharding_plan_json.h"

namespace gemtb {
namespace {

namespace ge = gpu::embedding;

constexpr int kRanks = 4;
constexpr int64_t kLocalBatch = 256;

struct Setup {
  EmbeddingConfig emb;
  ShardingPlanSpec plan;
  std::vector<data::Batch> local;  // each rank's batch
};

Setup MakeSetup(const std::string& type) {
  Setup s;
  const model::ModelConfig config = model::LoadModelConfig("small").value();
  s.emb = model::GemEmbeddingConfig(config, 0.01f, 1);
  nlohmann::json plan = {{"default", {{"type", type}}}};
  if (type == "CW") plan["default"]["shards"] = 2;
  s.plan = ParseShardingPlan(plan, PlanTablesOf(s.emb), kRanks, kRanks).value();
  const data::DataParams params = data::LoadDataParams("small").value();
  const data::Generator gen = data::Generator::Create(params, data::ShapeFromConfig(config)).value();
  for (int r = 0; r < kRanks; ++r) s.local.push_back(data::GenerateBatchParallel(gen, 1, r * kLocalBatch, kLocalBatch));
  return s;
}

const char* kTypes[] = {"TW", "RW", "CW"};

// Rank 0's RouteIds (after validating its batch, as the module does).
void BM_RouteIds(benchmark::State& state) {
  const Setup s = MakeSetup(kTypes[state.range(0)]);
  const ge::ShardRouting routing = ge::ShardRouting::Create(s.emb, s.plan, kRanks, kRanks, 0, kLocalBatch).value();
  int64_t ids = 0;
  for (auto _ : state) {
    const ge::KjtLayout layout = ge::CheckKjt(s.emb, ge::KjtViewOfBatch(s.local[0])).value();
    const ge::RequesterStep step = routing.RouteIds(ge::KjtViewOfBatch(s.local[0]), layout).value();
    benchmark::DoNotOptimize(step.sequence_runs.data());
    ids = static_cast<int64_t>(s.local[0].values.size());
  }
  state.SetLabel(kTypes[state.range(0)]);
  state.counters["ids"] = static_cast<double>(ids);
}
BENCHMARK(BM_RouteIds)->DenseRange(0, 2)->Unit(benchmark::kMillisecond);

// Holder 0's ReceiveIds of every rank's ids.
void BM_ReceiveIds(benchmark::State& state) {
  const Setup s = MakeSetup(kTypes[state.range(0)]);
  std::vector<ge::RequesterStep> sent;
  std::vector<absl::Span<const uint8_t>> received;
  for (int r = 0; r < kRanks; ++r) {
    const ge::ShardRouting routing = ge::ShardRouting::Create(s.emb, s.plan, kRanks, kRanks, r, kLocalBatch).value();
    const ge::KjtLayout layout = ge::CheckKjt(s.emb, ge::KjtViewOfBatch(s.local[static_cast<size_t>(r)])).value();
    sent.push_back(routing.RouteIds(ge::KjtViewOfBatch(s.local[static_cast<size_t>(r)]), layout).value());
  }
  for (const ge::RequesterStep& step : sent) received.push_back(step.IdBytesTo(0));
  const ge::ShardRouting holder = ge::ShardRouting::Create(s.emb, s.plan, kRanks, kRanks, 0, kLocalBatch).value();
  for (auto _ : state) {
    const ge::HolderStep step = holder.ReceiveIds(received).value();
    benchmark::DoNotOptimize(step.runs.data());
  }
  state.SetLabel(kTypes[state.range(0)]);
}
BENCHMARK(BM_ReceiveIds)->DenseRange(0, 2)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gemtb

BENCHMARK_MAIN();
