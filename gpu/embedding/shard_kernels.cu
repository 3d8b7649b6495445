// The sharded module's data movement and the requester's sums (shard_launch.h): plain loops, the
// sums in the oracle's order with explicitly rounded adds and divides.
#include "gpu/common/device_buffer.h"
#include "gpu/embedding/shard_launch.h"
#include "gpu/embedding/tbe_row_ops.h"
#include "model/embedding/embedding_math.h"
#include "model/numerics/fp32_ops.h"

namespace gemtb::gpu::embedding {
namespace {

constexpr int kThreads = 256;

// A warp per run.
__global__ void CopyRunsKernel(float* const* arrays, const CopyRun* runs, int64_t num_runs, bool reverse) {
  const int64_t run = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (run >= num_runs) return;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const CopyRun r = runs[run];
  const float* src = arrays[reverse ? r.dst_array : r.src_array] + (reverse ? r.dst : r.src);
  float* dst = arrays[reverse ? r.src_array : r.dst_array] + (reverse ? r.src : r.dst);
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
TableParams FlatTable(const void* storage, ElementType dtype, int64_t n) {
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

unsigned Blocks(int64_t items, int64_t per_block) { return static_cast<unsigned>((items + per_block - 1) / per_block); }

}  // namespace

absl::Status LaunchCopyRuns(float* const* arrays, const CopyRun* runs, int64_t num_runs, bool reverse) {
  if (num_runs == 0) return absl::OkStatus();
  CopyRunsKernel<<<Blocks(num_runs * 32, kThreads), kThreads>>>(arrays, runs, num_runs, reverse);
  return CudaOk(cudaGetLastError(), "launch of the shard copy kernel");
}

absl::Status LaunchPooledGather(const PooledSegment* segments, int64_t num_segments, const PooledPiece* pieces,
                                const float* exchange, const int32_t* bag_counts, int64_t batch, int64_t width,
                                float* pooled) {
  if (num_segments == 0 || batch == 0) return absl::OkStatus();
  PooledGatherKernel<<<dim3(static_cast<unsigned>(num_segments), static_cast<unsigned>(batch)), 128>>>(
      segments, pieces, exchange, bag_counts, batch, width, pooled);
  return CudaOk(cudaGetLastError(), "launch of the pooled gather kernel");
}

absl::Status LaunchPooledScatter(const PooledSegment* segments, int64_t num_segments, const PooledPiece* pieces,
                                 const float* pooled_grad, const int32_t* bag_counts, int64_t batch, int64_t width,
                                 float* exchange) {
  if (num_segments == 0 || batch == 0) return absl::OkStatus();
  PooledScatterKernel<<<dim3(static_cast<unsigned>(num_segments), static_cast<unsigned>(batch)), 128>>>(
      segments, pieces, pooled_grad, bag_counts, batch, width, exchange);
  return CudaOk(cudaGetLastError(), "launch of the pooled scatter kernel");
}

absl::Status LaunchSumPartials(const float* gathered, int groups, int64_t count, float* total) {
  if (count == 0) return absl::OkStatus();
  SumPartialsKernel<<<Blocks(count, kThreads), kThreads>>>(gathered, groups, count, total);
  return CudaOk(cudaGetLastError(), "launch of the partial-sum kernel");
}

absl::Status LaunchCopyRows(const void* src, const int64_t* src_rows, int64_t src_base, void* dst,
                            const int64_t* dst_rows, int64_t dst_base, int64_t n, int64_t row_bytes) {
  if (n == 0 || row_bytes == 0) return absl::OkStatus();
  if (row_bytes % 4 != 0) return absl::InvalidArgumentError("row_bytes: not a multiple of 4");
  CopyRowsKernel<<<static_cast<unsigned>(n), 128>>>(static_cast<const uint32_t*>(src), src_rows, src_base,
                                                     static_cast<uint32_t*>(dst), dst_rows, dst_base, row_bytes / 4);
  return CudaOk(cudaGetLastError(), "launch of the row copy kernel");
}

absl::Status LaunchWiden(const void* storage, ElementType dtype, int64_t n, float* out) {
  if (n == 0) return absl::OkStatus();
  WidenKernel<<<Blocks(n / kChunk, kThreads), kThreads>>>(FlatTable(storage, dtype, n), out);
  return CudaOk(cudaGetLastError(), "launch of the widen kernel");
}

absl::Status LaunchNarrow(const float* in, int64_t n, ElementType dtype, void* storage) {
  if (n == 0) return absl::OkStatus();
  NarrowKernel<<<Blocks(n / kChunk, kThreads), kThreads>>>(in, FlatTable(storage, dtype, n));
  return CudaOk(cudaGetLastError(), "launch of the narrow kernel");
}

absl::Status LaunchReplicaMean(const float* pieces, int replicas, int64_t count, bool round, ElementType dtype,
                               float* out) {
  if (count == 0) return absl::OkStatus();
  ReplicaMeanKernel<<<Blocks(count, kThreads), kThreads>>>(pieces, replicas, count, round, dtype, out);
  return CudaOk(cudaGetLastError(), "launch of the replica-mean kernel");
}

}  // namespace gemtb::gpu::embedding
