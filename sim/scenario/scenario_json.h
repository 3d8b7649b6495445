// scenario.json -> Scenario: the validating parser of the simulator's input.
//
// A scenario file holds `seed`, the five sections `model`, `cluster`, `plan`, `batches`, `noise`
// (each inline or a path relative to the scenario file's folder), and optionally `name` and
// `assumptions`. Every field is validated before anything runs; errors are InvalidArgument naming
// the JSON path, the value and the rule, e.g.
//   plan.dense.fsdp_shard_group: 96 does not divide world_size 4096
// Unknown keys are errors. The cluster section is parsed by sim/network/cluster_json.h, the model by
// model/description (a model.json object or file, or a config name such as "gem-scale" or a config
// file, expanded into the op graph).
//
// The model section:  "gem-scale" | "path/model.json" | "path/config.json" | {model.json object}
//                     | {"config": "gem-scale" or path}
//
// The plan section, every key optional:
//   {"cap_groups_at_world_size": false,   // groups larger than the world shrink to it (sweeps)
//    "dense": {"fsdp_shard_group", "ep_degree", "expert_shard_group", "dim_order": [...],
//              "prefetch_depth", "reshard_after_forward", "bucket_bytes", "comm_dtype"},
//    "sparse": gemtb ref embed's plan object {"default": {"type", "owner", "shards"}, "tables": {...},
//              "mp_group", "fully_sharded", "sync_period", "state_sync", "cw_state", "gather",
//              "keep_gathered"},
//    "layout": {"sparse_order": [shard, mp, dp in any order], "sparse_shard_group": F},  // scenario.h
//    "torchrec_plan": {"tables": {"<table>": {"sharding_type", "ranks": [..]}}},  // torchrec_plan.h
//    "collectives": {"library": "sm_based|sm_free", "sms_per_collective", "algo": {op: algo},
//              "cost_mode": "alpha_beta|nccl", "flow": "none|maxmin", "eta_tables", "a2av_end"},
//    "memory": {"budget_policy": "per_region|uniform|none", "reserve_bytes", "act_quant": "bf16|fp8|mx4"},
//    "pipeline": {"sparse_ahead": 0|1}}   // 1: TorchRec's semi-synchronous pipeline (scenario.h)
//
// The batches section:
//   {"local_batch": 1024 | "global_batch": N,
//    "features": [law, ...]            // one per model sequence, in order; a law may carry "count": n
//    "assignment": {"policy": "random|bbs|global|padded|none", "sub_batch", "pool_factor", "max_len"},
//    "warmup_steps", "measured_steps",
//    "id_zipf": s | {"default": s, "tables": {"<table>": s}},      // hot-id skew, s in [0, 4] (default 0)
//    "pooling": p | {"default": p, "tables": {"<table>": p}}}      // ids per pooled bag, (0, 10000] (default 1)
//   law: {"lognormal": {"mu" | "median", "sigma", "min", "max", "corr"}}
//      | {"histogram": {"bins": [[length, weight], ...]}} | {"zipf": {"s", "min", "max"}}
//
// The noise section:
//   {"step_sigma", "slow_ranks": {"ranks": [..]} | {"fraction": f}, "factor"}, "collective_jitter_sigma"}
//
// Overrides, applied after the section files are read (so a scenario can reference a shared cluster
// file and change a few of its fields):
//   "overrides": {"cluster.zone_size": 2048, "cluster.calibration.efficiency.ops.linear": 0.45}
//
// Assumptions (unpublished values, listed in reports and swept for sensitivity):
//   "assumptions": [{"name": "zone size", "paths": ["cluster.zone_size"], "low": 1024, "high": 4096,
//                    "note": "..."},
//                   {"name": "RoCE alpha", "paths": ["cluster.tiers[1].alpha_us", "cluster.tiers[2].alpha_us"],
//                    "low_factor": 0.5, "high_factor": 2}]
//   Absolute low/high need a single path; factors scale every path's value. A path is a dotted JSON
//   path into the scenario (sections inlined); "model.tables[*].rows" is the model's total table rows
//   (setting it scales every table's rows).
#ifndef GEMTB_SIM_SCENARIO_SCENARIO_JSON_H_
#define GEMTB_SIM_SCENARIO_SCENARIO_JSON_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "sim/scenario/scenario.h"

namespace gemtb::sim {

// A scenario document with every section inlined (file references read) and the model parsed once,
// so that sweeps and sensitivity runs can edit fields and rebuild cheaply.
struct ScenarioDocument {
  nlohmann::json json;  // the scenario with sections inlined and `overrides` applied; "model" as written
  std::string base_dir;         // folder the relative paths were resolved against
  std::string cluster_base_dir; // folder of the cluster file (its calibration reference resolves there)
  std::string name;             // file stem (or `name`)
  std::shared_ptr<const model::ModelGraph> model;
  double model_rows_scale = 1;  // "model.tables[*].rows" override applied on Build
};

// Reads a scenario file; relative section paths resolve against its folder.
absl::StatusOr<ScenarioDocument> LoadScenarioDocument(const std::string& path);
// The same from JSON already in memory.
absl::StatusOr<ScenarioDocument> LoadScenarioDocument(const nlohmann::json& json, const std::string& base_dir,
                                                      std::string name = "scenario");

// Validates the document and builds the Scenario.
absl::StatusOr<Scenario> BuildScenario(const ScenarioDocument& doc);

// LoadScenarioDocument + BuildScenario.
absl::StatusOr<Scenario> ParseScenario(const std::string& path);
absl::StatusOr<Scenario> ParseScenarioJson(const nlohmann::json& json, const std::string& base_dir,
                                           std::string name = "scenario");

// Sets one field by dotted JSON path ("plan.dense.fsdp_shard_group", "cluster.tiers[2].oversubscription",
// "model.tables[*].rows" = total rows) to `value` (JSON text: 128, 0.5, "sm_free", true; text that is
// not JSON is taken as a string). Missing objects on the way are created, array elements must exist;
// BuildScenario validates the result. For sweeps (`--set`) and sensitivity.
absl::Status SetField(ScenarioDocument& doc, std::string_view path, std::string_view value);
absl::Status SetFieldJson(ScenarioDocument& doc, std::string_view path, const nlohmann::json& value);

// The current value of a numeric field.
absl::StatusOr<double> GetNumber(const ScenarioDocument& doc, std::string_view path);

// Sets the world size (cluster.world_size), as a GPU-count sweep does.
absl::Status SetWorldSize(ScenarioDocument& doc, int world_size);

// Moves every field of an assumption to its low (factor = low_factor) or high case: a single-path
// assumption takes its low/high value exactly; several paths are each scaled by the factor.
// Integer fields stay integers (rounded).
enum class AssumptionCase { kLow, kHigh };
absl::Status ApplyAssumption(ScenarioDocument& doc, const Assumption& assumption, AssumptionCase which);

// sim/scenarios/gem-default.json of the data folder (model/description/data_dir.h).
std::string DefaultScenarioPath();

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_SCENARIO_SCENARIO_JSON_H_
