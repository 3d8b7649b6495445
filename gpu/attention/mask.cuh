// Masks on the device: every mask keeps one contiguous key range per query
// row, so a kernel holds [begin, end) per row and tests membership; no −inf mask tensor exists.
// Rows past the sequence end (tile padding) get the empty range.
#ifndef GEMTB_GPU_ATTENTION_MASK_CUH_
#define GEMTB_GPU_ATTENTION_MASK_CUH_

#include "gpu/attention/params.h"

namespace gemtb::gpu {

// Keys of local query row i of a (lq, lk) pair; empty for i >= lq (padding rows of a tile).
__device__ __forceinline__ RowKeyRange RowKeys(const AttentionOptions& o, int i, int lq, int lk) {
  if (i >= lq) return {0, 0};
  return ClampedKeys(o, i, lq, lk);
}

__device__ __forceinline__ bool Contains(const RowKeyRange& r, int j) {
  return j >= r.begin && j < r.end;
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_MASK_CUH_
