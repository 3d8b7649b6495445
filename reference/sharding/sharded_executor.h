// The sharded embedding oracle: R virtual ranks run the tables
// under a sharding plan, moving ids, embeddings, gradients and (2D) weights through the virtual
// collectives, and computing with the unsharded oracle's arithmetic (model/embedding/embedding_math.h).
//
// Batch: the global batch B splits into R equal local batches, rank r taking samples
// [r*B/R, (r+1)*B/R); B must be divisible by R.
//
// 1D (mp_group = world_size): one MP group of all ranks (mp_group.h says what moves). The result is
// bit-identical to the unsharded oracle run with InducedSumPartition (shard_layout.h).
//
// 2D model parallel, V2 (mp_group M < world_size, N = R/M replicas, rank = m*N + rho): MP group rho
// = ranks {m*N + rho} shards every table over its M*B/R samples; replicas evolve independently, and
// after every k-th step (k = sync_period) each position m all-reduces over {m*N + rho : rho} (class
// sparse-replica, phase sync) every shard's weights (rows*cols*e_w bytes) and, if state_sync, its
// optimizer state (4*rows rowwise Adagrad, 8*rows*cols Adam m and v), replacing them with
// seqsum over rho / N; weights are then rounded to storage with RNE [proj]. Adam's bias products are
// equal in every replica and not exchanged.
//
// Fully sharded 2D, V3 (fully_sharded): rank (m, rho) stores sub-block rho (ceil(rows/N) rows) of
// each shard of position m and the full shard's optimizer state (per replica, never synced).
// Forward: AG(N) of the sub-blocks in the replica group (class sparse-intra), then the MP group's
// ids A2A, lookup, embeddings back; the gathered copy is freed. Backward: AG(N) again (unless
// keep_gathered), gradients, local update of the gathered copy, RS(N) of the updated copy whose
// sub-block rho becomes seqsum over rho / N, rounded to storage with RNE. gather=touched moves only
// the rows U of each shard that some replica group reads or updates this step (ids A2A first, then the AG),
// and reduce-scatters only those rows; the exchange of U's row indices is not modelled. V3 equals
// V2 with k = 1 and state_sync off bit for bit (gather=touched: as long as averaging N equal
// values is exact: true for N = 2 and 4, false for N = 8 with fp32 tables).
//
// Across processes (ShardedExecutor with a store's Collectives) each process runs the ranks it holds
// and keeps only their shards; the collectives carry the same bytes and reduce in the same order, so
// the result is the in-process run's bit for bit. gather=touched needs every replica group's ids on
// every rank and runs in one process only.
//
// RunSharded's multi-step runs reuse the same KJT and upstream gradients every step (enough for tests); the SR
// stream of step s is initial.step + s. The report's "step" is s, counted from 0 in this run, and
// its records are in execution order: per step, forward (V3 gathers, then each replica group's
// ids A2As in rho order, [V3 gather=touched: the gathers here], then each group's embedding
// returns; tables in config order), backward (V3 gathers, each group's traffic, V3 RS), sync.
#ifndef GEMTB_REFERENCE_SHARDING_SHARDED_EXECUTOR_H_
#define GEMTB_REFERENCE_SHARDING_SHARDED_EXECUTOR_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "model/embedding/embedding_config.h"
#include "model/sharding/sharding_types.h"
#include "reference/collectives/collectives.h"
#include "reference/collectives/comm_report.h"
#include "reference/embedding/kjt.h"
#include "reference/embedding/tbe.h"

namespace gemtb::reference {

struct ShardedRun {
  EmbeddingOutput output;                      // global layout, from the last step's forward
  EmbeddingState state;                        // full tables and state reassembled; 2D/V3: replica 0's view
  std::vector<EmbeddingState> replica_states;  // one per replica rho (N = 1 for 1D)
  CommReport report;
  // cw_state=per_shard: per table, replica 0's rowwise-Adagrad state of every column shard,
  // [col_shard][rows] (state.tables[t].adagrad holds shard 0's); empty for other tables and modes.
  std::vector<std::vector<float>> per_shard_adagrad;
};

// The executor as an object that keeps its ranks' shards from step to step, for a trainer that
// feeds a new batch each step. `config` and `plan` are referenced and must outlive it (a trainer may
// change the tables' learning rates between steps). With `collectives` null it holds every rank and
// runs on in-process VirtualCollectives, recording the report; otherwise this process holds the ranks
// collectives->Holds says (across processes: one) and only their shards, and records no report.
class ShardedExecutor {
 public:
  static absl::StatusOr<std::unique_ptr<ShardedExecutor>> Create(const EmbeddingConfig& config,
                                                                 const ShardingPlanSpec& plan, int world_size,
                                                                 int gpus_per_host, const EmbeddingState& initial,
                                                                 Collectives* collectives = nullptr);
  ~ShardedExecutor();

  // The forward of one global batch (stride divisible by world_size); returns the global output.
  // Across processes every process gets the whole output (gathered from the ranks that computed it).
  // Up to two forwards may await their backward (the semi-synchronous pipeline looks up step s + 1
  // before step s's update), except under fully sharded plans, whose backward regathers the
  // sub-blocks its forward gathered: FailedPrecondition there.
  absl::StatusOr<EmbeddingOutput> Forward(const KeyedJaggedTensor& global_kjt);
  // The backward of the oldest Forward without one, with its upstream gradients (global layout; a
  // process reads only its ranks' samples) and the fused optimizer at SR step initial.step +
  // updates so far.
  absl::Status Backward(const EmbeddingGrads& global_grads);
  // The tables and states reassembled from every rank's shards (gathered across processes), the last
  // Forward's output and the report so far.
  absl::StatusOr<ShardedRun> Result();

 private:
  ShardedExecutor() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Runs `steps` steps of forward and, when `global_grads` is not null, backward with the fused
// optimizer. `threads` sizes the oneTBB arena (0 = default); the bits do not depend on it.
absl::StatusOr<ShardedRun> RunSharded(const EmbeddingConfig& config, const ShardingPlanSpec& plan, int world_size,
                                      int gpus_per_host, const EmbeddingState& initial,
                                      const KeyedJaggedTensor& global_kjt, const EmbeddingGrads* global_grads,
                                      int steps = 1, int threads = 0);

}  // namespace gemtb::reference

#endif  // GEMTB_REFERENCE_SHARDING_SHARDED_EXECUTOR_H_
