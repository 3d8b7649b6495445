// The GEM-like model trained on one GPU, step for step as the oracle's trainer
// (reference/model/trainer.h) defines a step: samples [step B, (step + 1) B) of the data seed
// (model/data's generator), the TBE forward on the device (MEAN pooling, sequences as NONE), the
// model's forward, loss and backward (gem_model.h, fp32), the tables' fused rowwise Adagrad inside
// the TBE backward, and dense Adam with fp32 master weights (dense_adam.h); learning rates on the
// oracle's schedule (model/description/train_schedule.h).
//
// Step s + 1's batch is generated on a host thread while step s runs. The batch stays on the device
// from the TBE's outputs to its gradients (only the KJT, the dense
// features, labels and masks go up; logits and loss come down). Per-step arrays come from the current device's
// retained memory pool: Create calls RetainFreedDeviceMemory (gpu/common/device_buffer.h), a
// process-wide setting, as a training framework's caching allocator would be.
//
// Under the semi-synchronous pipeline (options.pipeline) a step's model runs on its own stream while
// the next step's lookups (with sharded tables: its id and embedding all-to-alls too) run on the
// TBE's, before this step's table update: the oracle's semi-synchronous step
// (reference/model/trainer.h). Not with fully sharded 2D tables.
//
// The state (parameters, Adam moments and bias products, tables) starts from the oracle's init
// (model/description/param_layout.h's InitParams; the TBE's Philox init) and can be read back in the
// oracle's layout for comparison.
//
// As one rank of a multi-GPU job (Create with TrainerCollectives, trainer_collectives.h), a step
// takes the same global batch of options.batch samples, ordered by the job's batch split (JobOptions;
// contiguous: generator order), and rank r of R runs the model on samples [r B/R, (r + 1) B/R) of it,
// with the global batch's mask count in the loss (loss.h), so that its samples' gradients are the
// single process's. (The step's logits and lengths come back in generator order.) Dense parameters are 2D FSDP: each rank keeps its
// shard of the fp32 master weights and of Adam's moments, gathers the whole array in its shard group
// before the forward, reduce-scatters the gradient in the shard group and sums its shard across the
// replica group before its Adam step. The tables are replicated: a rank looks up its own samples,
// the ranks all-gather the embedding outputs' gradients (rank order is sample order), and every rank
// runs the TBE backward of the whole batch, the same fused Adagrad on the same gradients, so the
// tables stay identical on every rank. Or they are sharded by a plan (JobOptions::sparse_plan): a
// rank sends its samples' ids to the shards' holders and gets its embeddings back, and its
// gradients go back to the holders, which update their shards (gpu/embedding/sharded_tbe.h); each
// rank's state then holds its own shards.
#ifndef GEMTB_GPU_TRAIN_TRAINER_H_
#define GEMTB_GPU_TRAIN_TRAINER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpu/embedding/api.h"
#include "gpu/embedding/sharded_tbe.h"
#include "gpu/train/numerics.h"
#include "gpu/train/region_timer.h"
#include "gpu/train/trainer_collectives.h"
#include "model/data/rank_split.h"
#include "model/description/model_config.h"
#include "model/description/train_options.h"
#include "model/sharding/sharding_types.h"

