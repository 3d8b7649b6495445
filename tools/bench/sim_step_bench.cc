// Step-simulation speed: one step of the gem-scale job must simulate in
// <= 0.25 s on one core at 4,096 ranks and <= 1 s at 16,384. The scenario is gem-default itself
// (sim/scenarios/gem-default.json, as `gemtb whatif` runs it) at each world size: the bench cannot
// drift from the job it times.
// Before timing, each size is checked once: every step finished, the step time is positive and the
// heaviest rank sits above the mean. Reported per simulated step: CPU seconds of this process
// ("cpu_s_per_step", the figure the speed bounds apply to: one core) and wall seconds ("s_per_step", inflated when
// the machine is shared), plus events per second.
//
//   build/bin/sim_step_bench --benchmark_filter=SimStep
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "benchmark/benchmark.h"
#include "sim/engine/simulate.h"
#include "sim/scenario/scenario_json.h"

namespace gemtb::sim {
namespace {

Scenario GemDefault(int world) {
  absl::StatusOr<ScenarioDocument> doc = LoadScenarioDocument(DefaultScenarioPath());
  absl::Status set = doc.ok() ? SetWorldSize(*doc, world) : doc.status();
  absl::StatusOr<Scenario> s = set.ok() ? BuildScenario(*doc) : absl::StatusOr<Scenario>(set);
  if (!s.ok()) {
    std::fprintf(stderr, "gem-default at %d GPUs: %s\n", world, std::string(s.status().message()).c_str());
    std::abort();
  }
  return *std::move(s);
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
