// Loss attribution by cumulative counterfactual reruns: rerun k switches on
// counterfactuals 1..k in the fixed order ideal network, SM-free, perfect balance, no noise, no
// recompute; the drop in step time T from rerun k-1 to k is the loss of cause k. The deltas sum to
// T - T_ideal (all five applied). What is left, T_ideal - T_local, is the work that is neither a
// layer nor communication (the dense optimizer step, the embedding update, launch gaps): its own
// loss line, so T - T_local = (1 - SR) T is split in full and nothing hides inside SR.
#ifndef GEMTB_SIM_REPORT_ATTRIBUTION_H_
#define GEMTB_SIM_REPORT_ATTRIBUTION_H_

#include <array>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "sim/scenario/result.h"
#include "sim/scenario/scenario.h"

namespace gemtb::sim::report {

inline constexpr int kLossCauses = 5;

// The non-layer line's index for LossKey/LossCause (after the five causes of the reruns).
inline constexpr int kNonLayerLoss = kLossCauses;

// Short names (CSV columns, JSON keys) and causes (what people read), in rerun order, then the
// non-layer line (kNonLayerLoss).
const char* LossKey(int cause);    // comm, contention, imbalance, stragglers, recompute, non_layer
const char* LossCause(int cause);  // "C1 communication volume", ...

// The switches of rerun k (1..5): counterfactuals 1..k on; k = 0 is the baseline.
Counterfactuals CumulativeCounterfactuals(int k);

struct Attribution {
  double t_s = 0;        // baseline mean step time T
  double t_ideal_s = 0;  // all five counterfactuals applied
  double t_local_s = 0;  // T_local of the baseline
  std::array<double, kLossCauses> delta_s{};  // T_{k-1} - T_k
  double non_layer_s = 0;  // T_ideal - T_local: optimizer step, embedding update, gaps
  int biggest = 0;        // the largest loss line: a cause, or kNonLayerLoss

  // The loss of line k (a cause's delta, or the non-layer work).
  double Loss(int k) const { return k == kNonLayerLoss ? non_layer_s : delta_s[static_cast<size_t>(k)]; }
};

// `runs` holds the baseline and reruns 1..5 in order (6 results).
absl::StatusOr<Attribution> Attribute(absl::Span<const SimResult> runs);

// ---- order-free split (`--shapley`) ------------------------------------------------------
// The ordered deltas depend on the order: a cause switched on late sees the others already gone
// (ideal network first takes the overlap of communication and imbalance). The Shapley split runs all
// 2^5 = 32 subsets of the counterfactuals and gives each cause its drop in T averaged over all 120
// orders: share_i = Σ_{S ∌ i} |S|!·(4 − |S|)!/5! · (T(S) − T(S ∪ {i})).
inline constexpr int kShapleyRuns = 1 << kLossCauses;

// The switches of the run that applies the set `mask` (bit k = cause k, in rerun order; the
// cumulative rerun k is mask 2^k − 1).
Counterfactuals MaskCounterfactuals(int mask);

// Shares from the 32 mean step times (t_by_mask[m]: the set m applied). They sum to
// t_by_mask[0] − t_by_mask[31] (as the ordered deltas do); a cause whose switch never changes T gets
// exactly 0; causes that act the same get the same share.
absl::StatusOr<std::array<double, kLossCauses>> ShapleyShares(absl::Span<const double> t_by_mask);

// The Attribution with Shapley shares as its deltas, from the 32 runs indexed by mask.
absl::StatusOr<Attribution> AttributeShapley(absl::Span<const SimResult> runs_by_mask);

}  // namespace gemtb::sim::report

#endif  // GEMTB_SIM_REPORT_ATTRIBUTION_H_