namespace gemtb::gpu::train {

// The options both trainers share (model/description/train_options.h).
using TrainerOptions = gemtb::model::TrainOptions;

// How a job splits each step's global batch among its ranks (model/data/rank_split.h): contiguous
// parts, or sub-batches of `sub_batch` samples dealt by BBS or by least load.
// The tables are replicated unless `sparse_plan` shards them (gpu/embedding/sharded_tbe.h; a 1D
// plan: the world is the MP group), TWRW and GRID placed on hosts of `gpus_per_host` ranks.
// With `param_prefetch` the dense parameters are gathered unit by unit (model/description's
// ParamUnits: a region's slice of the layout) on a stream of their own as the step begins, and each
// region's forward waits for its own unit only: the later units' all-gathers run beside the
// embedding lookups and the earlier regions' forward. The gathered units are kept for the backward,
// and each unit's gradient is reduce-scattered on that stream as its region's backward ends, beside
// the rest of the backward.
struct JobOptions {
  gemtb::data::RankSplit split = gemtb::data::RankSplit::kContiguous;
  int64_t sub_batch = 128;
  bool param_prefetch = false;
  std::optional<gemtb::ShardingPlanSpec> sparse_plan;
  int gpus_per_host = 8;
};

// Wall time of a step's phases on the host clock; each phase ends with the device idle (the trainer
// waits for its results), so a phase's time is its device work plus the host's part.
struct StepTimes {
  double data_ms = 0;           // waiting for the batch (model/data's generator makes each step's batch on a
                                // host thread during the step before; sharded tables' ids are routed there too)
  double embedding_fwd_ms = 0;  // the KJT upload, the TBE forward and its outputs to the host
  double model_ms = 0;          // inputs up, the model's forward, loss and backward, gradients down
  double embedding_bwd_ms = 0;  // the gradients up, the TBE backward with fused rowwise Adagrad
  double optimizer_ms = 0;      // dense Adam
  double total_ms() const { return data_ms + embedding_fwd_ms + model_ms + embedding_bwd_ms + optimizer_ms; }
  // Phase by phase: sums over steps, and their means.
  StepTimes& operator+=(const StepTimes& o) {
    data_ms += o.data_ms, embedding_fwd_ms += o.embedding_fwd_ms, model_ms += o.model_ms;
    embedding_bwd_ms += o.embedding_bwd_ms, optimizer_ms += o.optimizer_ms;
    return *this;
  }
  StepTimes Over(double steps) const {
    return {data_ms / steps, embedding_fwd_ms / steps, model_ms / steps, embedding_bwd_ms / steps, optimizer_ms / steps};
  }
};

// One collective of a job's step: its name ("params.all_gather", "grads.reduce_scatter", ...), the
// simulator's group class of the ranks it spans ("dense-shard", "dense-replica", "sparse-mp", "ep"), and
// its device time from CUDA events around it on the stream it ran on. Only those beside compute
// are not all exposed.
enum class CollectivePlace {
  kBeforeModel,    // in the embedding phase, before the lookups
  kAfterModel,     // after the model's backward, before the tables' update
  kInModel,        // inside the model, on its stream (expert parallelism's exchanges): exposed
  kInUpdate,       // in the tables' update phase (sharded tables' backward exchanges)
  kBesideCompute,  // on a stream of its own beside the step's compute (JobOptions::param_prefetch's
                   // per-unit collectives, the semi-synchronous pipeline's next lookups); the
                   // model's waits for it are in the model phase
};
struct CollectiveTime {
  std::string name;
  std::string group;
  double ms = 0;
  CollectivePlace place = CollectivePlace::kAfterModel;
  // With region times, for those inside the model or beside compute: its start in ms after the
  // model's first region's (negative: before the model, such as per-unit gathers).
  std::optional<double> model_start_ms;
};

struct TrainerStep {
  int64_t step = 0;              // steps taken so far
  double loss = 0;               // the batch's masked BCE
  std::vector<float> logits;     // [B, T]
  StepTimes times;
  std::vector<int32_t> seq_lengths;  // [J * B] the batch's events per sample (sequence-major)
  // With TimeRegions(true): the model's regions, forward then backward, in ms from the model's start.
  std::vector<RegionTime> regions;
  // In a job: the step's collectives in issue order.
  std::vector<CollectiveTime> collectives;
};

// One step's gradients at the current state, in the oracle's layouts (what Step applies).
struct TrainerGradients {
  double loss = 0;                         // the batch's masked BCE
  std::vector<float> dense;                // [P] in the flat parameter layout
  std::vector<float> pooled;               // [B, sum_f D_f] the pooled embeddings' gradient
  std::vector<std::vector<float>> events;  // per sequence, [sum_b len_b, d] the events' gradient
};

struct TrainerState {
  int64_t step = 0;
  std::vector<float> params, adam_m, adam_v;
  float adam_b1 = 1.0f, adam_b2 = 1.0f;
  std::vector<embedding::HostTable> tables;
  // With sharded tables: this rank's shards in its routing's order (sharded_tbe.h), `tables` empty.
  std::vector<embedding::HostTable> table_shards;
  // Under the semi-synchronous pipeline after step 0: step `step`'s lookups, made before the last
  // table update, of the trainer's samples (a job's rank: its own): pooled [b, W] and one [ids, D]
  // array per NONE key in key order. Empty otherwise.
  std::vector<float> pipeline_pooled;
  std::vector<std::vector<float>> pipeline_sequence;
};

// What one rank of a job holds of the state and writes in a checkpoint, nothing gathered: its
// dense shard if it is in shard group 0 (the other groups hold the same shards), values
// [dense_first, dense_first + size) of the flat arrays; the replicated tables t with t mod R = rank
// (every rank holds them all); or its table shards (sharded tables, in its routing's order).
struct TrainerRankState {
  int64_t step = 0;
  float adam_b1 = 1.0f, adam_b2 = 1.0f;
  int64_t dense_first = 0;
  int dense_part = -1;  // q, its place in shard group 0; -1 when it writes no dense shard
  std::vector<float> params, adam_m, adam_v;
  std::vector<int> table_index;
  std::vector<embedding::HostTable> tables;
  std::vector<embedding::HostTable> table_shards;
};

// The most device memory the trainer's pool (the current device's default pool, where every step's
// arrays live) has held at once since the process started, in bytes.
absl::StatusOr<int64_t> PeakStepMemoryBytes();

class GpuTrainer {
 public:
  // InvalidArgument naming the option or config field; FailedPrecondition without a usable GPU.
  // `numerics`: the model's matmul and attention precision (numerics.h; default the check precision).
  // `collectives` (outliving the trainer): train as one rank of a job; options.batch is the global
  // batch and must divide into world_size() local batches (InvalidArgument naming both), and under
  // `job`'s bbs or balance split into whole sub-batches.
  static absl::StatusOr<std::unique_ptr<GpuTrainer>> Create(const gemtb::model::ModelConfig& config,
                                                            const TrainerOptions& options,
                                                            const GemModelOptions& numerics = {},
                                                            TrainerCollectives* collectives = nullptr,
                                                            const JobOptions& job = {});
  ~GpuTrainer();
  GpuTrainer(const GpuTrainer&) = delete;
  GpuTrainer& operator=(const GpuTrainer&) = delete;

