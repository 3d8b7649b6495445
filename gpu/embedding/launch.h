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
  int sort_end_bit = 64;           // bits of the largest sort key
  int64_t max_dim = 4;
};

// CUB's scratch for `num_values` occurrences.
absl::StatusOr<size_t> BackwardTempBytes(int64_t num_values);

// Occurrences -> stable radix sort by (global row, sample) -> runs -> per-row seqsum of the
// contributions and the table's optimizer, a warp per touched row.
absl::Status LaunchBackward(const LaunchParams& p, int64_t num_values, const BackwardBuffers& b);

}  // namespace gemtb::gpu::embedding

#endif  // GEMTB_GPU_EMBEDDING_LAUNCH_H_
