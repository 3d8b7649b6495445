// The GEM-like model of model/description/gem_geometry.h on one GPU: forward, loss and backward of
// a whole batch, as reference/model/gem_model.cc defines it per sample. Parameters and gradients are
// fp32, as are activations by default; every op other than the matmuls and attention is a kernel
// with explicitly rounded operations. GemModelOptions chooses the matmuls' and attention's precision:
// by default true fp32 (the trainer's check precision), or the tensor cores with operands rounded to
// TF32 or bf16 and fp32 accumulation (the training precision); and whether the sequence layers'
// feed-forward and attention blocks keep their arrays in bf16. Every choice gives the same bytes on
// every run.
//
// Layout: the batch's samples side by side. X, X_sum and the summaries S_sum_j are [B, tokens, d];
// each sequence's residual stream S_j is jagged, sample b's n_s + len_jb rows after sample b-1's.
// Token mixing (LCE) is one strided-batched matmul with the mixing matrix shared by every sample;
// its weight gradient is a per-sample product summed over samples in order. Attention runs on the
// jagged rows (gdpa.h). Parameters and their gradients are the flat fp32 arrays of the layout
// (param_layout.h), so they compare element by element with the oracle's.
#ifndef GEMTB_GPU_TRAIN_GEM_MODEL_H_
#define GEMTB_GPU_TRAIN_GEM_MODEL_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpu/train/model_kernels.h"
#include "gpu/train/numerics.h"
#include "gpu/train/region_timer.h"
#include "model/description/gem_geometry.h"
#include "model/description/model_config.h"

namespace gemtb::gpu::train {

// Expert parallelism's collectives in one EP group (gem_geometry.h's ExpertsOfMember: member i runs
// the Wukong experts e with e mod degree() == i), in stream order on the stream given. Every member
// calls them in the same order with the same count (each member's batch holds as many samples).
class ExpertExchange {
 public:
  virtual ~ExpertExchange() = default;
  virtual int degree() const = 0;  // D, the group's members
  virtual int member() const = 0;  // this rank's place in the group
  // Every member's `count` floats at `mine` into all + i * count for member i.
  virtual absl::Status AllGather(const float* mine, float* all, int64_t count, cudaStream_t stream) = 0;
  // Member i receives into `mine` the sum over members of their all[i * count, (i + 1) * count).
  virtual absl::Status ReduceScatter(const float* all, float* mine, int64_t count, cudaStream_t stream) = 0;
};

// Where a rank of expert parallelism holds its parameters (model/description/expert_params.h): the
// layout its parameter and gradient arrays follow (MemberLayout) and the experts it runs (its EP
// member's, ascending).
struct GemModelPlacement {
  gemtb::model::ParamLayout layout;
  std::vector<int> experts;
};

// One batch's inputs after the embedding lookup. Host fields describe it; pointers are device memory.
struct GemBatchInput {
  int64_t batch = 0;                          // B
  std::vector<std::vector<int32_t>> lengths;  // per sequence j: [B] events of each sample (<= Lmax_j)
  const float* pooled = nullptr;              // [B, F, d] non-sequence features, key order
  const float* dense = nullptr;               // [B, m]
  // Per j: its events' rows [sum_b len_jb, d], as the embedding lookups gave them (model_kernels.h:
  // item, action and dt, summed as layer 1 places them in the sequence).
  std::vector<EventRows> events;
  const float* labels = nullptr;              // [B, T] 0/1
  const float* masks = nullptr;               // [B, T] 0/1
  // The loss's denominator (loss.h): < 0 counts these masks; a rank of a data-parallel job gives
  // the global batch's count, so that its gradients are its samples' share of the global ones.
  double mask_count = -1;
  // Expert parallelism: this batch is the rank's share of its EP group's samples, and the rank runs
  // only its experts, on every member's samples (the members run the same pass). Null: every expert
  // runs here on this batch (one GPU, or a pass whose samples every rank holds alike).
  ExpertExchange* experts = nullptr;
};

// What a pass writes, device memory owned by the caller.
struct GemBatchOutput {
  float* logits = nullptr;              // [B, T]
  double* loss = nullptr;               // [1] the masked BCE of the batch (loss.h)
  float* param_grad = nullptr;          // [P] dL/dparams (written); null: forward only
  float* pooled_grad = nullptr;         // [B, F, d] (written; with param_grad)
  std::vector<float*> events_grad;      // per j: [sum_b len_jb, d] (written; with param_grad)
};

class GemModelGpu {
 public:
  // InvalidArgument / Unimplemented naming the config field (MakeGemGeometry's rules, and head dims
  // the attention kernels run: 16, 32, 64). With E > 1 Wukong experts the FMB MLP is the sum of the
  // experts' MLPs plus one shared output bias, as the oracle defines it. With a placement the
  // parameter and gradient arrays follow its layout, and every pass runs its experts under an
  // expert exchange of their member (InvalidArgument otherwise); geometry() stays the model's.
  static absl::StatusOr<std::unique_ptr<GemModelGpu>> Create(const gemtb::model::ModelConfig& config,
                                                             const GemModelOptions& options = {},
                                                             const GemModelPlacement* placement = nullptr);
  ~GemModelGpu();
  GemModelGpu(const GemModelGpu&) = delete;
  GemModelGpu& operator=(const GemModelGpu&) = delete;

  const gemtb::model::GemGeometry& geometry() const;

  // Forward, loss and (when out.param_grad is set) backward of one batch with parameters `params`
  // [P] (with a placement, its layout's total); asynchronous on `stream` (its scratch memory is stream-ordered). InvalidArgument naming the
  // field when the input does not fit the model (sequence count, lengths beyond Lmax, B < 1, an
  // expert exchange whose degree does not divide the experts). Under expert parallelism the
  // gradients of the experts this rank does not run stay zero: summing the ranks' gradients (the
  // FSDP reduce-scatter) gives every expert its gradient over the group's samples. With a
  // timer, each region's forward and backward is marked on `stream` (region_timer.h).
  absl::Status Run(const float* params, const GemBatchInput& in, const GemBatchOutput& out, cudaStream_t stream,
                   RegionTimer* timer = nullptr);

  // Called by every later Run as each region's forward and backward begins (after the timer's mark,
  // before the region's first kernel), with its name and Run's stream: a trainer gathering the
  // parameters unit by unit makes the stream wait for the region's unit there. Its error ends Run.
  using RegionHook = std::function<absl::Status(const std::string& region, bool backward, cudaStream_t stream)>;
  void SetRegionHook(RegionHook hook);

 private:
  struct Impl;
  explicit GemModelGpu(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_GEM_MODEL_H_
