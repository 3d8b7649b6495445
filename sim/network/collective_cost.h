// The cost of one collective on a Cluster: how long it takes, its algbw and
// busbw (nccl-tests' convention), and which algorithm (and, in mode `nccl`, protocol) ran.
//
// Two cost modes, chosen by plan.collectives.cost_mode:
//  * `alpha_beta` (default): the α–β formulas on the group's tier profile; algorithm per op
//    from plan.collectives.algo, "auto" = the cheapest valid one.
//  * `nccl`: NCCL's own latency/bandwidth tables and argmin over (algorithm, protocol) from
//    src/graph/tuning.cc (constants of the commit recorded in the calibration file).
// Either mode's busbw is then scaled by the size-efficiency tables when plan.collectives.eta_tables
// is on, and fitted α/B from the calibration file replace the tier defaults where the
// file has them for that op, tier and algorithm.
//
// Estimate is O(1) (O(tiers)) per call and allocates nothing: the engine calls it per rendezvous.
// Build a CollectiveCostModel once per (Cluster, CollectivesPlan) and call it; the free function
// Estimate is the one-shot form of the same thing.
//
// S (bytes) follows nccl-tests: the buffer (all-reduce, broadcast); the full gathered size, p × per-rank
// chunk (all-gather, reduce-scatter); the total bytes one rank sends (all-to-all).
#ifndef GEMTB_SIM_NETWORK_COLLECTIVE_COST_H_
#define GEMTB_SIM_NETWORK_COLLECTIVE_COST_H_

#include <array>
#include <memory>
#include <span>
#include <string>
#include <vector>
#include <string_view>

#include "absl/status/statusor.h"
#include "sim/scenario/scenario.h"

namespace gemtb::sim {

// ---- group shape -------------------------------------------------------------------------------

// The tier profile of one process group: how its members spread over NVLink hosts and
// AI zones. Members are assumed spread evenly (every host holding members holds members_per_host of
// them, every zone members_per_zone), which is what the plan's dim_order produces.
struct GroupShape {
  int members = 1;           // p
  int members_per_host = 1;  // g: members sharing one NVLink host
  int hosts = 1;             // N = p / g: hosts the group touches
  int members_per_zone = 1;  // Z: members sharing one AI zone
  int zones = 1;             // p / Z
};

// The shape of the group {first, first + stride, ..., first + (count - 1) * stride} on `cluster`
// (world_size, gpus_per_host, zone_size). Errors name the argument: count < 1, stride < 1, a rank
// outside the world. Costs O(count) once per group class, not per call.
absl::StatusOr<GroupShape> StridedGroupShape(const Cluster& cluster, int first, int stride, int count);

// The shape of a group of `members` consecutive ranks (stride 1) starting at 0: the common case.
absl::StatusOr<GroupShape> ContiguousGroupShape(const Cluster& cluster, int members);

// ---- algorithms and results --------------------------------------------------------------------

// CollAlgo and CollProto are declared in sim/scenario/scenario.h (calibration files name them).

std::string_view CollectiveOpName(CollectiveOp op);  // all_reduce, all_gather, ...
absl::StatusOr<CollectiveOp> ParseCollectiveOp(std::string_view name);
std::string_view CollAlgoName(CollAlgo algo);         // ring, tree, halving_doubling, direct, ...
std::string_view CollProtoName(CollProto proto);      // "", LL, LL128, Simple
// "ring", or "ring/LL128" in nccl mode: CollectiveStats::algo.
std::string AlgoLabel(CollAlgo algo, CollProto proto);

// busbw / algbw for op on p ranks: 2(p−1)/p AR, (p−1)/p AG/RS/all-to-all, 1 broadcast.
double BusBwFactor(CollectiveOp op, int members);

struct CollectiveCost {
  double duration_s = 0;
  double algbw_Bps = 0;  // S / duration
  double busbw_Bps = 0;  // algbw * BusBwFactor
  CollAlgo algo = CollAlgo::kRing;
  CollProto proto = CollProto::kNone;
  // > 0: no measurement of this group size; its NVLink costs are extrapolated from the fitted group
  // of anchor_gpus GPUs on one host (the largest measured below it).
  int anchor_gpus = 0;
  // Mode alpha_beta: the size-independent part of duration_s (latency steps), which the η tables do
  // not scale; 0 in mode nccl.
  double latency_s = 0;
};

// An all-to-allv seen from the busiest rank (or from one rank, for a2av_end: per_rank): for each
// tier k, max(bytes sent, bytes received) to peers reached across tier k (k = 0: same host; 1: other
// hosts in the zone; 2: other zones), self-traffic excluded. Never a p × p matrix.
inline constexpr int kMaxTiers = 3;
struct AllToAllvLoad {
  std::array<double, kMaxTiers> bytes_per_tier{};
};

// Each member's all-to-allv load (above) from a p × p byte matrix: matrix[i * p + j] is what member i
// sends to member j (the diagonal, self-traffic, is ignored). Members are in group order: member k
// sits on host k / members_per_host and in zone k / members_per_zone of `shape` (the order
// StridedGroupShape describes). Per tier k, max(sent, received) across tier k. O(p²): once per call
// site, not per event. Error: matrix.size() is not p².
absl::StatusOr<std::vector<AllToAllvLoad>> AllToAllvLoads(const GroupShape& shape, std::span<const double> matrix);

// Calibration constant "nccl_tree_bw_intra_GBps.gpus<N>": mode nccl's tree per-channel bandwidth for
// a group of exactly N GPUs on one host (NCCL searches its tree graph per communicator; on the H200
// hosts 2 GPUs log bw 60 and 4 log 30), instead of nccl_tree_bw_intra_GBps.
inline constexpr char kTreeBwPerGpusPrefix[] = "nccl_tree_bw_intra_GBps.gpus";

// ---- the model ---------------------------------------------------------------------------------

class CollectiveCostModel {
 public:
  // Checks the plan against the cluster: cost_mode alpha_beta|nccl, each plan.collectives.algo entry
  // a known op with an algorithm valid for it (errors name "plan.collectives.algo.all_to_all: tree
  // ..."), at least one tier, the calibration's fitted entries naming existing tiers.
  static absl::StatusOr<CollectiveCostModel> Create(const Cluster& cluster, const CollectivesPlan& plan);

