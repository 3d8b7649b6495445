// The GPU trainer's phase times (gpu/train/trainer.h's StepTimes) as the reports of `gemtb train`
// and `gemtb bench layers` write them: {"data", "embedding_fwd", "model", "embedding_bwd",
// "optimizer"} in ms.
#ifndef GEMTB_TOOLS_GEMTB_STEP_TIMES_JSON_H_
#define GEMTB_TOOLS_GEMTB_STEP_TIMES_JSON_H_

#include "gpu/train/trainer.h"
#include "nlohmann/json.hpp"

namespace gemtb::cli {

inline nlohmann::json StepTimesJson(const gpu::train::StepTimes& t) {
  return {{"data", t.data_ms},
          {"embedding_fwd", t.embedding_fwd_ms},
          {"model", t.model_ms},
          {"embedding_bwd", t.embedding_bwd_ms},
          {"optimizer", t.optimizer_ms}};
}

}  // namespace gemtb::cli

#endif  // GEMTB_TOOLS_GEMTB_STEP_TIMES_JSON_H_
