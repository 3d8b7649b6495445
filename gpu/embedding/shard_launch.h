// The kernels behind sharded_tbe.cc (shard_kernels.cu): the routing's plans (shard_routing.h)
// executed on the device, on the legacy stream. Every pointer is device memory.
#ifndef GEMTB_GPU_EMBEDDING_SHARD_LAUNCH_H_
#define GEMTB_GPU_EMBEDDING_SHARD_LAUNCH_H_

#include <cstdint>

#include "absl/status/status.h"
#include "gpu/embedding/shard_routing.h"
#include "model/common/element_type.h"

namespace gemtb::gpu::embedding {

// Every run's rows from arrays[src_array] to arrays[dst_array] (`reverse`: from dst to src); the
// runs numbered by NumberRows, `total_rows` of them; `row_offsets` the plan's (null if no run has
// dst_rows).
absl::Status LaunchCopyRuns(float* const* arrays, const CopyRun* runs, int64_t num_runs, int64_t total_rows,
                            const int64_t* row_offsets, bool reverse);

// The requester's pooled output [b, width] from the exchange buffer: each segment's columns the
// seqsum of its pieces in order, a MEAN key's divided by its bag's n (+0 when n = 0).
absl::Status LaunchPooledGather(const PooledSegment* segments, int64_t num_segments, const PooledPiece* pieces,
                                const float* exchange, const int32_t* bag_counts, int64_t batch, int64_t width,
                                float* pooled);

// The gradients' way back: each segment's columns of `pooled_grad` [b, width] (a MEAN key's
// divided by n when n > 0) into every piece of the exchange buffer.
absl::Status LaunchPooledScatter(const PooledSegment* segments, int64_t num_segments, const PooledPiece* pieces,
                                 const float* pooled_grad, const int32_t* bag_counts, int64_t batch, int64_t width,
                                 float* exchange);

// total[u] = seqsum over g < groups of gathered[g * count + u] (column shards' partial square sums
// in column-shard order).
absl::Status LaunchSumPartials(const float* gathered, int groups, int64_t count, float* total);

// Replicas (2D plans): `n` storage values (a multiple of 4) widened exactly to fp32, and back
// (values already representable in the storage type).
absl::Status LaunchWiden(const void* storage, ElementType dtype, int64_t n, float* out);
absl::Status LaunchNarrow(const float* in, int64_t n, ElementType dtype, void* storage);

// Rows of `row_bytes` bytes (a multiple of 4): dst row (dst_rows ? dst_rows[j] - dst_base : j) takes
// src row (src_rows ? src_rows[j] - src_base : j), for j < n (fully sharded 2D's touched rows).
absl::Status LaunchCopyRows(const void* src, const int64_t* src_rows, int64_t src_base, void* dst,
                            const int64_t* dst_rows, int64_t dst_base, int64_t n, int64_t row_bytes);

// out[e] = seqsum over r < replicas of pieces[r * count + e], divided by `replicas`; with `round`,
// rounded to `dtype` by RNE (the replicas' mean of weights; optimizer state stays fp32).
absl::Status LaunchReplicaMean(const float* pieces, int replicas, int64_t count, bool round, ElementType dtype,
                               float* out);

}  // namespace gemtb::gpu::embedding

#endif  // GEMTB_GPU_EMBEDDING_SHARD_LAUNCH_H_
