#include "sim/workload/rank_groups.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gemtb::sim {
namespace {

absl::Status CheckDivides(const char* field, int value, int parent, const char* parent_name) {
  if (value < 1) return absl::InvalidArgumentError(absl::StrCat(field, ": ", value, " must be >= 1"));
  if (parent % value != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", value, " does not divide ", parent_name, " ", parent));
  }
  return absl::OkStatus();
}

// Position of `name` in dim_order (innermost first); absent names go after the listed ones in the
// given default order.
int Rank(const std::vector<std::string>& order, const std::string& name, int fallback) {
  const auto it = std::find(order.begin(), order.end(), name);
  return it == order.end() ? 100 + fallback : static_cast<int>(it - order.begin());
}

}  // namespace

std::string_view GroupClassName(GroupClass c) {
  switch (c) {
    case GroupClass::kDenseShard: return "dense-shard";
    case GroupClass::kDenseReplica: return "dense-replica";
    case GroupClass::kEp: return "ep";
    case GroupClass::kExpertShard: return "expert-shard";
    case GroupClass::kSparseMp: return "sparse-mp";
    case GroupClass::kSparseReplica: return "sparse-replica";
    case GroupClass::kSparseIntra: return "sparse-intra";
  }
  return "?";
}

absl::StatusOr<RankGroups> BuildRankGroups(const Plan& plan, int world) {
  if (world < 1) return absl::InvalidArgumentError(absl::StrCat("cluster.world_size: ", world, " must be >= 1"));
  RankGroups g;
  g.world = world;
  auto set = [&](GroupClass c, int size, int stride) {
    GroupLayout& l = g.layouts[static_cast<int>(c)];
    l.size = size;
    l.stride = stride;
    l.count = world / size;
  };

  // Dense: shard and replica, ordered by dim_order.
  const int shard = std::min(plan.dense.fsdp_shard_group, world);
  if (auto s = CheckDivides("plan.dense.fsdp_shard_group", shard, world, "world_size"); !s.ok()) return s;
  const int replica = world / shard;
  const auto& order = plan.dense.dim_order;
  if (Rank(order, "shard", 0) <= Rank(order, "replica", 1)) {
    set(GroupClass::kDenseShard, shard, 1);
    set(GroupClass::kDenseReplica, replica, shard);
  } else {
    set(GroupClass::kDenseReplica, replica, 1);
    set(GroupClass::kDenseShard, shard, replica);
  }

  // Experts: ep innermost by default, then expert_shard; the expert replica is implied.
  const int ep = std::min(plan.dense.ep_degree, world);
  if (auto s = CheckDivides("plan.dense.ep_degree", ep, world, "world_size"); !s.ok()) return s;
  const int eshard = std::min(plan.dense.expert_shard_group, world / ep);
  if (auto s = CheckDivides("plan.dense.expert_shard_group", eshard, world / ep, "world_size / ep_degree");
      !s.ok()) {
    return s;
  }
  if (Rank(order, "ep", 0) <= Rank(order, "expert_shard", 1)) {
    set(GroupClass::kEp, ep, 1);
    set(GroupClass::kExpertShard, eshard, ep);
  } else {
    set(GroupClass::kExpertShard, eshard, 1);
    set(GroupClass::kEp, ep, eshard);
  }

  // Sparse: R = M * N, N = F * (N/F); the dimensions shard (F), mp (M) and dp (N/F) in plan.layout's
  // sparse_order, innermost first (the default F = N, {shard, mp, dp}: rank = m * N + rho).
  const int mp = plan.sparse.mp_group <= 0 ? world : std::min(plan.sparse.mp_group, world);
  if (auto s = CheckDivides("plan.sparse.mp_group", mp, world, "world_size"); !s.ok()) return s;
  const int n = world / mp;
  const int f = plan.layout.sparse_shard_group <= 0 ? n : std::min(plan.layout.sparse_shard_group, n);
  if (auto s = CheckDivides("plan.layout.sparse_shard_group", f, n, "world_size / mp_group"); !s.ok()) return s;
  const int sizes[3] = {f, mp, n / f};  // shard, mp, dp
  int stride[3] = {1, 1, 1};
  int inner = 1;
  for (const std::string& d : plan.layout.sparse_order) {
    const int k = d == "shard" ? 0 : d == "mp" ? 1 : 2;
    stride[k] = inner;
    inner *= sizes[k];
  }
  set(GroupClass::kSparseIntra, f, stride[0]);
  set(GroupClass::kSparseMp, mp, stride[1]);
  // V2 syncs the N replicas of a position (F = N: the shard dimension); V3 with F < N its N/F copies.
  if (f < n) {
    set(GroupClass::kSparseReplica, n / f, stride[2]);
  } else {
    set(GroupClass::kSparseReplica, n, stride[0]);
  }
  return g;
}

}  // namespace gemtb::sim
