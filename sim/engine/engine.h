// The discrete-event run of a StepTemplate over all ranks and steps:
// in-order streams per rank, collectives as rendezvous (start when the last member arrives, all end
// together, slowed while they share a tier with other collectives of their members), SM contention
// c_r(t) while SM-based collectives run on the rank (running compute is rescheduled when c_r
// changes), per rank-step noise and per-call jitter.
#ifndef GEMTB_SIM_ENGINE_ENGINE_H_
#define GEMTB_SIM_ENGINE_ENGINE_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sim/engine/collective_timing.h"
#include "sim/scenario/result.h"
#include "sim/workload/step_template.h"

namespace gemtb::sim {

struct EngineInput {
  const StepTemplate* tpl = nullptr;
  const CollectiveTiming* timing = nullptr;
  int world = 1;
  int steps = 1;    // W + M
  int warmup = 0;   // W
  const std::vector<double>* stats = nullptr;          // [step][rank][layout.size()]
  const std::vector<uint8_t>* checkpointed = nullptr;  // [step][rank][piece], 1 = rebuilt in backward; may be null
  const std::vector<double>* noise = nullptr;          // [step][rank] compute slowdown; may be null
  // Per CollectiveOp: compute slows by 1 + kappa on a rank while one collective of that op runs
  // there (SMs taken by an SM-based library; HBM bandwidth taken by the copy engine); 0: none.
  std::array<double, 5> kappa{};
  bool copy_engine = false;    // collectives run on the copy engine (traced as "copy", else "comm")
  bool ideal_network = false;  // collectives take no time on the dependency path (SMs still held)
  double jitter_sigma = 0;     // per-call lognormal (mean 1) on collective durations
  // All-to-allv ends: false = every member ends with the heaviest (plan.collectives.a2av_end "all");
  // true = each member ends when its own send/receive total is through ("per_rank").
  bool a2av_per_rank = false;
  // plan.collectives.flow "maxmin": concurrent collectives share links. A
  // collective loads one port on each member, its NVLink port if the group stays on one host, else
  // its NIC (in-zone and cross-zone flows share it), and runs at rate 1/n, n the most collectives any
  // member has on that port: the max-min fair rate when every flow on that port is bottlenecked
  // there (a flow slowed elsewhere does not hand its unused share on: conservative). RateChange
  // reschedules its end. Off ("none"): every collective runs at its lone cost. All-to-allvs under
  // a2av_per_rank do not share.
  bool processor_sharing = true;
  // Distinct functions whose values the engine tables per rank-step (compute times and collectives'
  // batch-dependent bytes, 8 bytes each per rank); tasks of further functions evaluate their own.
  // Outputs do not depend on it.
  int time_table_functions = 128;
  uint64_t seed = 0;
  std::vector<uint8_t> traced;  // per rank: record its trace events of trace_step
  int trace_step = -1;
};

struct EngineOutput {
  std::vector<double> step_end_s;       // per step: when its last task finished on any rank
  std::vector<RankStats> ranks;         // sums over the measured steps (not yet divided by M)
  std::vector<double> comm_s;           // per rank: summed collective durations (measured steps)
  std::vector<double> step_work_s;      // [step][rank]: compute-stream busy time (imbalance is per step)
  struct CollSite {
    double calls = 0, duration_s = 0, bytes = 0, exposed_s = 0, member_time_s = 0;
    std::string algo;
  };
  std::vector<CollSite> sites;          // per template task (collectives only)
  std::vector<TraceEvent> trace;
  uint64_t events = 0;
};

absl::StatusOr<EngineOutput> RunEngine(const EngineInput& in);

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_ENGINE_ENGINE_H_