  absl::StatusOr<TrainerStep> Step();
  // Whether Step times the model's regions with CUDA events (TrainerStep::regions); off by default.
  void TimeRegions(bool on);
  // The next step's gradients at the current state, without taking the step. One GPU only (as
  // ApplyGradients): FailedPrecondition as a rank of a job.
  absl::StatusOr<TrainerGradients> Gradients();
  // Takes the next step with `grads` in place of the model's own gradients (its loss is ignored):
  // the tables' fused Adagrad inside the TBE backward and dense Adam, exactly as Step applies them.
  // `gemtb check train` feeds the oracle's gradients here, so the optimizers are compared alone.
  // InvalidArgument naming the field whose size does not fit the step's batch.
  absl::Status ApplyGradients(const TrainerGradients& grads);
  // Replaces the whole state (a checkpoint's, or the oracle's). InvalidArgument naming the array
  // whose size does not fit this model, or a negative step.
  absl::Status LoadState(const TrainerState& state);
  // Predictions sigmoid(logit) [count, T] of samples [first, first + count) of the data seed's
  // held-out range (kHeldOutFirstIndex on, as the oracle evaluates), in chunks of 256. In a job every
  // rank calls it (the parameters are gathered first) and computes all of them.
  absl::StatusOr<std::vector<double>> Predict(int64_t first_index, int64_t count);
  // The whole state; in a job a collective (the shards are gathered), which every rank calls.
  absl::StatusOr<TrainerState> State() const;
  // A job's rank: its own part of the state (a collective of the replicas only for fully sharded
  // 2D tables, whose sub-blocks are gathered). FailedPrecondition on one GPU.
  absl::StatusOr<TrainerRankState> RankState() const;
  int64_t step() const;
  int64_t num_params() const;

 private:
  struct Impl;
  explicit GpuTrainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_TRAINER_H_
