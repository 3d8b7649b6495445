#include "sim/engine/simulate.h"

#include "absl/status/status.h"

namespace gemtb::sim {

absl::StatusOr<SimResult> Simulate(const Scenario& scenario, const Counterfactuals& counterfactuals,
                                   const SimOptions& options) {
  (void)scenario;
  (void)counterfactuals;
  (void)options;
  return absl::UnimplementedError("sim engine: Simulate is not implemented yet");
}

}  // namespace gemtb::sim
