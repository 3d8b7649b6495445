// The launches behind api.cc, one .cu per concern: init.cu (Philox table init), forward.cu
// (pooling and sequence gathers), backward.cu (sort, runs, fused optimizer). Host-callable; every
// pointer is device memory sized by the caller (api.cc).
#ifndef GEMTB_GPU_EMBEDDING_LAUNCH_H_
#define GEMTB_GPU_EMBEDDING_LAUNCH_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpu/embedding/tbe_params.h"

struct CUevent_st;  // cudaEvent_t without the CUDA headers

namespace gemtb::gpu::embedding {

// W[r][j] = InitValue(seed, t, rows, dim, r, j) rounded to storage (RNE), the oracle's init.
absl::Status LaunchInitTable(const TableParams& table, uint64_t seed);

// One launch over all F*B bags, a warp per bag.
absl::Status LaunchForward(const LaunchParams& p);

// Scratch of the backward, [num_values] unless said otherwise.
struct BackwardBuffers {
  uint64_t* keys_in = nullptr;
  uint64_t* keys_out = nullptr;
  int64_t* order_in = nullptr;     // value index v
  int64_t* order_out = nullptr;
  int64_t* value_bag = nullptr;    // bag f*B+b of value v
  int32_t* bag_count = nullptr;    // [F*B] valid ids per bag (MEAN's n)
  int32_t* run_head = nullptr;     // 1 where a run of one row starts in the sorted order
  int32_t* run_index = nullptr;    // exclusive scan of run_head
  int64_t* run_start = nullptr;    // [num_values+1] first sorted position of each run, then the end
  int32_t* num_runs = nullptr;     // [1]
  void* cub_temp = nullptr;
  size_t cub_temp_bytes = 0;
  int64_t total_rows = 0;          // sum of the tables' rows
  int64_t key_samples = 1;         // SortKeySamples: samples counted in the sort key (B or 1)
  int sort_end_bit = 64;           // bits of the largest sort key
  int64_t max_dim = 4;
  int32_t* hot_runs = nullptr;     // [HotRunCapacity] indices of runs of >= kHotRun occurrences
  int32_t* num_hot_runs = nullptr; // [1]
  float* hot_grads = nullptr;      // [HotRunCapacity][max_dim] each hot run's G (HotRowKernel's slices)
  // G_r's sum partitioned into blocks of `batch_block` consecutive samples (BlockSeqSum4; a sharded
  // module's holder: one block per source's local batch), `num_batch_blocks` of them; 0 = one block.
  int64_t batch_block = 0;
  int64_t num_batch_blocks = 1;
  // The split step of column shards that share rowwise-Adagrad state: the row kernels write each
  // run's G here ([num_values][max_dim]) and its partial square sum over this shard's columns
  // ([num_values]) and leave the rows alone; LaunchApplyRows updates them once the whole rows' sums
  // are known. Null: sum and update in one pass.
  float* run_grads = nullptr;
  float* run_square_sums = nullptr;
  // Null, or kBackwardPhases + 1 events recorded at the phase boundaries (bench embed's timing).
  CUevent_st* const* phase_events = nullptr;
};

// The backward's phases in launch order: occurrence keys, radix sort, run detection (heads, scan,
// starts, the hot-run list), the warp-per-row sum and update, the hot rows' sums by column slices
// and their update.
inline constexpr int kBackwardPhases = 5;

// A run of at least this many occurrences (a hot row) is summed by blocks of 32 columns each: their
// lanes stage the contributions and each column is folded by one thread in the same order
// (backward_kernels.cuh).
inline constexpr int64_t kHotRun = 256;
inline int64_t HotRunCapacity(int64_t num_values) { return num_values / kHotRun + 1; }

// CUB's scratch for `num_values` occurrences.
absl::StatusOr<size_t> BackwardTempBytes(int64_t num_values);

// Occurrences -> stable radix sort by (global row, sample) -> runs -> per-row seqsum of the
// contributions and the table's optimizer, a warp per touched row.
absl::Status LaunchBackward(const LaunchParams& p, int64_t num_values, const BackwardBuffers& b);

// After a split LaunchBackward (b.run_grads set): each run's row updated with its G from
// b.run_grads and `square_sums[run]`, the seqsum of g~^2 over the whole row (rowwise Adagrad).
absl::Status LaunchApplyRows(const LaunchParams& p, int64_t num_values, const BackwardBuffers& b,
                             const float* square_sums);

}  // namespace gemtb::gpu::embedding

#endif  // GEMTB_GPU_EMBEDDING_LAUNCH_H_
