// The embedding forward's pooling kernel, a warp per bag (f, b). Lanes own 4-column chunks (one vector load
// each) and walk the bag's positions in order, so every column is the oracle's seqsum; the ids of
// 32 positions resolve in parallel, one per lane, and several rows' loads are in flight before
// their terms are added in position order. Each lane keeps the raw bits of its loads (16 bytes a
// load for fp32, 8 for fp16/bf16) and widens a chunk only when adding it, with the conversion of
// its storage type (bf16: a shift). forward.cu launches one instantiation per storage type;
// gpu/bench/embed_forward_probe.cu times others on the benchmark shape (tools/bench/NOTES.md).
#ifndef GEMTB_GPU_EMBEDDING_FORWARD_KERNEL_CUH_
#define GEMTB_GPU_EMBEDDING_FORWARD_KERNEL_CUH_

#include <cuda_runtime.h>

#include <algorithm>

#include "absl/status/statusor.h"
#include "gpu/common/device_buffer.h"
#include "gpu/embedding/launch.h"
#include "gpu/embedding/tbe_row_ops.h"

namespace gemtb::gpu::embedding {

inline constexpr unsigned kForwardFullMask = 0xFFFFFFFFu;

// How the forward reads table rows. The forward never writes a table, so the read-only
// (non-coherent) path is safe, and a row of a uniform gather is rarely read again by the same SM,
// so it need not take L1 space (a hot table's rows do gain from L1: the Zipf shape; NOTES.md).
enum class RowLoad {
  kCached,  // a plain load
  kNoL1,    // ld.global.nc.L1::no_allocate (an L2 evict_first or evict_last policy on top gained
            // nothing or lost 4%: NOTES.md)
};

template <ElementType kDtype, RowLoad kLoad>
__device__ inline StoredChunk<kDtype> LoadRowChunk(const TableParams& t, int64_t row, int64_t c) {
  if constexpr (kLoad == RowLoad::kCached) {
    return LoadStoredChunk<kDtype>(t, row, c);
  } else {
    StoredChunk<kDtype> s;
    if constexpr (kDtype == ElementType::kFloat32) {
      const uint32_t* a = static_cast<const uint32_t*>(t.weights) + row * t.dim + c;
      asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
          : "=r"(s.word[0]), "=r"(s.word[1]), "=r"(s.word[2]), "=r"(s.word[3]) : "l"(a));
    } else {
      const uint16_t* a = static_cast<const uint16_t*>(t.weights) + row * t.dim + c;
      asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(s.word[0]), "=r"(s.word[1]) : "l"(a));
    }
    return s;
  }
}

template <ElementType kDtype, int kLoads, RowLoad kLoad>
inline __device__ void PoolBag(const LaunchParams& p, const FeatureParams& fp, const TableParams& t, int64_t b,
                        int64_t begin, int64_t end, int lane) {
  const bool weighted = fp.pooling == Pooling::kWeightedSum;
  for (int64_t c0 = 0; c0 < t.dim; c0 += 32 * kChunk) {
    const int64_t c = c0 + lane * kChunk;
    const bool active = c < t.dim;
    SeqSum4 sum;
    int64_t n = 0;
    for (int64_t v0 = begin; v0 < end; v0 += 32) {
      int64_t my_row = -1;
      float my_weight = 0.0f;
      if (v0 + lane < end) {
        my_row = ResolveRow(t, p.kjt.values[v0 + lane]);
        if (weighted) my_weight = p.kjt.weights[v0 + lane];
      }
      const int count = static_cast<int>(std::min<int64_t>(32, end - v0));
      for (int k0 = 0; k0 < count; k0 += kLoads) {
        StoredChunk<kDtype> raw[kLoads];
        unsigned valid = 0;  // bit u: position k0+u exists and its id is valid
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
          const int64_t row = __shfl_sync(kForwardFullMask, my_row, (k0 + u) & 31);
          if (k0 + u < count && row >= 0) {
            valid |= 1u << u;
            if (active) raw[u] = LoadRowChunk<kDtype, kLoad>(t, row, c);
          }
        }
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
          const float weight = __shfl_sync(kForwardFullMask, my_weight, (k0 + u) & 31);
          if ((valid >> u & 1u) == 0) continue;
          ++n;
          if (!active) continue;
          float e[kChunk];
          WidenChunk(raw[u], e);
          PoolTerm(fp.pooling, weight, e);
          sum.Add(e);
        }
      }
    }
    if (!active) continue;
    float out[kChunk];
    FinishPool(fp.pooling, sum, n, out);
    *reinterpret_cast<float4*>(p.pooled + b * p.pooled_width + fp.out_col + c) = make_float4(out[0], out[1], out[2], out[3]);
  }
}

// One kernel per storage type of the pooled bags (forward.cu has the sequence gathers'): a launch
// holds only its kind's registers (one kernel for all kinds held the largest of them, at fewer warps
// per SM). Warp w of a grid of W warps takes bags w, w + W, ..., skipping those of other kinds;
// PoolGrid sizes the grid to what fits on the GPU at once. kLoads: loads in flight per lane; kWarps:
// warps per block; kMinBlocks: the blocks per SM that __launch_bounds__ sizes the registers for;
// kLoad: the row loads' cache hints.
template <ElementType kDtype, int kLoads, int kMinBlocks, int kWarps, RowLoad kLoad>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks) PoolKernel(const LaunchParams p) {
  const int64_t total = p.kjt.num_keys * p.kjt.batch;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps;
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int64_t bag = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; bag < total; bag += stride) {
    const FeatureParams& fp = p.features[bag / p.kjt.batch];
    if (fp.pooling == Pooling::kNone) continue;  // warp-uniform
    const TableParams& t = p.tables[fp.table];
    if (t.dtype != kDtype) continue;
    PoolBag<kDtype, kLoads, kLoad>(p, fp, t, bag % p.kjt.batch, p.kjt.offsets[bag], p.kjt.offsets[bag + 1], lane);
  }
}

// How many blocks of `kernel` (`warps` warps each) fit on the current GPU at once.
template <typename Kernel>
absl::StatusOr<int64_t> ResidentBlocks(Kernel kernel, int warps) {
  int device = 0, sms = 0, per_sm = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return CudaOk(e, "cudaGetDevice");
  if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device); e != cudaSuccess) {
    return CudaOk(e, "cudaDeviceGetAttribute");
  }
  if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, warps * 32, 0); e != cudaSuccess) {
    return CudaOk(e, "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  }
  return static_cast<int64_t>(sms) * std::max(per_sm, 1);
}

// The grid of a pool kernel of `warps`-warp blocks over `bags` bags: the `resident` blocks that fit
// on the GPU at once (each warp then takes several bags), or fewer when there are fewer bags.
inline unsigned PoolGrid(int64_t bags, int warps, int64_t resident) {
  return static_cast<unsigned>(std::min<int64_t>((bags + warps - 1) / warps, resident));
}

}  // namespace gemtb::gpu::embedding

#endif  // GEMTB_GPU_EMBEDDING_FORWARD_KERNEL_CUH_
