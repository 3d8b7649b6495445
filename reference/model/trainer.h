// The CPU reference trainer of the GEM-like model: fp32 like a real trainer.
//
// One step: generate samples [step*B, (step+1)*B) of the data seed (model/data), look up the tables
// with the TBE oracle (MEAN pooling, sequences as NONE), run the model forward and backward
// (batch_pass.h, deterministic for any thread count), apply the TBE's fused rowwise Adagrad to the
// touched rows and Adam (fp32 op by op) to the dense parameters.
//
// Held-out evaluation reads sample indices from kHeldOutFirstIndex on (2^40), a range training
// never reaches, so evaluation samples are never trained on.
//
// The state is exported and imported as named arrays (io::NpyArray), which checkpoint.h writes as
// one file and golden/ can freeze:
//   "step" int64 [1]; "params" f32 [P]; "adam.m", "adam.v" f32 [P]; "adam.bias_products" f32 [2];
//   "table.<name>.weights" f32 [rows, dim]; "table.<name>.adagrad" f32 [rows];
//   "tables.step" int64 [1]; "options" f64 [...] (what must match on resume: seeds, batch, lrs);
//   under the semi-synchronous pipeline (TrainOptions::pipeline) after step 0 also the next step's
//   lookups, made before the last table update: "pipeline.pooled" f32 [B, W] and per sequence key
//   "pipeline.sequence.<key>" f32 [ids, D].
//
// The semi-synchronous pipeline (model/description/train_options.h): a step looks up the next
// step's batch after its dense backward and before its table update; with sharded tables the
// executor then holds two batches between forward and backward (1D and 2D V2 plans; fully sharded
// plans are refused).
#ifndef GEMTB_REFERENCE_MODEL_TRAINER_H_
#define GEMTB_REFERENCE_MODEL_TRAINER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "model/description/model_config.h"
#include "model/description/train_options.h"
#include "model/description/train_schedule.h"
#include "model/sharding/sharding_types.h"
#include "reference/collectives/collectives.h"
#include "reference/embedding/tbe.h"
#include "reference/io/npy.h"
#include "reference/model/data_parallel.h"
#include "reference/model/gem_model.h"
#include "reference/model/npy_dataset.h"

namespace gemtb::reference::model {

inline constexpr int64_t kHeldOutFirstIndex = int64_t{1} << 40;

// The shared options (model/description/train_options.h) and the oracle's own.
struct TrainOptions : gemtb::model::TrainOptions {
  int threads = 0;             // 0 = all; results do not depend on it
  int grad_blocks = 16;        // fixed gradient-sum blocks per batch (numerics, not parallelism)
};

struct TrainState {
  int64_t step = 0;
  std::vector<float> params;
  std::vector<float> adam_m, adam_v;
  float adam_b1 = 1.0f, adam_b2 = 1.0f;  // Adam's bias-correction products
  EmbeddingState tables;
};

// The schedule (model/description/train_schedule.h).
using gemtb::model::ScheduledRate;

struct StepResult {
  int64_t step = 0;       // the step just taken (1-based count after it)
  double loss = 0;        // the batch's masked BCE (nats per masked label)
  std::vector<double> predictions;  // [B, T] sigmoid(logit)
  std::vector<uint8_t> labels, masks;  // [B, T]
  std::vector<double> true_p;          // [B, T] the teacher's probabilities (the oracle predictor)
  // With KeepGradients(true): the step's gradients as its optimizers took them (the dense [P]; the
  // pooled embeddings' [B, sum_f D_f]; per sequence the events' [sum_b len_b, d]).
  std::vector<float> param_grad, pooled_grad;
  std::vector<std::vector<float>> event_grads;
};

struct EvalResult {
  int64_t samples = 0;
  std::vector<double> ne;         // per task, the model's NE on the held-out samples
  std::vector<double> oracle_ne;  // per task, the teacher's probabilities on the same samples
  std::vector<double> calibration;
  std::vector<int64_t> positives, count;
};

class Trainer {
 public:
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const gemtb::model::ModelConfig& config,
                                                         const TrainOptions& options);
  ~Trainer();

  // Trains on `set` (step s takes its samples s*B .. s*B + B - 1, modulo its size) instead of the
  // generator. The set is not part of the saved options: resume with the same set.
  void UseTrainingSet(std::shared_ptr<const NpyDataset> set);
  // Runs every later Step as rank group->rank() of a data-parallel job (data_parallel.h), to the
  // single-process bits; InvalidArgument when the group's size does not fit grad_blocks and batch.
  // The group outlives the trainer's use of it.
  absl::Status UseDataParallel(DataParallelGroup* group);
  // Runs the tables of every later Step through the sharded executor (reference/sharding) under
  // `plan` on `world_size` ranks: in this process (`collectives` null: every rank virtual) or as the
  // ranks `collectives` says this process holds (across processes, with UseDataParallel for the
  // dense part). The global batch must divide into world_size local batches. From the first Step on
  // a process keeps only its ranks' shards: state().tables is the whole tables (replica 0's view
  // under 2D plans) only after GatherTables, which every process calls at the same step. Resuming a
  // 2D plan's run loses the replicas' own optimizer states (only replica 0's is saved).
  absl::Status UseShardedTables(const ShardingPlanSpec& plan, int world_size, int gpus_per_host,
                                Collectives* collectives);
  // Reassembles state().tables from every rank's shards (a collective across processes); a no-op
  // without a plan.
  absl::Status GatherTables();

  absl::StatusOr<StepResult> Step();
  // Whether Step returns its gradients (StepResult::param_grad and the rest); off by default.
  void KeepGradients(bool keep) { keep_gradients_ = keep; }
  // NE of the model and of the teacher on held-out samples [kHeldOutFirstIndex + first, + count).
  absl::StatusOr<EvalResult> Evaluate(int64_t first, int64_t count);
  // NE of the model on every sample of `set`, and of its probs.npy (NaN without one).
  absl::StatusOr<EvalResult> Evaluate(const NpyDataset& set);

  const TrainState& state() const { return state_; }
  const GemModel& model() const { return model_; }
  const gemtb::model::ModelConfig& config() const { return config_; }
  const TrainOptions& options() const { return options_; }

  std::vector<std::pair<std::string, io::NpyArray>> StateArrays() const;
  // Replaces the state; FailedPrecondition when the arrays were made with other options (naming the
  // first that differs and both values) or another model.
  absl::Status LoadStateArrays(const std::vector<std::pair<std::string, io::NpyArray>>& arrays);

 private:
  Trainer() = default;
  absl::StatusOr<EvalResult> EvaluateBatches(int64_t count, const std::function<data::Batch(int64_t, int64_t)>& batch_at);
  struct Impl;
  gemtb::model::ModelConfig config_;
  TrainOptions options_;
  GemModel model_;
  EmbeddingConfig emb_;
  TrainState state_;
  bool keep_gradients_ = false;
  std::unique_ptr<Impl> impl_;
};

// `steps` steps from a fresh init (golden/ freezes three of these on tiny).
absl::StatusOr<TrainState> TrainSteps(const gemtb::model::ModelConfig& config, const TrainOptions& options, int steps);
// The same, returning the state as the named arrays of Trainer::StateArrays() (the checkpoint's content).
absl::StatusOr<std::vector<std::pair<std::string, io::NpyArray>>> TrainStepsArrays(
    const gemtb::model::ModelConfig& config, const TrainOptions& options, int steps);

}  // namespace gemtb::reference::model

#endif  // GEMTB_REFERENCE_MODEL_TRAINER_H_
