// StridedGroupShape: how a strided group of ranks spreads over hosts and zones.
#include <algorithm>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sim/network/cluster_json.h"
#include "sim/network/collective_cost.h"

namespace gemtb::sim {

absl::StatusOr<GroupShape> StridedGroupShape(const Cluster& cluster, int first, int stride, int count) {
  if (count < 1) return absl::InvalidArgumentError(absl::StrCat("group count: ", count, " must be >= 1"));
  if (stride < 1) return absl::InvalidArgumentError(absl::StrCat("group stride: ", stride, " must be >= 1"));
  if (cluster.gpus_per_host < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster.gpus_per_host: ", cluster.gpus_per_host, " must be >= 1"));
  }
  const int64_t last = static_cast<int64_t>(first) + static_cast<int64_t>(stride) * (count - 1);
  if (first < 0 || (cluster.world_size > 0 && last >= cluster.world_size)) {
    return absl::InvalidArgumentError(absl::StrCat("group ranks ", first, "..", last, " (stride ", stride,
                                                   ") fall outside world_size ", cluster.world_size));
  }
  const int64_t gpus_per_host = cluster.gpus_per_host;
  const int64_t zone = cluster.zone_size > 0 ? cluster.zone_size : std::max<int64_t>(last + 1, gpus_per_host);
  // Count members per host and per zone; the busiest host/zone is the bottleneck, and for the regular
  // groups dim_order produces every touched host holds the same number.
  std::map<int64_t, int> per_host, per_zone;
  for (int i = 0; i < count; ++i) {
    const int64_t rank = first + static_cast<int64_t>(stride) * i;
    ++per_host[rank / gpus_per_host];
    ++per_zone[rank / zone];
  }
  GroupShape shape;
  shape.members = count;
  for (const auto& [host, n] : per_host) shape.members_per_host = std::max(shape.members_per_host, n);
  for (const auto& [z, n] : per_zone) shape.members_per_zone = std::max(shape.members_per_zone, n);
  shape.hosts = static_cast<int>(per_host.size());
  shape.zones = static_cast<int>(per_zone.size());
  return shape;
}

absl::StatusOr<GroupShape> ContiguousGroupShape(const Cluster& cluster, int members) {
  return StridedGroupShape(cluster, 0, 1, members);
}

}  // namespace gemtb::sim
