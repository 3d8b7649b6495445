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
#include <optional>
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

// One table shard a rank of a job with sharded tables holds (gpu/embedding/shard_routing.h): its
// table, its index in the plan's layout (model/sharding/shard_layout.h), the rank's replica of it
// (2D plans; -1 for 1D), its rows and columns.
struct GpuShardKey {
  int table = 0;
  int shard = 0;
  int replica = -1;
  int64_t rows = 0;
  int64_t cols = 0;
};

// A rank's table shards (state.table_shards, described by `keys` in the same order) as arrays
// "table.<name>.shard<k>.weights" [rows, cols] and ".adagrad" [rows] (2D: "...shard<k>.replica<r>..."):
// the arrays that rank writes.
reference::model::NamedArrays GpuShardArrays(const gemtb::model::ModelConfig& config,
                                             const gpu::train::TrainerOptions& options,
                                             const gpu::train::TrainerState& state, const std::vector<GpuShardKey>& keys);

// What rank `rank` of a job writes of its part of the state (TrainerRankState), no array twice in
// the job: rank 0 "step", "options", "adam.bias_products", "tables.step"; a rank of shard group 0
// its dense shard as "params.part<q>", "adam.m.part<q>", "adam.v.part<q>" (float32 [its values]);
// the replicated tables it holds under their whole names, or its table shards (GpuShardArrays).
reference::model::NamedArrays GpuRankArrays(const gemtb::model::ModelConfig& config,
                                            const gpu::train::TrainerOptions& options, int rank,
                                            const gpu::train::TrainerRankState& state,
                                            const std::vector<GpuShardKey>& keys);

// The state the arrays hold, for a trainer of `config` and `options`. The dense arrays whole
// ("params", ...) or as a job's parts ("params.part0", "params.part1", ... in order, together P values). FailedPrecondition naming the
// array (and for "options" the entry and both values) when one is missing, has another dtype or
// shape, or was made with other options; an oracle's checkpoint is refused as such.
// With `shards` (a rank of a job with sharded tables): its table shards from their arrays instead
// of the whole tables.
absl::StatusOr<gpu::train::TrainerState> GpuStateFromArrays(const gemtb::model::ModelConfig& config,
                                                            const gpu::train::TrainerOptions& options,
                                                            const reference::model::NamedArrays& arrays,
                                                            const std::optional<std::vector<GpuShardKey>>& shards = std::nullopt);

}  // namespace gemtb::cli

#endif  // GEMTB_TOOLS_GEMTB_GPU_TRAIN_STATE_H_
