// The embedding forward's sequence gather (NONE keys), device code only: forward.cu launches it, and
// the CPU fiber emulation (tests/gpu/emulation/) builds it too, where its bytes are compared with
// the oracle's forward.
#ifndef GEMTB_GPU_EMBEDDING_SEQUENCE_KERNEL_CUH_
#define GEMTB_GPU_EMBEDDING_SEQUENCE_KERNEL_CUH_

#include <cstdint>

#include "gpu/embedding/launch.h"
#include "gpu/embedding/tbe_row_ops.h"

namespace gemtb::gpu::embedding {

// NONE keys: each position's row copied out (+0 for an id dropped under `zero`). A warp takes its bag
// 32 positions at a time: lane j resolves position j's row (32 id loads side by side), then the warp
// copies kSequenceRowsInFlight rows at a time, their loads issued before their stores, so that a
// long sequence is not one load's latency after another.
constexpr int kSequenceWarps = 8;
constexpr int kSequenceRowsInFlight = 4;
constexpr unsigned kFullMask = 0xFFFFFFFFu;

__device__ void GatherSequence(const LaunchParams& p, const FeatureParams& fp, const TableParams& t, int64_t begin,
                               int64_t end, int lane) {
  for (int64_t v0 = begin; v0 < end; v0 += 32) {
    const int count = static_cast<int>(min(static_cast<int64_t>(32), end - v0));
    const int64_t mine = lane < count ? ResolveRow(t, p.kjt.values[v0 + lane]) : -1;
    float* out = fp.sequence + (v0 - fp.value_begin) * t.dim;
    for (int j0 = 0; j0 < count; j0 += kSequenceRowsInFlight) {
      int64_t rows[kSequenceRowsInFlight];
#pragma unroll
      for (int u = 0; u < kSequenceRowsInFlight; ++u) rows[u] = __shfl_sync(kFullMask, mine, (j0 + u) % 32);
      for (int64_t c = lane * kChunk; c < t.dim; c += 32 * kChunk) {
        float e[kSequenceRowsInFlight][kChunk] = {};
#pragma unroll
        for (int u = 0; u < kSequenceRowsInFlight; ++u) {
          if (j0 + u < count && rows[u] >= 0) LoadChunk(t, rows[u], c, e[u]);
        }
#pragma unroll
        for (int u = 0; u < kSequenceRowsInFlight; ++u) {
          if (j0 + u < count) {
            *reinterpret_cast<float4*>(out + (j0 + u) * t.dim + c) = make_float4(e[u][0], e[u][1], e[u][2], e[u][3]);
          }
        }
      }
    }
  }
}

__global__ void __launch_bounds__(kSequenceWarps * 32) SequenceKernel(const LaunchParams p) {
  const int64_t bag = static_cast<int64_t>(blockIdx.x) * kSequenceWarps + threadIdx.x / 32;
  if (bag >= p.kjt.num_keys * p.kjt.batch) return;
  const FeatureParams& fp = p.features[bag / p.kjt.batch];
  if (fp.pooling != Pooling::kNone) return;
  const int lane = static_cast<int>(threadIdx.x % 32);
  GatherSequence(p, fp, p.tables[fp.table], p.kjt.offsets[bag], p.kjt.offsets[bag + 1], lane);
}

}  // namespace gemtb::gpu::embedding

#endif  // GEMTB_GPU_EMBEDDING_SEQUENCE_KERNEL_CUH_
