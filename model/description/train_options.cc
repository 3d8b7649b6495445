#include "model/description/train_options.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace gemtb::model {

absl::StatusOr<SparsePipeline> ParseSparsePipeline(std::string_view text, std::string_view field) {
  if (text == "sync") return SparsePipeline::kSync;
  if (text == "semi-sync") return SparsePipeline::kSemiSync;
  return absl::InvalidArgumentError(absl::StrCat(std::string(field), ": '", std::string(text), "' is not sync or semi-sync"));
}

absl::Status ValidateTrainOptions(const TrainOptions& options) {
  if (options.batch < 1) return absl::InvalidArgumentError(absl::StrCat("batch: ", options.batch, " must be >= 1"));
  if (!(std::isfinite(options.lr) && options.lr >= 0))
    return absl::InvalidArgumentError(absl::StrCat("lr: ", options.lr, " must be finite and >= 0"));
  if (!(std::isfinite(options.table_lr) && options.table_lr >= 0))
    return absl::InvalidArgumentError(absl::StrCat("table_lr: ", options.table_lr, " must be finite and >= 0"));
  if (!(options.beta1 >= 0 && options.beta1 < 1) || !(options.beta2 >= 0 && options.beta2 < 1))
    return absl::InvalidArgumentError(
        absl::StrCat("beta1: ", options.beta1, ", beta2: ", options.beta2, ": each must be in [0, 1)"));
  if (!(std::isfinite(options.eps) && options.eps > 0))
    return absl::InvalidArgumentError(absl::StrCat("eps: ", options.eps, " must be finite and > 0"));
  if (options.total_steps < 1)
    return absl::InvalidArgumentError(absl::StrCat("total_steps: ", options.total_steps, " must be >= 1"));
  if (!(options.table_decay >= 0 && options.table_decay <= 1))
    return absl::InvalidArgumentError(absl::StrCat("table_decay: ", options.table_decay, " must be in [0, 1]"));
  return absl::OkStatus();
}

}  // namespace gemtb::model
