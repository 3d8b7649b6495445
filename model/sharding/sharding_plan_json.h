// The one parser of a sparse sharding plan: the JSON object `gemtb ref embed` reads as "plan" and the
// simulator reads as `plan.sparse`:
//
//   {"default": {"type": "DP|TW|RW|CW|TWRW|GRID", "owner": r, "shards": c},
//    "tables": {"<table name>": {"type": ..., "owner": r, "shards": c}, ...},
//    "mp_group": M, "fully_sharded": false, "sync_period": 1, "state_sync": true,
//    "cw_state": "shared" | "per_shard", "gather": "all" | "touched", "keep_gathered": false}
//
// Every key is optional. A table takes its own entry's fields, the default's for those it leaves out,
// and type TW when neither names one. `owner` (TW only) is a position in the MP group,
// 0 <= owner < M, default table index mod M; `shards` (CW and GRID, required there) is the number of
// column shards and must divide the table's dim. `mp_group` defaults to world_size (1D sharding).
// TWRW and GRID place tables on hosts of `gpus_per_host` consecutive ranks; in 2D the MP group's
// members on one host are gpus_per_host / N consecutive positions (1 when gpus_per_host <= N).
#ifndef GEMTB_MODEL_SHARDING_SHARDING_PLAN_JSON_H_
#define GEMTB_MODEL_SHARDING_SHARDING_PLAN_JSON_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/embedding/embedding_config.h"
#include "model/sharding/sharding_types.h"
#include "nlohmann/json.hpp"

namespace gemtb {

// What the plan needs to know of a table: its name (the plan's key) and dim (column shards divide it).
struct PlanTable {
  std::string name;
  int64_t dim = 0;
};
std::vector<PlanTable> PlanTablesOf(const EmbeddingConfig& config);

struct ShardingPlanOptions {
  std::string path = "plan";  // JSON path of the plan object, prefixing every error
  // The simulator's plan.cap_groups_at_world_size: an mp_group above world_size becomes world_size.
  bool cap_mp_group_at_world_size = false;
};

// Parses and validates `json` for `tables` on `world_size` ranks of `gpus_per_host` per host. Errors
// are InvalidArgument naming the JSON path, the value and the rule, e.g.
// "plan.mp_group: 3 does not divide world_size 8".
absl::StatusOr<ShardingPlanSpec> ParseShardingPlan(const nlohmann::json& json, absl::Span<const PlanTable> tables,
                                                   int world_size, int gpus_per_host,
                                                   const ShardingPlanOptions& options = {});

// The checks of ParseShardingPlan on an already built spec (paths name the same JSON fields under
// options.path).
absl::Status ValidateShardingPlan(const ShardingPlanSpec& plan, absl::Span<const PlanTable> tables, int world_size,
                                  int gpus_per_host, const ShardingPlanOptions& options = {});

}  // namespace gemtb

#endif  // GEMTB_MODEL_SHARDING_SHARDING_PLAN_JSON_H_
