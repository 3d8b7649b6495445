// The sparse sharding vocabulary: sharding types, the CW optimizer
// state and V3 gather modes, and the typed plan that reference/ executes and sim/ prices. Names
// (JSON, reports) and enums are tied by one table each in sharding_types.cc.
#ifndef GEMTB_MODEL_SHARDING_SHARDING_TYPES_H_
#define GEMTB_MODEL_SHARDING_SHARDING_TYPES_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace gemtb {

// As TorchRec's ShardingType: data parallel, table-wise, row-wise, column-wise, table-row-wise,
// and GRID (column shards, each placed table-row-wise).
enum class ShardingType { kDataParallel, kTableWise, kRowWise, kColumnWise, kTableRowWise, kGrid };

// Rowwise-Adagrad state of a column-sharded table: `shared` [proj] keeps the full-row state on every
// column shard and all-gathers the partial square sums (== unsharded); `per_shard` (TorchRec) gives
// each shard its own state over its own columns.
enum class CwState { kShared, kPerShard };

// V3 gathers every row of a shard (`all`) or only the rows the step's ids touch (`touched`).
enum class GatherMode { kAll, kTouched };

// JSON names: "DP", "TW", "RW", "CW", "TWRW", "GRID"; "shared", "per_shard"; "all", "touched".
const char* ShardingTypeName(ShardingType type);
const char* CwStateName(CwState state);
const char* GatherModeName(GatherMode mode);
std::optional<ShardingType> ShardingTypeFromName(std::string_view name);
std::optional<CwState> CwStateFromName(std::string_view name);
std::optional<GatherMode> GatherModeFromName(std::string_view name);
// Every name of each table, in enum order (for "is not one of ..." messages).
const std::vector<std::string>& ShardingTypeNames();
const std::vector<std::string>& CwStateNames();
const std::vector<std::string>& GatherModeNames();

// Column-sharded types (a `shards` count) and types placed on host groups.
bool HasColumnShards(ShardingType type);
bool PlacedOnHosts(ShardingType type);

struct TableSharding {
  ShardingType type = ShardingType::kTableWise;
  int owner = -1;  // TW: MP-group position; -1 = table index mod M
  int shards = 1;  // CW, GRID: column shards
  // The MP-group positions a TorchRec plan names (ParameterSharding.ranks; the simulator's
  // plan.torchrec_plan): CW's shard i on ranks[i], TWRW on the host of ranks[0]. Empty: the default
  // placement rules (placement.h), the only ones reference/ executes.
  std::vector<int> ranks = {};
  friend bool operator==(const TableSharding&, const TableSharding&) = default;
};

// A sharding plan resolved per table: `tables` has one entry per table of the model, in its order.
// mp_group M = 0 means world_size (1D); a smaller M gives 2D sharding over N = world_size / M
// replicas (rank = m*N + rho), fully sharded (V3) if `fully_sharded`.
struct ShardingPlanSpec {
  std::vector<TableSharding> tables;
  int mp_group = 0;             // M; 0 = world_size
  bool fully_sharded = false;   // V3
  int sync_period = 1;          // k: V2 syncs replicas every k steps
  bool state_sync = true;       // V2 syncs optimizer state too
  CwState cw_state = CwState::kShared;
  GatherMode gather = GatherMode::kAll;
  bool keep_gathered = false;   // V3: backward reuses the forward's gathered copy
  friend bool operator==(const ShardingPlanSpec&, const ShardingPlanSpec&) = default;
};

// M and N of a validated plan.
int MpGroupSize(const ShardingPlanSpec& plan, int world_size);
int ReplicaCount(const ShardingPlanSpec& plan, int world_size);

// How many consecutive MP-group positions share a host (TWRW/GRID's host group g), or an error
// when hosts do not split the MP group into equal groups of consecutive positions. Rank m*N + rho
// lives on host floor((m*N + rho) / gpus_per_host).
absl::StatusOr<int> HostGroupPositions(int mp_group, int replicas, int gpus_per_host);

}  // namespace gemtb

#endif  // GEMTB_MODEL_SHARDING_SHARDING_TYPES_H_
