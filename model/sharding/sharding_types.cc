#include "model/sharding/sharding_types.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gemtb {
namespace {

template <typename E, size_t K>
using NameTable = std::array<std::pair<E, const char*>, K>;

constexpr NameTable<ShardingType, 6> kShardingTypes = {{{ShardingType::kDataParallel, "DP"},
                                                        {ShardingType::kTableWise, "TW"},
                                                        {ShardingType::kRowWise, "RW"},
                                                        {ShardingType::kColumnWise, "CW"},
                                                        {ShardingType::kTableRowWise, "TWRW"},
                                                        {ShardingType::kGrid, "GRID"}}};
constexpr NameTable<CwState, 2> kCwStates = {{{CwState::kShared, "shared"}, {CwState::kPerShard, "per_shard"}}};
constexpr NameTable<GatherMode, 2> kGatherModes = {{{GatherMode::kAll, "all"}, {GatherMode::kTouched, "touched"}}};

template <typename E, size_t K>
const char* NameOf(const NameTable<E, K>& table, E value) {
  for (const auto& [e, name] : table) {
    if (e == value) return name;
  }
  return "?";
}

template <typename E, size_t K>
std::optional<E> FromName(const NameTable<E, K>& table, std::string_view name) {
  for (const auto& [e, n] : table) {
    if (n == name) return e;
  }
  return std::nullopt;
}

template <typename E, size_t K>
std::vector<std::string> NamesOf(const NameTable<E, K>& table) {
  std::vector<std::string> names;
  for (const auto& entry : table) names.emplace_back(entry.second);
  return names;
}

}  // namespace

const char* ShardingTypeName(ShardingType type) { return NameOf(kShardingTypes, type); }
const char* CwStateName(CwState state) { return NameOf(kCwStates, state); }
const char* GatherModeName(GatherMode mode) { return NameOf(kGatherModes, mode); }
std::optional<ShardingType> ShardingTypeFromName(std::string_view name) { return FromName(kShardingTypes, name); }
std::optional<CwState> CwStateFromName(std::string_view name) { return FromName(kCwStates, name); }
std::optional<GatherMode> GatherModeFromName(std::string_view name) { return FromName(kGatherModes, name); }

const std::vector<std::string>& ShardingTypeNames() {
  static const std::vector<std::string> names = NamesOf(kShardingTypes);
  return names;
}
const std::vector<std::string>& CwStateNames() {
  static const std::vector<std::string> names = NamesOf(kCwStates);
  return names;
}
const std::vector<std::string>& GatherModeNames() {
  static const std::vector<std::string> names = NamesOf(kGatherModes);
  return names;
}

bool HasColumnShards(ShardingType type) { return type == ShardingType::kColumnWise || type == ShardingType::kGrid; }
bool PlacedOnHosts(ShardingType type) { return type == ShardingType::kTableRowWise || type == ShardingType::kGrid; }

int MpGroupSize(const ShardingPlanSpec& plan, int world_size) { return plan.mp_group > 0 ? plan.mp_group : world_size; }
int ReplicaCount(const ShardingPlanSpec& plan, int world_size) { return world_size / MpGroupSize(plan, world_size); }

absl::StatusOr<int> HostGroupPositions(int mp_group, int replicas, int gpus_per_host) {
  // Positions m share a host in runs of gpus_per_host / N when N divides gpus_per_host, and never
  // when gpus_per_host divides N.
  int per_host = 0;
  if (gpus_per_host % replicas == 0) {
    per_host = std::min(gpus_per_host / replicas, mp_group);
  } else if (replicas % gpus_per_host == 0) {
    per_host = 1;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "gpus_per_host ", gpus_per_host, " and the replica count N=", replicas, " do not divide one another"));
  }
  if (mp_group % per_host != 0) {
    return absl::InvalidArgumentError(absl::StrCat("hosts of ", per_host, " MP-group positions (gpus_per_host ",
                                                   gpus_per_host, ", N=", replicas, ") do not divide the MP group of ",
                                                   mp_group));
  }
  return per_host;
}

}  // namespace gemtb
