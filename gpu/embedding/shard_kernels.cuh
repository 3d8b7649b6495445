// The sharded module's kernels (shard_launch.h launches them): its data movement and the requester's
// sums, plain loops with the sums in the oracle's order by explicitly rounded adds and divides. In a
// header of their own so that the CPU emulation (tests/gpu/emulation) runs the same code.
#ifndef GEMTB_GPU_EMBEDDING_SHARD_KERNELS_CUH_
#define GEMTB_GPU_EMBEDDING_SHARD_KERNELS_CUH_

#include <cstdint>

#include "gpu/embedding/shard_routing.h"
#include "gpu/embedding/tbe_params.h"
#include "gpu/embedding/tbe_row_ops.h"
#include "model/embedding/embedding_math.h"
#include "model/numerics/fp32_ops.h"

namespace gemtb::gpu::embedding::shard_kernels {

constexpr int kThreads = 256;

// A warp per row of the runs: the row's run by binary search over the runs' first rows; a run
// with dst_rows >= 0 places its rows (on the dst side) at row_offsets[dst_rows + k].
__global__ void CopyRunsKernel(float* const* arrays, const CopyRun* runs, int64_t num_runs, int64_t total_rows,
                               const int64_t* row_offsets, bool reverse) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (row >= total_rows) return;
  const int lane = static_cast<int>(threadIdx.x % 32);
  int64_t lo = 0, hi = num_runs;  // the last run whose first row is <= row
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (runs[mid].first_row <= row) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const CopyRun r = runs[lo];
  const int64_t k = row - r.first_row;
  const int64_t src_at = r.src + k * r.src_stride;
  const int64_t dst_at = r.dst_rows >= 0 ? row_offsets[r.dst_rows + k] : r.dst + k * r.dst_stride;
  const float* src = arrays[reverse ? r.dst_array : r.src_array] + (reverse ? dst_at : src_at);
  float* dst = arrays[reverse ? r.src_array : r.dst_array] + (reverse ? src_at : dst_at);
  for (int64_t i = lane; i < r.count; i += 32) dst[i] = src[i];
}

// A block per (segment, sample), threads over the segment's columns.
__global__ void PooledGatherKernel(const PooledSegment* segments, const PooledPiece* pieces, const float* exchange,
                                   const int32_t* bag_counts, int64_t batch, int64_t width, float* pooled) {
  const PooledSegment seg = segments[blockIdx.x];
  const int64_t b = blockIdx.y;
  for (int64_t j = threadIdx.x; j < seg.width; j += blockDim.x) {
    float acc = 0.0f;
    for (int k = 0; k < seg.num_pieces; ++k) {
      const PooledPiece pc = pieces[seg.first_piece + k];
      const float x = exchange[pc.offset + b * pc.stride + j];
      acc = k == 0 ? x : numerics::AddRn(acc, x);
    }
    if (seg.mean_key >= 0) {
      const int32_t n = bag_counts[seg.mean_key * batch + b];
      acc = n == 0 ? 0.0f : numerics::DivRn(acc, static_cast<float>(n));
    }
    pooled[b * width + seg.out_col + j] = acc;
  }
}

__global__ void PooledScatterKernel(const PooledSegment* segments, const PooledPiece* pieces, const float* pooled_grad,
                                    const int32_t* bag_counts, int64_t batch, int64_t width, float* exchange) {
  const PooledSegment seg = segments[blockIdx.x];
  const int64_t b = blockIdx.y;
  const int32_t n = seg.mean_key >= 0 ? bag_counts[seg.mean_key * batch + b] : 0;
  for (int64_t j = threadIdx.x; j < seg.width; j += blockDim.x) {
    float g = pooled_grad[b * width + seg.out_col + j];
    if (n > 0) g = numerics::DivRn(g, static_cast<float>(n));
    for (int k = 0; k < seg.num_pieces; ++k) {
      const PooledPiece pc = pieces[seg.first_piece + k];
      exchange[pc.offset + b * pc.stride + j] = g;
    }
  }
}

__global__ void SumPartialsKernel(const float* gathered, int groups, int64_t count, float* total) {
  const int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (u >= count) return;
  float acc = gathered[u];
  for (int g = 1; g < groups; ++g) acc = numerics::AddRn(acc, gathered[g * count + u]);
  total[u] = acc;
}

// Storage seen as one row of n values, a thread per 4-value chunk.
inline TableParams FlatTable(const void* storage, ElementType dtype, int64_t n) {
  TableParams t;
  t.weights = const_cast<void*>(storage);
  t.rows = 1;
  t.dim = n;
  t.dtype = dtype;
  return t;
}

__global__ void WidenKernel(const TableParams t, float* out) {
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kChunk;
  if (c >= t.dim) return;
  float w[kChunk];
  LoadChunk(t, 0, c, w);
  for (int k = 0; k < kChunk; ++k) out[c + k] = w[k];
}

__global__ void NarrowKernel(const float* in, const TableParams t) {
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kChunk;
  if (c >= t.dim) return;
  float w[kChunk];
  for (int k = 0; k < kChunk; ++k) w[k] = in[c + k];
  StoreChunk(t, 0, c, w);
}

__global__ void ReplicaMeanKernel(const float* pieces, int replicas, int64_t count, bool round, ElementType dtype,
                                  float* out) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= count) return;
  float acc = pieces[e];
  for (int r = 1; r < replicas; ++r) acc = numerics::AddRn(acc, pieces[r * count + e]);
  float v = numerics::DivRn(acc, static_cast<float>(replicas));
  if (round) v = gemtb::embedding::StoreRne(v, dtype);
  out[e] = v;
}

// A block per row, threads over its 32-bit words.
__global__ void CopyRowsKernel(const uint32_t* src, const int64_t* src_rows, int64_t src_base, uint32_t* dst,
                               const int64_t* dst_rows, int64_t dst_base, int64_t row_words) {
  const int64_t j = blockIdx.x;
  const int64_t from = src_rows != nullptr ? src_rows[j] - src_base : j;
  const int64_t to = dst_rows != nullptr ? dst_rows[j] - dst_base : j;
  for (int64_t w = threadIdx.x; w < row_words; w += blockDim.x) dst[to * row_words + w] = src[from * row_words + w];
}

}  // namespace gemtb::gpu::embedding::shard_kernels

#endif  // GEMTB_GPU_EMBEDDING_SHARD_KERNELS_CUH_
