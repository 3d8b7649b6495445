// Collective durations for the engine: one group shape per layout (computed once), then
// sim/network's cost model per rendezvous (O(1), no allocation).
#ifndef GEMTB_SIM_ENGINE_COLLECTIVE_TIMING_H_
#define GEMTB_SIM_ENGINE_COLLECTIVE_TIMING_H_

#include <vector>

#include "absl/status/statusor.h"
#include "sim/network/collective_cost.h"
#include "sim/scenario/scenario.h"
#include "sim/workload/rank_groups.h"

namespace gemtb::sim {

class CollectiveTiming {
 public:
  static absl::StatusOr<CollectiveTiming> Create(const Cluster& cluster, const CollectivesPlan& plan,
                                                 const std::vector<GroupLayout>& layouts);

  // op on a group of `layout` moving S = bytes. a2av: bytes is the heaviest member's
  // send total, spread over the tiers in proportion to the peers reached across each.
  CollectiveCost Cost(int layout, CollectiveOp op, double bytes, bool a2av) const;
  // An all-to-allv whose member load per tier is known (from a traffic matrix: AllToAllvLoads in
  // sim/network/collective_cost.h), instead of the uniform spread Cost assumes.
  CollectiveCost CostAllToAllv(int layout, const AllToAllvLoad& load) const {
    return model_.EstimateAllToAllv(shapes_[layout], load);
  }
  const CollectiveCostModel& model() const { return model_; }
  const GroupShape& shape(int layout) const { return shapes_[layout]; }

 private:
  CollectiveTiming(CollectiveCostModel model) : model_(std::move(model)) {}
  CollectiveCostModel model_;
  std::vector<GroupShape> shapes_;
};

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_ENGINE_COLLECTIVE_TIMING_H_
