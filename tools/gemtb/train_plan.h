// `gemtb ref train --plan FILE|NAME`: the sharding plan of the tables. FILE holds the plan object of
// model/sharding/sharding_plan_json.h (the simulator's plan.sparse; a file with a top-level "sparse"
// object gives that one); NAME is DP, TW, RW or TWRW for every table.
#ifndef GEMTB_TOOLS_GEMTB_TRAIN_PLAN_H_
#define GEMTB_TOOLS_GEMTB_TRAIN_PLAN_H_

#include <string>

#include "absl/status/statusor.h"
#include "model/embedding/embedding_config.h"
#include "model/sharding/sharding_types.h"

namespace gemtb::cli {

struct TrainPlan {
  ShardingPlanSpec spec;
  std::string text;  // the plan's JSON as given (compact), what ranks and checkpoints agree on
};

// InvalidArgument prefixed "--plan: " naming the file, the name or the plan's field.
absl::StatusOr<TrainPlan> LoadTrainPlan(const std::string& arg, const EmbeddingConfig& tables, int world_size,
                                        int gpus_per_host);

}  // namespace gemtb::cli

#endif  // GEMTB_TOOLS_GEMTB_TRAIN_PLAN_H_
