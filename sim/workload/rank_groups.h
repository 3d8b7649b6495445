// Process groups of the plan: for every
// group class, which ranks form a group. Every class here is a strided group
// {base, base + stride, ..., base + (size - 1) * stride}; the innermost dimension of the plan's
// dim_order takes contiguous ranks (NVLink), so a class's stride is the product of the sizes of the
// dimensions inside it.
//
//   dense-shard   S consecutive ranks (FSDP shard group), or stride R/S when "replica" is inner
//   dense-replica R/S ranks of equal r mod S
//   ep            E ranks, e = r mod E (innermost)
//   expert-shard  S_E ranks with equal e, stride E
//   sparse-intra  V3's full-sharding group: F of the N = R/M replicas of an MP position
//   sparse-mp     M ranks, one per position
//   sparse-replica the N replicas (V2's sync), or with F < N the N/F copies of one sub-block
// The sparse strides follow plan.layout.sparse_order (shard, mp, dp); by default F = N and
// rank = m*N + rho: sparse-intra N consecutive ranks, sparse-mp stride N.
#ifndef GEMTB_SIM_WORKLOAD_RANK_GROUPS_H_
#define GEMTB_SIM_WORKLOAD_RANK_GROUPS_H_

#include <array>

#include "absl/status/statusor.h"
#include "sim/scenario/scenario.h"

namespace gemtb::sim {

inline constexpr int kNumGroupClasses = 7;

struct GroupLayout {
  int size = 1;    // members per group
  int stride = 1;  // distance between consecutive members
  int count = 1;   // groups in the world = world / size

  // The group of `rank` (0..count-1) and its position inside it (0..size-1).
  int GroupOf(int rank) const { return (rank / (stride * size)) * stride + rank % stride; }
  int PositionOf(int rank) const { return (rank / stride) % size; }
  // The first member of group g.
  int BaseOf(int group) const { return (group / stride) * stride * size + group % stride; }
  int Member(int group, int position) const { return BaseOf(group) + position * stride; }
};

struct RankGroups {
  int world = 1;
  std::array<GroupLayout, kNumGroupClasses> layouts;
  const GroupLayout& of(GroupClass c) const { return layouts[static_cast<int>(c)]; }
};

// Builds the layouts from plan.dense and plan.sparse for `world` ranks. Errors name the plan field
// and value when a group size does not divide its parent dimension.
absl::StatusOr<RankGroups> BuildRankGroups(const Plan& plan, int world);

std::string_view GroupClassName(GroupClass c);  // dense-shard, dense-replica, ep, ...

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_WORKLOAD_RANK_GROUPS_H_
