// Fitted corrections of mode `nccl` (spec/simulator.md §3.3, §6.6): NCCL's tables (nccl_tuning.h)
// have no kernel-launch cost and their per-(algorithm, protocol) bandwidths are not what one host
// delivers at every size, so a calibration may carry, per (op, pinned algorithm, GPU count, NCCL
// algorithm, protocol) and size segment [min_bytes, max_bytes), a launch/latency term and an
// efficiency η:  t = launch + t_NCCL(algo, proto, S) / η.
// Segments are fitted per protocol regime (calibrate.cc): a segment never joins two fit sizes at
// which NCCL's argmin picks different (algorithm, protocol) pairs, so nothing is interpolated across
// NCCL's protocol switch points; sizes past a switch continue their own regime's segment.
//
// Calibration (sim/scenario/scenario.h) has no slot of its own for these, so they travel as
// FittedLink entries whose algo is "nccl:<pinned>:<algo>/<proto>" (e.g. "nccl:auto:ring/LL128"),
// alpha_s = launch and busbw_Bps = η (dimensionless); the JSON keeps them apart as
// calibration.nccl_fitted[] {op, tier, algo, nccl_algo, proto, gpus, min_bytes, max_bytes,
// launch_us, eta}.
#ifndef GEMTB_SIM_NETWORK_NCCL_FIT_H_
#define GEMTB_SIM_NETWORK_NCCL_FIT_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "sim/network/collective_cost.h"
#include "sim/scenario/scenario.h"

namespace gemtb::sim {

struct NcclFit {
  CollectiveOp op = CollectiveOp::kAllReduce;
  std::string tier;
  std::string pinned = "auto";  // how NCCL_ALGO was set for the measurement: auto, ring, tree
  CollAlgo algo = CollAlgo::kRing;  // NCCL's choice the segment corrects: ring, tree, nvls, pat
  CollProto proto = CollProto::kSimple;
  int gpus = 0;
  double min_bytes = 0, max_bytes = 0;  // 0 = unbounded
  double launch_s = 0;  // the segment's intercept; < 0 where the measured curve is flatter than NCCL's
                        // (calibrate.cc keeps t > 0 on the whole segment)
  double eta = 1;                       // > 0 (> 1: faster than NCCL's table)
};

// True when a FittedLink carries an NcclFit (algo starts with "nccl:").
bool IsNcclFitLink(const FittedLink& link);
FittedLink ToFittedLink(const NcclFit& fit);
// Errors name `path` and the bad part of the encoded algo.
absl::StatusOr<NcclFit> FromFittedLink(const FittedLink& link, std::string_view path);

// "ring" / "tree" / "nvls" / "pat" and "LL" / "LL128" / "Simple" back to enums.
std::optional<CollAlgo> ParseNcclAlgo(std::string_view name);
std::optional<CollProto> ParseNcclProto(std::string_view name);

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_NETWORK_NCCL_FIT_H_
