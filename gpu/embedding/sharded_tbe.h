// A sharded embedding module on GPUs: one rank of a sharding plan (TW, RW, CW, TWRW, GRID;
// model/sharding), holding the shards of its MP-group position, each a DeviceTbe of one table placed
// in its whole table (ShardPlacement: init values and stochastic-rounding words of the whole table).
// 1D: the world is the MP group. 2D (mp_group M < R, N = R/M replicas, rank = m*N + rho): MP group
// rho is ranks {m*N + rho}, and the N ranks of position m hold copies of its shards:
//   V2       every sync_period-th step the replicas average their shards (and, with state_sync,
//            the optimizer state): seqsum over replicas in order, / N, weights rounded to storage;
//   V3       (fully_sharded) a rank keeps sub-block rho (ceil(rows/N) rows) of each shard and the
//            whole shard's optimizer state; the replicas gather the sub-blocks before the forward
//            and again before the backward (unless keep_gathered), update the gathered copy, and
//            keep the replicas' mean of their sub-block, rounded to storage. gather=touched moves
//            only the rows some replica's ids reach this step (the replicas' union of their
//            holders' rows, exchanged after the ids).
// The replicas' sums move by an all-to-all of sub-blocks (each rank sums its own in replica order)
// and, for V2, an all-gather of the means: a ring all-reduce's bytes, in the oracle's order. A step:
//   Forward   ids to the holders (shard_routing.h: an all-to-all of counts, then of the bytes),
//             every held shard's lookups on the sources' samples in rank order, embeddings back
//             (one all-to-all of floats), and on the requester the row blocks' sums in block order and
//             MEAN's division (shard_kernels.cu);
//   Backward  gradients to the holders the same way, every held shard's G_r summed in blocks of the
//             sources' samples and its fused optimizer; column shards sharing rowwise-Adagrad state
//             all-gather their partial square sums among a row block's holders and add them in
//             column-shard order before the update.
// Bit-identical to the oracle's sharded executor (reference/sharding) of the same plan and batches.
// The ids' routing runs on the host: the trainer's batches are made on the host.
#ifndef GEMTB_GPU_EMBEDDING_SHARDED_TBE_H_
#define GEMTB_GPU_EMBEDDING_SHARDED_TBE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "gpu/embedding/api.h"
#include "gpu/embedding/kjt_check.h"
#include "gpu/embedding/shard_exchange.h"
#include "gpu/embedding/shard_routing.h"
#include "model/embedding/embedding_config.h"
#include "model/sharding/sharding_types.h"

namespace gemtb::gpu::embedding {

class ShardedDeviceTbe {
 public:
  // This rank (exchange->rank()) of the plan, `local_batch` samples a step.
  // `held_tables` empty: every held shard Philox-initialised on the device as its part of the whole
  // table; else one per held shard in the routing's order (as DownloadShards gives them). `step`:
  // the next update's SR step.
  static absl::StatusOr<std::unique_ptr<ShardedDeviceTbe>> Create(const EmbeddingConfig& config,
                                                                  const ShardingPlanSpec& plan, int gpus_per_host,
                                                                  int64_t local_batch, ShardExchange* exchange,
                                                                  absl::Span<const HostTable> held_tables,
                                                                  int64_t step);
  ~ShardedDeviceTbe();
  ShardedDeviceTbe(const ShardedDeviceTbe&) = delete;
  ShardedDeviceTbe& operator=(const ShardedDeviceTbe&) = delete;

  // A local batch's ids routed on the host: what Forward sends and how it assembles the output.
  // Needs nothing of the device and changes nothing, so a trainer may route the next batch on
  // another thread while this one runs.
  struct RoutedBatch {
    KjtLayout layout;
    RequesterStep step;
  };
  absl::StatusOr<RoutedBatch> Route(const KjtView& kjt) const;
  // The forward of this rank's local batch (keys: the config's features, in order); collective.
  absl::Status Forward(const KjtView& kjt);
  absl::Status Forward(RoutedBatch routed);
  // The last Forward's output on the device: pooled [b, W] and one [len, D] array per NONE key.
  absl::StatusOr<DeviceOutputView> DeviceOutput() const;
  // Upstream gradients of that output on the device, then every held shard's step; collective.
  absl::Status Backward(const float* pooled_grad, absl::Span<const float* const> sequence_grads);
  absl::Status SetLearningRate(float lr);
  // Exchanges the last Forward's batch (its routing, exchange plans, outputs and every held shard's
  // input) for a second one held aside (none at first): the semi-synchronous pipeline forwards the
  // next batch between this batch's forward and backward. FailedPrecondition under a fully sharded
  // plan (its backward updates the copy its forward gathered).
  absl::Status SwapBatch();
  // Called around every collective the module issues, with its name ("ids.all_to_all", ...) and
  // the simulator's group class of its ranks ("sparse-mp", "sparse-intra", "sparse-replica"), so a
  // trainer can time it; `call` issues it. Without a hook the module calls directly.
  using CollectiveHook =
      std::function<absl::Status(const char* name, const char* group, const std::function<absl::Status()>& call)>;
  void SetCollectiveHook(CollectiveHook hook);

  // The held shards' tables and optimizer state, in the routing's held order ([shard rows, cols];
  // a trailing empty row block has one placeholder row). V3: a collective of the replicas (the
  // sub-blocks are gathered first).
  absl::StatusOr<std::vector<HostTable>> DownloadShards();
  const ShardRouting& routing() const;

 private:
  struct State;
  explicit ShardedDeviceTbe(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace gemtb::gpu::embedding

#endif  // GEMTB_GPU_EMBEDDING_SHARDED_TBE_H_
