// The simulator's one entry point: run W warm-up plus M measured steps of a
// Scenario through the discrete-event engine and return everything the report holds (SimResult).
//
// A Scenario that cannot fit in memory is not an error: SimResult.memory.fits is false and the run
// still goes on (recomputing every region it can). Errors are only for inputs the engine cannot run
// (no model, a plan whose groups do not tile the world, ...), each naming the field and its value.
//
// Determinism: identical (scenario, counterfactuals, options) give identical SimResults, bit for bit,
// for any `threads`; every random draw is keyed by (seed, purpose, rank, step, sample or task).
#ifndef GEMTB_SIM_ENGINE_SIMULATE_H_
#define GEMTB_SIM_ENGINE_SIMULATE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "sim/scenario/result.h"
#include "sim/scenario/scenario.h"
#include "sim/workload/batch_stats_cache.h"

namespace gemtb::sim {

struct SimOptions {
  // Ranks whose tasks go to SimResult.trace. Empty: ranks 0..7 (those that exist) plus the slowest.
  std::vector<int> trace_ranks;
  // Adds the rank with the largest work W_r to the traced ranks (by default "plus the slowest").
  bool trace_slowest = true;
  // The traced step, 0-based over all steps (warm-up included). -1: the first measured step (W).
  int trace_step = -1;
  // No trace at all (sweeps, attribution reruns): faster and smaller results.
  bool trace = true;
  // Threads for the per-rank preparation (batch draws, durations); the event loop itself is serial.
  // Results do not depend on it.
  int threads = 1;
  // Overrides of batches.warmup_steps / measured_steps when >= 0 (e.g. `--steps W,M`).
  int warmup_steps = -1;
  int measured_steps = -1;
  // Where batch statistics drawn by earlier runs are kept (a study shares one across its runs);
  // null: every run draws its own. Results do not depend on it.
  BatchStatsCache* batch_cache = nullptr;
};

// Runs the scenario with the given counterfactual switches (the loss attribution's table).
absl::StatusOr<SimResult> Simulate(const Scenario& scenario, const Counterfactuals& counterfactuals,
                                   const SimOptions& options = {});

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_ENGINE_SIMULATE_H_