  // One collective of `bytes` (S) on a group of shape `shape`. bytes <= 0 or members <= 1
  // cost nothing (duration 0). The algorithm is plan.collectives.algo[op] ("auto": the cheapest);
  // one that does not apply to this shape (hierarchical on one host) falls back to ring. Mode
  // alpha_beta, "auto": where the calibration has a measured NCCL-auto segment for this op, group size
  // and S (calibration.fitted, algo "auto"), that curve is the prediction, in the form it was fitted
  // in (ring; direct for all-to-all), not the cheapest algorithm's form evaluated with its α and B.
  CollectiveCost Estimate(CollectiveOp op, const GroupShape& shape, double bytes) const;

  // Same, with the algorithm forced (e.g. `gemtb whatif collective --algo`); kAllToAllv not allowed.
  CollectiveCost EstimateWith(CollectiveOp op, CollAlgo algo, const GroupShape& shape, double bytes) const;

  // All-to-allv: (p−1)α + max over tiers of bytes_k / B_k (B of the top tier ÷ its
  // oversubscription). busbw reported against S = the largest per-tier sum.
  CollectiveCost EstimateAllToAllv(const GroupShape& shape, const AllToAllvLoad& load) const;

  // An all-to-allv given by its p × p byte matrix (AllToAllvLoads): every member's own time, and the
  // slowest member's, which sets the collective's end (a2av_end "all"). busbw as above,
  // for the slowest member.
  struct AllToAllvResult {
    CollectiveCost slowest;
    int slowest_member = 0;
    std::vector<double> member_duration_s;  // per member, for a2av_end "per_rank"
  };
  absl::StatusOr<AllToAllvResult> EstimateAllToAllvMatrix(const GroupShape& shape,
                                                          std::span<const double> matrix) const;

  const Cluster& cluster() const { return *cluster_; }
  const CollectivesPlan& plan() const { return *plan_; }

  // Implementation state (resolved per-op algorithm choice, per-tier α/B, NCCL constants);
  // defined in collective_cost.cc.
  struct Impl;

 private:
  CollectiveCostModel() = default;
  std::shared_ptr<const Cluster> cluster_;
  std::shared_ptr<const CollectivesPlan> plan_;
  std::shared_ptr<const Impl> impl_;
};

// One-shot form: builds the model and estimates one collective (for tools and tests, not for hot
// loops).
absl::StatusOr<CollectiveCost> Estimate(const Cluster& cluster, const CollectivesPlan& plan,
                                        CollectiveOp op, const GroupShape& shape, double bytes);

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_NETWORK_COLLECTIVE_COST_H_
