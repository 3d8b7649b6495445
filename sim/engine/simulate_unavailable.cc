// Simulate() while sim/network (the collective cost model) is not part of the build: a clear error
// instead of a link failure. sim/engine/CMakeLists.txt picks this file only in that case.
#include "absl/status/status.h"
#include "sim/engine/simulate.h"

namespace gemtb::sim {

absl::StatusOr<SimResult> Simulate(const Scenario&, const Counterfactuals&, const SimOptions&) {
  return absl::UnimplementedError("sim engine: built without sim/network (no collective cost model)");
}

}  // namespace gemtb::sim
