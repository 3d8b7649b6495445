// plan.torchrec_plan: a TorchRec-style sharding plan (per table, ParameterSharding's sharding_type
// and ranks) on top of plan.sparse. The ranks are positions of one sharding group (the MP group of
// M ranks; the world in 1D), as TorchRec plans the group DMPCollection replicates.
//
//   {"tables": {"<table>": {"sharding_type": "table_wise", "ranks": [3]}, ...}}
//
//   data_parallel   every rank of the group            -> DP
//   table_wise      one rank, the table's owner         -> TW
//   row_wise        every rank of the group             -> RW
//   column_wise     c ranks, column shard i on ranks[i] -> CW, c shards (c divides the dim)
//   table_row_wise  the g ranks of one host             -> TWRW on that host
// Tables the plan does not name keep plan.sparse's sharding.
#ifndef GEMTB_SIM_SCENARIO_TORCHREC_PLAN_H_
#define GEMTB_SIM_SCENARIO_TORCHREC_PLAN_H_

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "sim/scenario/scenario.h"

namespace gemtb::model {
struct ModelGraph;
}

namespace gemtb::sim {

// Rewrites `sparse`'s tables from the TorchRec plan `json` for an MP group of `mp_group` positions,
// `host_positions` of them per host. Errors name the JSON path (plan.torchrec_plan.tables.<table>...),
// the value and the rule: an unknown table, a sharding type name, a rank outside the group, a rank
// set the type cannot have.
absl::Status ApplyTorchRecPlan(const nlohmann::json& json, const model::ModelGraph& model, int mp_group,
                               int host_positions, SparsePlan* sparse);

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_SCENARIO_TORCHREC_PLAN_H_
