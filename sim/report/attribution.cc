#include "sim/report/attribution.h"

#include "absl/strings/str_cat.h"

namespace gemtb::sim::report {

const char* LossKey(int cause) {
  static constexpr std::array<const char*, kLossCauses> kKeys = {"comm", "contention", "imbalance", "stragglers",
                                                                      "recompute"};
  return kKeys.at(static_cast<size_t>(cause));
}

const char* LossCause(int cause) {
  static constexpr std::array<const char*, kLossCauses> kCauses = {
      "C1 communication volume", "C2 SM contention", "C4 load imbalance", "stragglers (noise)", "C3 recompute (memory)"};
  return kCauses.at(static_cast<size_t>(cause));
}

Counterfactuals CumulativeCounterfactuals(int k) {
  Counterfactuals c;
  c.ideal_network = k >= 1;
  c.sm_free = k >= 2;
  c.perfect_balance = k >= 3;
  c.no_noise = k >= 4;
  c.no_recompute = k >= 5;
  return c;
}

absl::StatusOr<Attribution> Attribute(absl::Span<const SimResult> runs) {
  if (runs.size() != kLossCauses + 1) {
    return absl::InvalidArgumentError(absl::StrCat("attribution needs 6 runs (baseline + 5 reruns), got ", runs.size()));
  }
  Attribution a;
  a.t_s = runs[0].step_mean_s;
  a.t_local_s = runs[0].t_local_s;
  a.t_ideal_s = runs[kLossCauses].step_mean_s;
  for (int k = 0; k < kLossCauses; ++k) {
    a.delta_s[static_cast<size_t>(k)] = runs[static_cast<size_t>(k)].step_mean_s - runs[static_cast<size_t>(k) + 1].step_mean_s;
    if (a.delta_s[static_cast<size_t>(k)] > a.delta_s[static_cast<size_t>(a.biggest)]) a.biggest = k;
  }
  a.residual_s = a.t_ideal_s - a.t_local_s;
  return a;
}

}  // namespace gemtb::sim::report
