// What one simulation returns: sim/engine fills it, sim/report writes it.
// Times in seconds, sizes in bytes; every vector is in a fixed order (ranks ascending, collectives
// in first-issue order) so that reports are byte-identical for identical inputs.
#ifndef GEMTB_SIM_SCENARIO_RESULT_H_
#define GEMTB_SIM_SCENARIO_RESULT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "sim/scenario/scenario.h"

namespace gemtb::sim {

// Per rank, summed over the measured steps and divided by their count (per-step means).
struct RankStats {
  double compute_s = 0;          // layer compute, contention slowdown included
  double exposed_comm_s = 0;     // compute idle from a collective's start to its end
  double wait_s = 0;             // compute idle from arrival to the collective's start (waiting for peers)
  double recompute_s = 0;        // forward recomputed in backward (activation checkpointing)
  double contention_s = 0;       // extra compute time from SM-based collectives (c_r - 1)
  double nonlayer_compute_s = 0; // optimizer, lookups and other non-layer work
  double flops = 0;              // model FLOPs of this rank's samples (recompute excluded)
  double work_s = 0;             // W_r: the rank's compute time without waiting (imbalance uses it)
  double static_bytes = 0;
  double peak_activation_bytes = 0;
};

// One collective call site (per class and op), aggregated over its calls in a step.
struct CollectiveStats {
  GroupClass group_class = GroupClass::kDenseShard;
  CollectiveOp op = CollectiveOp::kAllReduce;
  std::string name;       // the task that issues it, e.g. "L1.wukong.ag"
  std::string algo;       // chosen algorithm (and protocol in nccl mode), e.g. "ring", "tree/LL128"
  int members = 0;
  double bytes = 0;       // S in the nccl-tests convention
  double duration_s = 0;  // mean duration of one call
  double algbw_Bps = 0;
  double busbw_Bps = 0;
  double exposed_fraction = 0;  // of its duration, the share no compute overlapped (rank mean)
  double calls_per_step = 0;
};

// The four conditions' indicators.
struct Indicators {
  double c1_compute_over_comm = 0;
  double c2_exposed_and_contention_share = 0;
  double c3_recompute_share = 0;
  double c4_imbalance = 0;
};

struct MemoryFit {
  bool fits = true;
  double needed_bytes = 0;     // static + the smallest achievable activation peak
  double available_bytes = 0;  // HBM - reserve
  double static_bytes = 0;     // max over ranks
  double activation_budget_bytes = 0;
  double recomputed_fraction = 0;  // of saved-activation bytes dropped for recompute
};

// One "X" event of the Chrome/Perfetto trace: pid = rank, tid = stream.
struct TraceEvent {
  int rank = 0;
  int stream = 0;
  std::string name;
  std::string category;  // compute, recompute, comm, copy, wait
  double start_s = 0;
  double duration_s = 0;
};

struct SimResult {
  int world_size = 0;
  std::vector<double> step_times_s;  // measured steps: intervals between StepEnds
  double step_mean_s = 0, step_p50_s = 0, step_p99_s = 0;
  double step_latency_bound_s = 0;  // max_r max(local compute, communication)
  double local_mfu = 0, e2e_mfu = 0, scaling_ratio = 0, t_local_s = 0;
  double imbalance = 0;  // max_r W_r / mean_r W_r - 1
  Indicators indicators;
  MemoryFit memory;
  std::vector<RankStats> ranks;
  std::vector<CollectiveStats> collectives;
  std::vector<std::string> stream_names;  // tid -> name
  std::vector<TraceEvent> trace;          // the traced ranks and step only
  uint64_t events = 0;                    // events processed (perf.json)
};

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_SCENARIO_RESULT_H_
