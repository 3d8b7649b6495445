// The sparse sharding plan (spec/embeddings-and-model.md §3.1-§3.2): the simulator's `plan.sparse`
// JSON object, parsed and checked against the embedding config and the world.
//
//   {"default": {"type": "DP|TW|RW|CW|TWRW|GRID", "owner": r, "shards": c},
//    "tables": {"<table name>": {"type": ..., "owner": r, "shards": c}, ...},
//    "mp_group": M, "fully_sharded": false, "sync_period": 1, "state_sync": true,
//    "cw_state": "shared" | "per_shard", "gather": "all" | "touched", "keep_gathered": false}
//
// Every key is optional except that each table needs a type (its own or the default's). `owner`
// (TW only) is a position in the MP group, 0 <= owner < M, default table index mod M; `shards`
// (CW and GRID, required there) is the number of column shards and must divide the table's dim.
// `mp_group` defaults to world_size (1D sharding); a smaller M gives 2D sharding over
// N = world_size / M replicas (rank = m*N + rho), fully sharded (V3) if `fully_sharded`.
// TWRW and GRID place tables on hosts of `gpus_per_host` consecutive ranks; in 2D the MP group's
// members on one host are gpus_per_host / N consecutive positions (1 when gpus_per_host <= N).
#ifndef GEMTB_REFERENCE_SHARDING_SHARDING_PLAN_H_
#define GEMTB_REFERENCE_SHARDING_SHARDING_PLAN_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/embedding/embedding_config.h"
#include "nlohmann/json.hpp"

namespace gemtb::reference {

// As TorchRec's ShardingType: data parallel, table-wise, row-wise, column-wise, table-row-wise,
// and GRID (column shards, each placed table-row-wise).
enum class ShardingType { kDataParallel, kTableWise, kRowWise, kColumnWise, kTableRowWise, kGrid };
const char* ShardingTypeName(ShardingType type);  // "DP", "TW", "RW", "CW", "TWRW", "GRID"

// Rowwise-Adagrad state of a column-sharded table: `shared` [proj] keeps the full-row state on every
// column shard and all-gathers the partial square sums (== unsharded); `per_shard` (TorchRec) gives
// each shard its own state over its own columns.
enum class CwState { kShared, kPerShard };
// V3 gathers every row of a shard (`all`) or only the rows the step's ids touch (`touched`).
enum class GatherMode { kAll, kTouched };

struct TableSharding {
  ShardingType type = ShardingType::kTableWise;
  int owner = -1;  // TW: MP-group position; -1 = table index mod M
  int shards = 1;  // CW, GRID: column shards
};

struct ShardingPlanSpec {
  std::vector<TableSharding> tables;  // one per config table, the default applied
  int mp_group = 0;                   // M; 0 = world_size
  bool fully_sharded = false;         // V3
  int sync_period = 1;                // k: V2 syncs replicas every k steps
  bool state_sync = true;             // V2 syncs optimizer state too
  CwState cw_state = CwState::kShared;
  GatherMode gather = GatherMode::kAll;
  bool keep_gathered = false;  // V3: backward reuses the forward's gathered copy
};

// Parses and validates; errors are InvalidArgument naming the JSON path and value, e.g.
// "plan.mp_group: 3 does not divide world_size 8".
absl::StatusOr<ShardingPlanSpec> ParseShardingPlan(const nlohmann::json& json, const EmbeddingConfig& config,
                                                   int world_size, int gpus_per_host);

// The checks of ParseShardingPlan on an already built spec (paths name the same JSON fields).
absl::Status ValidateShardingPlan(const ShardingPlanSpec& plan, const EmbeddingConfig& config, int world_size,
                                  int gpus_per_host);

// M and N of a validated plan.
int MpGroupSize(const ShardingPlanSpec& plan, int world_size);
int ReplicaCount(const ShardingPlanSpec& plan, int world_size);

// How many consecutive MP-group positions share a host (TWRW/GRID's host group g), or an error
// when hosts do not split the MP group into equal groups of consecutive positions.
absl::StatusOr<int> HostGroupPositions(int mp_group, int replicas, int gpus_per_host);

}  // namespace gemtb::reference

#endif  // GEMTB_REFERENCE_SHARDING_SHARDING_PLAN_H_
