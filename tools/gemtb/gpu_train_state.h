// `gemtb train`'s checkpoint content: the GPU trainer's state (gpu/train/trainer.h) as the named
// arrays of the oracle's Trainer::StateArrays (reference/model/trainer.h: the same names, order,
// dtypes and shapes), and back. Host code only, so a build without CUDA still checks a checkpoint.
//
// "options" holds the oracle's 13 entries in its order, with the gradient blocks 0: the GPU trainer
// sums a batch's gradient in one pass, not in the oracle's sample blocks (>= 1), so its steps have
// other bits. The 0 marks a GPU checkpoint, and neither trainer resumes the other's.
#ifndef GEMTB_TOOLS_GEMTB_GPU_TRAIN_STATE_H_
#define GEMTB_TOOLS_GEMTB_GPU_TRAIN_STATE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "gpu/train/trainer.h"
#include "model/description/model_config.h"
#include "reference/model/checkpoint.h"

namespace gemtb::cli {

// The "options" entries of a GPU trainer with `options` and `num_params` dense parameters.
std::vector<double> GpuTrainOptionsEntries(const gpu::train::TrainerOptions& options, int64_t num_params);

// The state as named arrays (tables.step is the trainer's step: the GPU trainer's tables take one
// optimizer step per training step).
reference::model::NamedArrays GpuStateArrays(const gemtb::model::ModelConfig& config,
                                             const gpu::train::TrainerOptions& options,
                                             const gpu::train::TrainerState& state);

// The state the arrays hold, for a trainer of `config` and `options`. FailedPrecondition naming the
// array (and for "options" the entry and both values) when one is missing, has another dtype or
// shape, or was made with other options; an oracle's checkpoint is refused as such.
absl::StatusOr<gpu::train::TrainerState> GpuStateFromArrays(const gemtb::model::ModelConfig& config,
                                                            const gpu::train::TrainerOptions& options,
                                                            const reference::model::NamedArrays& arrays);

}  // namespace gemtb::cli

#endif  // GEMTB_TOOLS_GEMTB_GPU_TRAIN_STATE_H_
