#include "sim/engine/collective_timing.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace gemtb::sim {

absl::StatusOr<CollectiveTiming> CollectiveTiming::Create(const Cluster& cluster, const CollectivesPlan& plan,
                                                          const std::vector<GroupLayout>& layouts) {
  absl::StatusOr<CollectiveCostModel> model = CollectiveCostModel::Create(cluster, plan);
  if (!model.ok()) return model.status();
  CollectiveTiming timing(*std::move(model));
  for (const GroupLayout& l : layouts) {
    absl::StatusOr<GroupShape> shape = StridedGroupShape(cluster, 0, l.stride, l.size);
    if (!shape.ok()) return shape.status();
    timing.shapes_.push_back(*shape);
  }
  return timing;
}

CollectiveCost CollectiveTiming::Cost(int layout, CollectiveOp op, double bytes, bool a2av) const {
  const GroupShape& g = shapes_[layout];
  if (!a2av) return model_.Estimate(op, g, bytes);
  // Uniform destinations: of the p - 1 peers, g - 1 share the host, Z - g the zone, p - Z are beyond.
  const double p = g.members;
  AllToAllvLoad load;
  if (p > 1) {
    const double host = g.members_per_host, zone = std::max<double>(g.members_per_zone, host);
    load.bytes_per_tier[0] = bytes * (host - 1) / (p - 1);
    load.bytes_per_tier[1] = bytes * (zone - host) / (p - 1);
    load.bytes_per_tier[2] = bytes * (p - zone) / (p - 1);
  }
  return model_.EstimateAllToAllv(g, load);
}

}  // namespace gemtb::sim
