// The sparse all-to-alls as all-to-allvs: every rank's share of a
// table's traffic follows the table's placement (owners, row blocks, hot ids), so one position
// serves or sends more than the uniform share and, the slowest member setting the time, the whole
// exchange takes as long as that position needs.
//
// The network is handed this as the uniform equivalent of the per-position loads: each member's
// bytes scaled by the maximum position's load over the mean one (the maximum row), at the mean
// rank-step's batch. A network model that carries the per-rank byte matrix itself replaces this one
// function.
#ifndef GEMTB_SIM_WORKLOAD_ALLTOALLV_TRAFFIC_H_
#define GEMTB_SIM_WORKLOAD_ALLTOALLV_TRAFFIC_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "sim/workload/step_template.h"

namespace gemtb::sim {

// The maximum row over the mean row of each all-to-all site of `tpl` at `mean_stats` (a StatLayout
// row), in the template's site order, by site name ("sparse.ids_a2a", ...).
std::vector<std::pair<std::string, double>> AllToAllvMaxRowFactors(const StepTemplate& tpl,
                                                                   absl::Span<const double> mean_stats);

// Scales the bytes of every sparse all-to-allv task of `tpl` by its site's factor.
void ApplyAllToAllvMaxRowEquivalent(StepTemplate& tpl, const std::vector<std::pair<std::string, double>>& factors);

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_WORKLOAD_ALLTOALLV_TRAFFIC_H_
