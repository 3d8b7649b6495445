// The embedding forward's pooling kernel, a warp per bag (f, b). Lanes own 4-column chunks (one vector load
// each) and walk the bag's positions in order, so every column is the oracle's seqsum; the ids of
// 32 positions resolve in parallel, one per lane, and several rows' loads are in flight before
// their terms are added in position order. Each lane keeps the raw bits of its loads (16 bytes a
// load for fp32, 8 for fp16/bf16) and widens a chunk only when adding it, with the conversion of
// its storage type (bf16: a shift). forward.cu launches one instantiation per kind of bag (storage
// type, D = 128 or not) at the row width the tables need; gpu/bench/embed_forward_probe.cu times
// others on the benchmark shape (tools/bench/NOTES.md).
//
// What the inner loop leaves out (measured together on the H200, 32-bit rows also alone: NOTES.md):
// a bag's table and feature fields are read once into registers (through references the compiler
// reloads them before every row load, as it may not hoist a load out of a branch); rows are 32-bit
// where every table has fewer than 2^31 (one shuffle per row, and its address one wide
// multiply-add); lanes past the bag's end hold row -1, so a row >= 0 is the whole validity test;
// whether a bag is weighted is decided once per bag, and tables of D = 128 have a kernel of their
// own (one chunk per lane, no column loop); a bag's count of valid ids comes from one ballot per 32
// ids; and the warp walks (feature, sample) without a 64-bit division per bag.
#ifndef GEMTB_GPU_EMBEDDING_FORWARD_KERNEL_CUH_
#define GEMTB_GPU_EMBEDDING_FORWARD_KERNEL_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

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

// The storage words a row is addressed in: fp32 words, or 16-bit values.
template <ElementType kDtype>
using RowWord = std::conditional_t<kDtype == ElementType::kFloat32, uint32_t, uint16_t>;

// One lane's chunk at `a`.
template <ElementType kDtype, RowLoad kLoad>
__device__ inline StoredChunk<kDtype> LoadRowChunk(const RowWord<kDtype>* a) {
  StoredChunk<kDtype> s;
  if constexpr (kDtype == ElementType::kFloat32) {
    if constexpr (kLoad == RowLoad::kCached) {
      const uint4 v = *reinterpret_cast<const uint4*>(a);
      s.word[0] = v.x, s.word[1] = v.y, s.word[2] = v.z, s.word[3] = v.w;
    } else {
      asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
          : "=r"(s.word[0]), "=r"(s.word[1]), "=r"(s.word[2]), "=r"(s.word[3]) : "l"(a));
    }
  } else {
    if constexpr (kLoad == RowLoad::kCached) {
      const uint2 v = *reinterpret_cast<const uint2*>(a);
      s.word[0] = v.x, s.word[1] = v.y;
    } else {
      asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(s.word[0]), "=r"(s.word[1]) : "l"(a));
    }
  }
  return s;
}

// The lane's chunk of row `row` (>= 0) given its chunk of row 0. A 32-bit row: column + row *
// row_bytes as one wide multiply-add (written in C++, the compiler splits it into a multiply, an
// or and two address adds). A 64-bit row: the plain product.
template <typename Word>
__device__ inline const Word* RowAddress(const Word* column, int32_t row, int64_t dim) {
  uint64_t a;
  asm("mad.wide.u32 %0, %1, %2, %3;"
      : "=l"(a)
      : "r"(static_cast<uint32_t>(row)), "r"(static_cast<uint32_t>(dim * sizeof(Word))),
        "l"(reinterpret_cast<uint64_t>(column)));
  return reinterpret_cast<const Word*>(a);
}
template <typename Word>
__device__ inline const Word* RowAddress(const Word* column, int64_t row, int64_t dim) {
  return column + row * dim;
}

