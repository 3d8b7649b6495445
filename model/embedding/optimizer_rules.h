// The rules a table's fused optimizer must satisfy on every executor (the CPU oracle's
// ValidateEmbeddingConfig and the GPU's CanRun both apply them): finite hyper-parameters, SGD
// without a weight decay mode, Adam with none or decoupled (AdamW) decay. Host only.
#ifndef GEMTB_MODEL_EMBEDDING_OPTIMIZER_RULES_H_
#define GEMTB_MODEL_EMBEDDING_OPTIMIZER_RULES_H_

#include <cmath>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/embedding/embedding_config.h"

namespace gemtb {

// `table` names the table in errors, e.g. "tables[0] 'items'".
inline absl::Status ValidateOptimizerConfig(const OptimizerConfig& o, const std::string& table) {
  for (auto [field, v] : {std::pair{"lr", o.lr}, {"weight_decay", o.weight_decay}, {"eps", o.eps},
                          {"beta1", o.beta1}, {"beta2", o.beta2}}) {
    if (!std::isfinite(v)) {
      return absl::InvalidArgumentError(absl::StrCat(table, ": optimizer.", field, "=", v, " must be finite"));
    }
  }
  if (o.kind == OptimizerKind::kSgd && o.decay_mode != WeightDecayMode::kNone) {
    return absl::InvalidArgumentError(absl::StrCat(table, ": SGD takes no weight decay mode"));
  }
  if (o.kind == OptimizerKind::kAdam && o.decay_mode == WeightDecayMode::kL2) {
    return absl::InvalidArgumentError(absl::StrCat(table, ": Adam supports weight decay none or decoupled (AdamW)"));
  }
  return absl::OkStatus();
}

}  // namespace gemtb

#endif  // GEMTB_MODEL_EMBEDDING_OPTIMIZER_RULES_H_
