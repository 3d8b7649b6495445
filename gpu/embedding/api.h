// Table-batched embeddings on the GPU: every table and feature of
// a module in one launch; the forward pools (SUM, MEAN, weighted SUM) or gathers (NONE), and the
// backward combines duplicate ids in the oracle's order (stable radix sort by row, then per-row
// seqsums) and applies each table's optimizer in the same kernel, so no dense gradient exists.
// Bit-identical to the oracle (reference/embedding/tbe.h) on the same inputs.
//
// Use: Create (tables uploaded, or Philox-initialised on the device), SetInput (the KJT, validated
// on the host before anything launches), Forward, SetGrads + BackwardStep, then download.
#ifndef GEMTB_GPU_EMBEDDING_API_H_
#define GEMTB_GPU_EMBEDDING_API_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "gpu/embedding/kjt_check.h"
#include "model/embedding/embedding_config.h"
#include "model/embedding/embedding_math.h"

namespace gemtb::gpu::embedding {

// Widest table the kernels take: a row's gradient and weights sit in shared memory per warp.
inline constexpr int64_t kMaxDim = 1024;

// One table's parameters and optimizer state on the host, storage values widened to fp32 (the
// oracle's TableState).
struct HostTable {
  std::vector<float> weights;  // [rows, dim]
  std::vector<float> adagrad;  // [rows] (rowwise Adagrad)
  std::vector<float> adam_m;   // [rows, dim] (Adam)
  std::vector<float> adam_v;   // [rows, dim] (Adam)
  gemtb::embedding::AdamStep adam_step;  // every table carries it; only Adam tables advance it
};

// Pooled [B, W] and one [sum_b len, dim] array per NONE key, in key order (the oracle's layout).
struct HostOutput {
  std::vector<float> pooled;
  int64_t pooled_width = 0;
  std::vector<int> sequence_keys;
  std::vector<std::vector<float>> sequence;
};

// The forward's outputs where they are, on the device (valid until the next SetInput): pooled
// [B, W] and one [rows_k, dim] array per NONE key, in key order, as HostOutput's.
struct DeviceOutputView {
  const float* pooled = nullptr;
  int64_t pooled_width = 0;
  std::vector<int> sequence_keys;
  std::vector<const float*> sequence;
  std::vector<int64_t> sequence_size;  // elements of each
};

// Whether the kernels run this module: the oracle's config rules plus dim <= kMaxDim and global
// row numbers that fit the sort key. The message names the table and field.
absl::Status CanRun(const EmbeddingConfig& config);

// The first CUDA device is an sm_90 GPU.
absl::Status EmbeddingDeviceAvailable();

// Device time of the backward's phases, from CUDA events at their boundaries.
struct BackwardPhaseTimes {
  float occurrences_ms = 0;  // sort keys and bag counts
  float sort_ms = 0;         // stable radix sort of the occurrences
  float runs_ms = 0;         // run heads, scan, run starts, the hot-run list
  float rows_ms = 0;         // a warp per touched row: seqsum of contributions + optimizer
  float hot_rows_ms = 0;     // a block per hot row (runs of >= 256 occurrences)
};

// Where a table of a DeviceTbe sits when it is one shard (a rectangle of rows and columns) of a
// larger table: a sharded module's holder (gpu/embedding/sharded_tbe.h). Init values and
// stochastic-rounding words are the whole table's at global indices, so a shard holds the bytes the
// whole table holds there.
struct ShardPlacement {
  int table = 0;          // the whole table's index in its module (keys the init and SR streams)
  int64_t rows = 0;       // the whole table's rows and D
  int64_t dim = 0;
  int64_t row_begin = 0;  // the shard's first row and column in it
  int64_t col_begin = 0;
  int64_t norm_dim = 0;   // rowwise Adagrad's D: the whole row's when column shards share the state, else the shard's
};

struct TbeOptions {
  // One per table of the config, or empty: every table whole.
  std::vector<ShardPlacement> placement;
  // G_r's sum over samples in blocks of this many consecutive samples, each block's seqsum then
  // the blocks' seqsum (a holder's batch: one block per source rank's local batch, the oracle's
  // SumPartition::batch_blocks); 0 = one block. Must divide every batch.
  int64_t batch_block = 0;
  // Column shards that share rowwise-Adagrad state: BackwardStep stops after the row gradients and
  // their partial square sums (RunSquareSums); ApplyRows then updates with the whole rows' sums.
  bool split_update = false;
};

// A KJT that DeviceTbe::CheckInput validated: its layout, and the module and spans it belongs to, so
// that SetInput can tell it is handed the same KJT.
class CheckedKjt {
 public:
  const KjtLayout& layout() const { return layout_; }