// One bag: the seqsum of its valid ids' rows (weighted when kWeighted), finished by `pooling`
// (SUM, MEAN or weighted SUM) into out[0, D). Row: int32_t or int64_t (every table's rows fit it).
// kDim: the table's D when known at compile time (128), else 0 (D = t.dim, a multiple of 4).
template <ElementType kDtype, typename Row, int kDim, bool kWeighted, int kLoads, RowLoad kLoad>
__device__ inline void PoolBag(const LaunchParams& p, const TableParams& t, Pooling pooling, float* out, int64_t begin,
                               int64_t end, int lane) {
  static_assert(32 % kLoads == 0, "the positions k0 + u of a 32-id step stay below 32");
  const RowWord<kDtype>* const weights = static_cast<const RowWord<kDtype>*>(t.weights);
  const int64_t dim = kDim != 0 ? kDim : t.dim;
  for (int64_t c0 = 0; c0 < dim; c0 += 32 * kChunk) {
    const int64_t c = c0 + lane * kChunk;
    const bool active = (kDim != 0 && kDim % (32 * kChunk) == 0) || c < dim;
    const RowWord<kDtype>* const column = weights + c;
    SeqSum4 sum;
    int64_t n = 0;
    for (int64_t v0 = begin; v0 < end; v0 += 32) {
      Row my_row = -1;  // also past the bag's end: row >= 0 is the whole validity test below
      float my_weight = 0.0f;
      if (v0 + lane < end) {
        my_row = static_cast<Row>(ResolveRow(t, p.kjt.values[v0 + lane]));
        if constexpr (kWeighted) my_weight = p.kjt.weights[v0 + lane];
      }
      n += __popc(__ballot_sync(kForwardFullMask, my_row >= 0));
      const int count = static_cast<int>(std::min<int64_t>(32, end - v0));
      for (int k0 = 0; k0 < count; k0 += kLoads) {
        StoredChunk<kDtype> raw[kLoads];
        unsigned valid = 0;  // bit u: position k0+u exists and its id is valid
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
          const Row row = __shfl_sync(kForwardFullMask, my_row, k0 + u);
          if (row >= 0) {
            valid |= 1u << u;
            if (active) raw[u] = LoadRowChunk<kDtype, kLoad>(RowAddress(column, row, dim));
          }
        }
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
          float weight = 0.0f;
          if constexpr (kWeighted) weight = __shfl_sync(kForwardFullMask, my_weight, k0 + u);
          if ((valid >> u & 1u) == 0 || !active) continue;
          float e[kChunk];
          WidenChunk(raw[u], e);
          PoolTerm(kWeighted ? Pooling::kWeightedSum : Pooling::kSum, weight, e);
          sum.Add(e);
        }
      }
    }
    if (!active) continue;
    float pooled[kChunk];
    FinishPool(pooling, sum, n, pooled);
    *reinterpret_cast<float4*>(out + c) = make_float4(pooled[0], pooled[1], pooled[2], pooled[3]);
  }
}

// A warp's walk over bags bag, bag + stride, ... of `batch` samples per feature, carrying (feature,
// sample) along: the quotient and remainder of the stride are divided out once per warp, not per bag.
struct BagWalk {
  int64_t bag, stride, batch;
  int64_t f = 0, b = 0, df = 0, db = 0;

  __device__ BagWalk(int64_t first, int64_t stride_, int64_t batch_) : bag(first), stride(stride_), batch(batch_) {
    if (batch > 0) f = bag / batch, b = bag % batch, df = stride / batch, db = stride % batch;
  }
  __device__ void Next() {
    bag += stride;
    f += df;
    b += db;
    if (b >= batch) b -= batch, ++f;
  }
};

// One kernel per kind of pooled bag, its storage type and D = 128 or not (forward.cu has the
// sequence gathers'): a launch holds only its kind's registers (one kernel for all kinds held the
// largest of them, at fewer warps per SM or with spills). Warp w of a grid of W warps takes bags w,
// w + W, ..., skipping those of other kinds; PoolGrid sizes the grid to what fits on the GPU at
// once. kDim: 128, or 0 for the tables of any other D; Row: int32_t when every table has fewer
// than 2^31 rows, else int64_t; kLoads: loads in flight per lane; kWarps: warps per block;
// kMinBlocks: the blocks per SM that __launch_bounds__ sizes the registers for; kLoad: the row
// loads' cache hints.
template <ElementType kDtype, int kDim, typename Row, int kLoads, int kMinBlocks, int kWarps, RowLoad kLoad>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks) PoolKernel(const LaunchParams p) {
  static_assert(kDim == 0 || kDim == 128, "the D = 128 kernel, or the one for any other D");
  const int64_t total = p.kjt.num_keys * p.kjt.batch;
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (BagWalk w(static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32, static_cast<int64_t>(gridDim.x) * kWarps,
                 p.kjt.batch);
       w.bag < total; w.Next()) {
    const FeatureParams& fp = p.features[w.f];
    const Pooling pooling = fp.pooling;
    if (pooling == Pooling::kNone) continue;  // warp-uniform
    const TableParams& t = p.tables[fp.table];
    if (t.dtype != kDtype || (t.dim == 128) != (kDim == 128)) continue;
    float* const out = p.pooled + w.b * p.pooled_width + fp.out_col;
    const int64_t begin = p.kjt.offsets[w.bag], end = p.kjt.offsets[w.bag + 1];
    if (pooling == Pooling::kWeightedSum) PoolBag<kDtype, Row, kDim, true, kLoads, kLoad>(p, t, pooling, out, begin, end, lane);
    else PoolBag<kDtype, Row, kDim, false, kLoads, kLoad>(p, t, pooling, out, begin, end, lane);
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
