// The launches of the sharded module's kernels (shard_kernels.cuh).
#include "gpu/common/device_buffer.h"
#include "gpu/embedding/shard_kernels.cuh"
#include "gpu/embedding/shard_launch.h"

namespace gemtb::gpu::embedding {
namespace {

using namespace shard_kernels;  // the kernels this file launches

unsigned Blocks(int64_t items, int64_t per_block) { return static_cast<unsigned>((items + per_block - 1) / per_block); }

}  // namespace

absl::Status LaunchCopyRuns(float* const* arrays, const CopyRun* runs, int64_t num_runs, int64_t total_rows,
                            const int64_t* row_offsets, bool reverse) {
  if (num_runs == 0 || total_rows == 0) return absl::OkStatus();
  CopyRunsKernel<<<Blocks(total_rows * 32, kThreads), kThreads>>>(arrays, runs, num_runs, total_rows, row_offsets,
                                                                  reverse);
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
