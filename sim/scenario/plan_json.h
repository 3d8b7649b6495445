// The scenario's `plan`, `batches` and `noise` sections, parsed and checked
// against the cluster and the model. The scenario parser (scenario_json.h) calls these after the
// cluster and the model are known; errors name the JSON path, value and rule.
#ifndef GEMTB_SIM_SCENARIO_PLAN_JSON_H_
#define GEMTB_SIM_SCENARIO_PLAN_JSON_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "sim/scenario/scenario.h"

namespace gemtb::model {
struct ModelGraph;
}

namespace gemtb::sim {

// `warnings` collects valid but doubtful choices (an MP group wider than a zone, EP off NVLink).
absl::StatusOr<Plan> ParsePlan(const nlohmann::json& json, const Cluster& cluster, const model::ModelGraph& model,
                               std::vector<std::string>* warnings);

absl::StatusOr<Batches> ParseBatches(const nlohmann::json& json, const Cluster& cluster,
                                     const model::ModelGraph& model);

absl::StatusOr<Noise> ParseNoise(const nlohmann::json& json, const Cluster& cluster);

// The collective op names and the algorithm names plan.collectives.algo accepts.
const std::vector<std::string>& CollectiveOpNames();
const std::vector<std::string>& CollectiveAlgoNames();

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_SCENARIO_PLAN_JSON_H_
