// Step-simulation speed: one step of the gem-scale job must simulate in
// <= 0.25 s on one core at 4,096 ranks and <= 1 s at 16,384. The scenario is built in code after
// gem-default: gem-scale model, local batch 1,024, FSDP and sparse MP groups of 256, 2-way
// EP with 16-way expert FSDP, fully sharded 2D sparse, BBS, SM-free, TorchRec's semi-synchronous
// pipeline (plan.pipeline.sparse_ahead = 1), 3-tier H200 cluster, noise on.
// Before timing, each size is checked once: every step finished, the step time is positive and the
// heaviest rank sits above the mean. Reported per simulated step: CPU seconds of this process
// ("cpu_s_per_step", the figure the speed bounds apply to: one core) and wall seconds ("s_per_step", inflated when
// the machine is shared), plus events per second.
//
//   build/bin/sim_step_bench --benchmark_filter=SimStep
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <memory>

#include "benchmark/benchmark.h"
#include "model/description/model_config.h"
#include "model/description/model_graph.h"
#include "sim/engine/simulate.h"

namespace gemtb::sim {
namespace {

std::shared_ptr<const model::ModelGraph> GemScale() {
  static std::shared_ptr<const model::ModelGraph> graph = [] {
    auto config = model::LoadModelConfig("gem-scale");
    if (!config.ok()) {
      std::fprintf(stderr, "gem-scale: %s\n", std::string(config.status().message()).c_str());
      std::abort();
    }
    auto g = model::ExpandModel(*config);
    if (!g.ok()) {
      std::fprintf(stderr, "gem-scale: %s\n", std::string(g.status().message()).c_str());
      std::abort();
    }
    return std::make_shared<const model::ModelGraph>(*std::move(g));
  }();
  return graph;
}

Scenario GemDefault(int world) {
  Scenario s;
  s.seed = 1;
  s.model = GemScale();
  Cluster& c = s.cluster;
  c.world_size = world;
  c.gpus_per_host = 8;
  c.zone_size = std::min(world, 2048);
  c.tiers = {Tier{"nvlink", 450e9, 370e9, 1.87e-6, 1}, Tier{"zone", 50e9, 48.5e9, 5e-6, 1},
             Tier{"cross_zone", 50e9, 48.5e9, 8e-6, 7}};
  c.gpu.peak_flops = {{"bf16", 989e12}, {"fp8", 1979e12}};
  c.gpu.hbm_bytes = 141e9;
  c.gpu.hbm_Bps = 4.8e12;
  c.calibration.efficiency.e_mem = 0.6;
  for (const char* k : {"linear", "interaction"}) c.calibration.efficiency.by_name_or_kind[k].points = {{0, 0.45}};
  c.calibration.efficiency.by_name_or_kind["attention"].points = {{0, 0.40}};
  Plan& p = s.plan;
  p.dense.fsdp_shard_group = std::min(world, 256);
  p.dense.ep_degree = 2;
  p.dense.expert_shard_group = 16;
  p.dense.dim_order = {"ep", "expert_shard", "shard", "replica"};
  p.sparse.mp_group = std::min(world, 256);
  p.sparse.fully_sharded = true;
  p.sparse.gather = GatherMode::kTouched;
  p.sparse.tables.assign(s.model->tables.size(), TableSharding{});  // every table TW
  p.collectives.library = "sm_free";
  p.pipeline.sparse_ahead = 1;
  s.batches.local_batch = 1024;
  for (int j = 0; j < 10; ++j) {
    LengthLaw law;
    law.kind = LengthLaw::Kind::kLognormal;
    law.mu = std::log(j < 8 ? 64.0 : 512.0);
    law.sigma = 1.5;
    law.min = 1;
    law.max = j < 8 ? 1024 : 16384;
    law.corr = 1;
    s.batches.features.push_back(law);
  }
  s.batches.assignment.policy = "bbs";
  s.batches.warmup_steps = 1;
  s.batches.measured_steps = 4;
  s.noise.step_sigma = 0.03;
  s.noise.collective_jitter_sigma = 0.05;
  return s;
}

void BM_SimStep(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  const Scenario s = GemDefault(world);
  SimOptions o;
  o.trace = false;
  o.threads = 1;
  const int steps = s.batches.warmup_steps + s.batches.measured_steps;
  {
    auto r = Simulate(s, Counterfactuals{}, o);
    if (!r.ok() || !(r->step_mean_s > 0)) {
      state.SkipWithError(r.ok() ? "non-positive step time" : std::string(r.status().message()).c_str());
      return;
    }
    state.counters["step_ms"] = r->step_mean_s * 1e3;
    state.counters["sr"] = r->scaling_ratio;
    state.counters["imbalance"] = r->imbalance;
    state.counters["events_per_step"] = static_cast<double>(r->events) / steps;
  }
  double seconds = 0, cpu = 0;
  uint64_t events = 0;
  auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_now();
    auto r = Simulate(s, Counterfactuals{}, o);
    cpu += cpu_now() - c0;
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    benchmark::DoNotOptimize(r);
    events += r.ok() ? r->events : 0;
  }
  state.counters["s_per_step"] = seconds / (static_cast<double>(state.iterations()) * steps);
  state.counters["cpu_s_per_step"] = cpu / (static_cast<double>(state.iterations()) * steps);
  state.counters["events_per_s"] = static_cast<double>(events) / seconds;
}
BENCHMARK(BM_SimStep)->Arg(64)->Arg(1024)->Arg(4096)->Arg(16384)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
}  // namespace gemtb::sim

BENCHMARK_MAIN();
