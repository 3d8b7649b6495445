// What the GEM-like model's trainers (the oracle's, reference/model/trainer.h, and the GPU's,
// gpu/train/trainer.h) need to take the same steps: data, seeds, batch, both optimizers and the
// learning-rate schedule (train_schedule.h). One struct, so the two cannot drift apart.
#ifndef GEMTB_MODEL_DESCRIPTION_TRAIN_OPTIONS_H_
#define GEMTB_MODEL_DESCRIPTION_TRAIN_OPTIONS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gemtb::model {

// When a step looks up its embeddings. kSync: step s reads the tables after s updates. kSemiSync
// (TorchRec's semi-synchronous pipeline): step s + 1's lookup runs during step s, after its dense
// backward and before its table update, so step s reads the tables after max(s - 1, 0) updates
// (steps 0 and 1 both read the init); the update of step s still applies its own gradients to the
// tables as they are then. What it buys: the next batch's lookup and embedding all-to-all beside
// this batch's dense work.
enum class SparsePipeline { kSync, kSemiSync };

// "sync" | "semi-sync" as the enum; InvalidArgument naming `field` and the text otherwise.
absl::StatusOr<SparsePipeline> ParseSparsePipeline(std::string_view text, std::string_view field);

struct TrainOptions {
  std::string data = "";       // data parameters: a built-in name or a JSON path ("" = the config's name)
  uint64_t seed = 1;           // parameter and table init (Philox key)
  uint64_t data_seed = 1;      // the generator's seed
  int64_t batch = 64;
  float lr = 1e-3f;            // dense Adam
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float table_lr = 0.2f;       // rowwise Adagrad on every table
  // Learning-rate schedule of both optimizers: constant, or linear decay from the full rate at step 0
  // to 0 at `total_steps` (the step count of the run; part of the numerics, so resume needs the same).
  bool linear_decay = true;
  float table_decay = 0.0f;    // the table rate decays by this fraction of the dense rate's decay (0..1)
  int64_t total_steps = 7000;
  SparsePipeline pipeline = SparsePipeline::kSync;
};

// InvalidArgument naming the first field out of range and its value.
absl::Status ValidateTrainOptions(const TrainOptions& options);

}  // namespace gemtb::model

#endif  // GEMTB_MODEL_DESCRIPTION_TRAIN_OPTIONS_H_
