#include "sim/report/attribution.h"

#include <bit>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gemtb::sim::report {

const char* LossKey(int cause) {
  static constexpr std::array<const char*, kLossCauses + 1> kKeys = {"comm",       "contention", "imbalance",
                                                                          "stragglers", "recompute",  "non_layer"};
  return kKeys.at(static_cast<size_t>(cause));
}

const char* LossCause(int cause) {
  static constexpr std::array<const char*, kLossCauses + 1> kCauses = {
      "C1 communication volume", "C2 SM contention",      "C4 load imbalance",
      "stragglers (noise)",      "C3 recompute (memory)", "non-layer work (optimizer, embedding update)"};
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
  a.non_layer_s = a.t_ideal_s - a.t_local_s;
  if (a.non_layer_s > a.delta_s[static_cast<size_t>(a.biggest)]) a.biggest = kNonLayerLoss;
  return a;
}

Counterfactuals MaskCounterfactuals(int mask) {
  Counterfactuals c;
  c.ideal_network = (mask & 1) != 0;
  c.sm_free = (mask & 2) != 0;
  c.perfect_balance = (mask & 4) != 0;
  c.no_noise = (mask & 8) != 0;
  c.no_recompute = (mask & 16) != 0;
  return c;
}

absl::StatusOr<std::array<double, kLossCauses>> ShapleyShares(absl::Span<const double> t_by_mask) {
  if (t_by_mask.size() != kShapleyRuns) {
    return absl::InvalidArgumentError(absl::StrCat("the Shapley split needs ", kShapleyRuns, " runs, got ", t_by_mask.size()));
  }
  // weight[s] = s!·(n − 1 − s)!/n! for a coalition of s causes without i.
  std::array<double, kLossCauses> weight{};
  for (int s = 0; s < kLossCauses; ++s) {
    double w = 1.0 / kLossCauses;
    for (int k = 1; k <= s; ++k) w *= static_cast<double>(k) / (kLossCauses - k);
    weight[static_cast<size_t>(s)] = w;
  }
  std::array<double, kLossCauses> share{};
  for (int i = 0; i < kLossCauses; ++i) {
    const int bit = 1 << i;
    double sum = 0;  // fixed order: masks ascending
    for (int mask = 0; mask < kShapleyRuns; ++mask) {
      if ((mask & bit) != 0) continue;
      const double drop = t_by_mask[static_cast<size_t>(mask)] - t_by_mask[static_cast<size_t>(mask | bit)];
      sum += weight[static_cast<size_t>(std::popcount(static_cast<unsigned>(mask)))] * drop;
    }
    share[static_cast<size_t>(i)] = sum;
  }
  return share;
}

absl::StatusOr<Attribution> AttributeShapley(absl::Span<const SimResult> runs_by_mask) {
  std::vector<double> t;
  for (const SimResult& r : runs_by_mask) t.push_back(r.step_mean_s);
  absl::StatusOr<std::array<double, kLossCauses>> shares = ShapleyShares(t);
  if (!shares.ok()) return shares.status();
  Attribution a;
  a.t_s = t.front();
  a.t_local_s = runs_by_mask.front().t_local_s;
  a.t_ideal_s = t.back();
  a.delta_s = *shares;
  for (int k = 0; k < kLossCauses; ++k) {
    if (a.delta_s[static_cast<size_t>(k)] > a.delta_s[static_cast<size_t>(a.biggest)]) a.biggest = k;
  }
  a.non_layer_s = a.t_ideal_s - a.t_local_s;
  if (a.non_layer_s > a.delta_s[static_cast<size_t>(a.biggest)]) a.biggest = kNonLayerLoss;
  return a;
}

}  // namespace gemtb::sim::report
