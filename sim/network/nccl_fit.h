// Fitted corrections of mode `nccl`: NCCL's tables (nccl_tuning.h)
// have no kernel-launch cost and their per-(algorithm, protocol) bandwidths are not what one host
// delivers at every size, so a calibration may carry, per (op, pinned algorithm, GPU count, NCCL
// algorithm, protocol) and size segment [min_bytes, max_bytes), a launch/latency term and an
// efficiency η:  t = launch + t_NCCL(algo, proto, S) / η.
// Segments are fitted per protocol regime (calibrate.cc): a segment never joins two fit sizes at
// which NCCL's argmin picks different (algorithm, protocol) pairs, so nothing is interpolated across
// NCCL's protocol switch points; sizes past a switch continue their own regime's segment.
//
// In memory they are Calibration::nccl_fitted (NcclFitSegment, sim/scenario/scenario.h); in JSON
// calibration.nccl_fitted[] {op, tier, algo (the pinned one, or "auto"), nccl_algo, proto, gpus,
// min_bytes, max_bytes, launch_us, eta} (cluster_json.h reads and writes it). The names below are
// those of that JSON.
#ifndef GEMTB_SIM_NETWORK_NCCL_FIT_H_
#define GEMTB_SIM_NETWORK_NCCL_FIT_H_

#include <optional>
#include <string_view>

#include "sim/network/collective_cost.h"
#include "sim/scenario/scenario.h"

namespace gemtb::sim {

// "ring" / "tree" / "nvls" / "pat" and "LL" / "LL128" / "Simple" back to enums.
std::optional<CollAlgo> ParseNcclAlgo(std::string_view name);
std::optional<CollProto> ParseNcclProto(std::string_view name);

// How NCCL_ALGO was set for a measurement: "auto" -> *pinned = nullopt; "ring", "tree", "nvls" -> that
// algorithm. Anything else: false (*pinned untouched).
bool ParsePinnedAlgo(std::string_view name, std::optional<CollAlgo>* pinned);
// The inverse: "auto" for nullopt, else CollAlgoName.
std::string_view PinnedAlgoName(const std::optional<CollAlgo>& pinned);

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_NETWORK_NCCL_FIT_H_
