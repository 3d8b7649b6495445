// Memory and recomputation: the activation budget is HBM - reserve - static
// bytes (with V3's gathered copy, per rank-step when only touched rows are gathered); when a
// rank-step's saved activations exceed it, activations are dropped until they fit and rebuilt in
// backward. budget_policy per_region drops a region's pieces (its ops of one recompute class:
// pointwise, norm, linear, attention) greedily by bytes freed per second of recompute, over every
// region, so cheap ops go first; `uniform` drops whole regions (their forward re-run in full) in
// region order. A region's dropped bytes are needed again while its backward rebuilds them (one
// region at a time), so peak = kept + the largest region's dropped bytes.
// A rank-step that cannot fit even with every region checkpointed is not checkpointed at all (the
// point is does_not_fit; its time is the time the step would take if memory were no limit).
#ifndef GEMTB_SIM_ENGINE_MEMORY_MODEL_H_
#define GEMTB_SIM_ENGINE_MEMORY_MODEL_H_

#include <cstdint>
#include <vector>

#include "sim/scenario/result.h"
#include "sim/scenario/scenario.h"
#include "sim/workload/step_template.h"

namespace gemtb::sim {

struct MemoryPlanOutput {
  std::vector<uint8_t> checkpointed;          // [step][rank][piece], 1 = dropped and rebuilt
  std::vector<double> peak_activation_bytes;  // per rank, max over steps
  std::vector<double> static_bytes;           // per rank, max over steps (V3's copy included)
  MemoryFit fit;
};

// The per_region checkpoint order: pieces by bytes freed per second of recompute (saved[p] /
// secs[p], secs floored at 1e-30, compared as cross products), descending, ties by piece index: the
// order std::stable_sort gives 0..P-1 under the ratio comparison. `order` holds a permutation of
// 0..P-1 on entry (any: the result does not depend on it; a nearly sorted one is fastest).
void CheckpointOrder(const std::vector<double>& saved, const std::vector<double>& secs, std::vector<int>& order);

MemoryPlanOutput PlanMemory(const StepTemplate& tpl, const Scenario& scenario, const std::vector<double>& stats,
                            int steps, int world, bool no_recompute);

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_ENGINE_MEMORY_MODEL_H_