 private:
  friend class DeviceTbe;
  KjtLayout layout_;
  const void* module_ = nullptr;
  int64_t batch_ = 0;
  const void* spans_[5] = {};  // keys, lengths, values, weights, offsets: data
  size_t sizes_[5] = {};       // and sizes
  bool has_weights_ = false;
  // Where CheckInput left a copy of the values in the module's page-locked staging (slot, and the
  // generation that slot held then), so that SetInput uploads them asynchronously; slot -1: none.
  int staged_slot_ = -1;
  uint64_t staged_generation_ = 0;
};

class DeviceTbe {
 public:
  // `tables` empty: the Philox init on the device (zero optimizer state); else one per
  // table. `step` is the optimizer step s of the next BackwardStep (it keys stochastic rounding).
  static absl::StatusOr<std::unique_ptr<DeviceTbe>> Create(const EmbeddingConfig& config,
                                                           absl::Span<const HostTable> tables, int64_t step,
                                                           const TbeOptions& options = {});
  ~DeviceTbe();
  DeviceTbe(const DeviceTbe&) = delete;
  DeviceTbe& operator=(const DeviceTbe&) = delete;

  // Validates the KJT (CheckKjt) and uploads it; nothing launches when it is malformed.
  absl::Status SetInput(const KjtView& kjt);
  // The validation alone, on any thread: it reads the config's features and tables as Create set
  // them (SetLearningRate changes only the rates). A trainer checks the next batch on its data
  // thread during a step, and SetInput(kjt, checked) then only uploads it. It also copies the values
  // into one of two page-locked staging buffers (in turn), from which SetInput uploads them without
  // blocking the host; a check whose buffer a later check has taken, or one used twice, uploads from
  // the KJT's own arrays instead (the same bytes, a synchronous copy). The staging makes the module's
  // GPU the calling thread's current device.
  absl::StatusOr<CheckedKjt> CheckInput(const KjtView& kjt) const;
  // SetInput of a KJT CheckInput validated; InvalidArgument if `checked` is another module's or
  // was made from other spans than kjt's (same data pointers and sizes).
  absl::Status SetInput(const KjtView& kjt, const CheckedKjt& checked);
  // Exchanges the input, with its outputs and gradients, for a second one held aside (none at
  // first): a trainer looks up the next batch (SetInput, Forward) between this batch's forward and
  // its backward, then swaps this one back (the semi-synchronous pipeline).
  void SwapInput();
  // Pools into device outputs (asynchronous on the legacy stream).
  absl::Status Forward();
  absl::StatusOr<HostOutput> DownloadOutput() const;
  absl::StatusOr<DeviceOutputView> DeviceOutput() const;
  // Upstream gradients in the forward's output shapes.
  absl::Status SetGrads(absl::Span<const float> pooled, absl::Span<const std::vector<float>> sequence);
  // The same for gradients already on the device: `pooled` [B, W] and one array per NONE key (keys
  // may share one), read in place by the next BackwardStep, so they must stay alive until it returns.
  absl::Status SetDeviceGrads(const float* pooled, absl::Span<const float* const> sequence);
  // Every table's optimizer learning rate from the next BackwardStep on (a trainer's schedule).
  absl::Status SetLearningRate(float lr);
  // Row gradients in the oracle's order and each table's optimizer; advances the step and Adam's
  // bias products, as the oracle's EmbeddingBackwardStep does. With `times`, the phases are timed
  // with events and the call waits for the step to finish.
  absl::Status BackwardStep(BackwardPhaseTimes* times = nullptr);
  // Split update only (TbeOptions::split_update), after BackwardStep: each touched row's (run's)
  // seqsum of g~^2 over this DeviceTbe's columns, [RunCapacity()] on the device, runs in ascending
  // global row order (the same list on every column shard of the same ids); then ApplyRows with
  // the whole rows' sums (same layout) updates the rows and advances the step.
  absl::StatusOr<const float*> RunSquareSums() const;
  int64_t RunCapacity() const;
  absl::Status ApplyRows(const float* whole_square_sums);
  // Table `table`'s storage on the device ([rows, dim] of its dtype), for collectives that move
  // whole shards (fully sharded 2D's gathers and scatters).
  absl::StatusOr<void*> DeviceWeights(int table) const;
  // Its optimizer state on the device: rowwise Adagrad [rows], Adam m and v [rows, dim], each null
  // where the table's optimizer keeps none (replicas average them, sharded_tbe.h).
  absl::StatusOr<std::vector<float*>> DeviceOptimizerState(int table) const;
  absl::StatusOr<std::vector<HostTable>> DownloadTables() const;
  absl::StatusOr<HostTable> DownloadTable(int table) const;

  int64_t step() const;
  int64_t pooled_width() const;
  int64_t num_values() const;

 private:
  struct State;
  explicit DeviceTbe(std::unique_ptr<State> state);
  absl::StatusOr<CheckedKjt> Check(const KjtView& kjt) const;  // CheckInput without the staging
  void StageValues(absl::Span<const int64_t> values, CheckedKjt& checked) const;
  absl::Status UploadValues(absl::Span<const int64_t> values, const CheckedKjt& checked, int64_t* dst) const;
  std::unique_ptr<State> s_;
};

}  // namespace gemtb::gpu::embedding

#endif  // GEMTB_GPU_EMBEDDING_API_H_
