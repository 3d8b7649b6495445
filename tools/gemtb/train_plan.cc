#include "tools/gemtb/train_plan.h"

#include "absl/strings/str_cat.h"
#include "model/json/user_file.h"
#include "model/sharding/sharding_plan_json.h"
#include "nlohmann/json.hpp"

namespace gemtb::cli {

absl::StatusOr<TrainPlan> LoadTrainPlan(const std::string& arg, const EmbeddingConfig& tables, int world_size,
                                        int gpus_per_host) {
  auto bad = [](const std::string& m) { return absl::InvalidArgumentError(absl::StrCat("--plan: ", m)); };
  nlohmann::json json;
  if (arg == "DP" || arg == "TW" || arg == "RW" || arg == "TWRW") {
    json = {{"default", {{"type", arg}}}};
  } else {
    absl::StatusOr<std::string> text = ReadUserFile(arg);
    if (!text.ok())
      return bad(
          absl::StrCat("'", arg, "' is neither DP, TW, RW, TWRW nor a readable file (", text.status().message(), ")"));
    json = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded()) return bad(absl::StrCat(arg, ": not valid JSON"));
    if (json.is_object() && json.contains("sparse")) json = json["sparse"];
    if (!json.is_object()) return bad(absl::StrCat(arg, ": the plan must be a JSON object"));
  }
  absl::StatusOr<ShardingPlanSpec> spec = ParseShardingPlan(json, PlanTablesOf(tables), world_size, gpus_per_host);
  if (!spec.ok()) return bad(std::string(spec.status().message()));
  return TrainPlan{*std::move(spec), json.dump()};
}

}  // namespace gemtb::cli
