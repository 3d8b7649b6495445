// Candidate changes to the embedding forward's pooling kernel (gpu/embedding/forward_kernel.cuh),
// timed by embed_forward_probe against it on the benchmark shapes before any is adopted there.
// Every variant adds the same terms in the same order as PoolKernel (same bits; the probe checks
// each against PoolKernel's output). All read rows past L1 (RowLoad::kNoL1), as forward.cu does.
//
// The base of every variant (no option): the bag's table and feature fields (weights, dim,
// pooling) read once per bag into registers. PoolKernel reads them through references into the
// parameter arrays where it uses them, inside the branch of each row load and each added term;
// the compiler may not move a load out of a branch, so its SASS loads t.weights and t.dim again
// (two 8-byte L1 hits) before every row load's address, and fp.pooling before every term.
#ifndef GEMTB_GPU_BENCH_POOL_KERNEL_VARIANTS_CUH_
#define GEMTB_GPU_BENCH_POOL_KERNEL_VARIANTS_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "gpu/embedding/forward_kernel.cuh"

namespace gemtb::gpu::embedding::probe {

// The options, combinable (a bit each).
enum PoolOpt : unsigned {
  kOptNone = 0,
  // The inner loop trimmed: rows as 32-bit indices (one shuffle instead of two, and a row's address
  // one wide multiply-add of the row by the row's bytes onto the lane's column; every table needs
  // rows < 2^31), `valid` = row >= 0 alone (lanes past the bag's end hold -1 and kLoads divides
  // 32, so the position test is implied), weighted or not decided once per bag (no weight shuffle
  // or pooling test per term of an unweighted bag), and the count n taken once per 32 ids by a ballot.
  kOptLean = 1u << 0,
  // No 64-bit division per bag: a warp walks (feature f, sample b) by adding the quotient and
  // remainder of its stride (one division each, once per warp) with one carry.
  kOptNoDivide = 1u << 1,
  // The next bag's first 32 ids (one per lane) and the bag after next's offsets are loaded before
  // this bag's rows, so a bag boundary never waits on offsets -> ids (only ids -> rows).
  kOptPrefetch = 1u << 2,
  // D = 128 at compile time (only for tables of that dim): a lane's one chunk, no column loop and
  // no `active` test, the row stride a constant.
  kOptDim128 = 1u << 3,
  // The sums start at -0 and add every term: -0 + x is x for every x but a NaN, so this drops
  // SeqSum4's first-term select; an empty bag still gives +0 (the count decides). The one
  // difference: a bag whose only term is a NaN gets the GPU's canonical NaN, not its payload.
  kOptNegZeroSeed = 1u << 4,
};

// A warp's walk over bags bag, bag + stride, ... of `batch` samples per feature. kIncremental:
// (f, b) carried along (kOptNoDivide); otherwise divided out of the bag index when asked.
template <bool kIncremental>
struct BagWalk {
  int64_t bag, stride, batch;
  int64_t f = 0, b = 0, df = 0, db = 0;

  __device__ BagWalk(int64_t first, int64_t stride_, int64_t batch_) : bag(first), stride(stride_), batch(batch_) {
    if constexpr (kIncremental) {
      if (batch > 0) f = bag / batch, b = bag % batch, df = stride / batch, db = stride % batch;
    }
  }
  __device__ int64_t Feature() const {
    if constexpr (kIncremental) return f;
    else return bag / batch;
  }
  __device__ int64_t Sample() const {
    if constexpr (kIncremental) return b;
    else return bag % batch;
  }
  __device__ void Next() {
    bag += stride;
    if constexpr (kIncremental) {
      f += df;
      b += db;
      if (b >= batch) b -= batch, ++f;
    }
  }
};

// The storage words a row is addressed in: fp32 words, or 16-bit values.
template <ElementType kDtype>
using RowWord = std::conditional_t<kDtype == ElementType::kFloat32, uint32_t, uint16_t>;

// One lane's chunk at `a`, past L1 (LoadRowChunk's kNoL1 load, given the address).
template <ElementType kDtype>
__device__ inline StoredChunk<kDtype> LoadChunkNoL1(const RowWord<kDtype>* a) {
  StoredChunk<kDtype> s;
  if constexpr (kDtype == ElementType::kFloat32) {
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(s.word[0]), "=r"(s.word[1]), "=r"(s.word[2]), "=r"(s.word[3]) : "l"(a));
  } else {
    asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(s.word[0]), "=r"(s.word[1]) : "l"(a));
  }
  return s;
}

// The lane's chunk of row `row` (>= 0): column + row * row_bytes as one wide multiply-add (in C++
// the compiler reassociates it into a multiply, an or and two address adds).
template <typename Word>
__device__ inline const Word* RowAddress(const Word* column, uint32_t row, uint32_t row_bytes) {
  uint64_t a;
  asm("mad.wide.u32 %0, %1, %2, %3;" : "=l"(a) : "r"(row), "r"(row_bytes), "l"(reinterpret_cast<uint64_t>(column)));
  return reinterpret_cast<const Word*>(a);
}

// PoolBag with the bag's fields in registers and the options in kOpts. first_id: values[begin +
// lane] where begin + lane < end (read only under kOptPrefetch). kWeighted: 1 or 0 when the caller
// has tested the pooling (kOptLean), -1 to test it here.
template <ElementType kDtype, int kLoads, unsigned kOpts, int kWeighted>
__device__ inline void PoolBagVariant(const LaunchParams& p, const FeatureParams& fp, const TableParams& t, int64_t b,
                                      int64_t begin, int64_t end, int64_t first_id, int lane) {
  constexpr bool kLean = (kOpts & kOptLean) != 0;
  constexpr bool kDim128 = (kOpts & kOptDim128) != 0;
  constexpr bool kSeed = (kOpts & kOptNegZeroSeed) != 0;
  static_assert(!kLean || 32 % kLoads == 0, "kOptLean needs kLoads to divide 32 (positions k0 + u stay below 32)");
  using Row = std::conditional_t<kLean, int32_t, int64_t>;
  const RowWord<kDtype>* const weights = static_cast<const RowWord<kDtype>*>(t.weights);
  const int64_t dim = kDim128 ? 128 : t.dim;
  const uint32_t row_bytes = static_cast<uint32_t>(dim * sizeof(RowWord<kDtype>));  // kOptLean's addresses
  const Pooling pooling = fp.pooling;
  const bool weighted = kWeighted < 0 ? pooling == Pooling::kWeightedSum : kWeighted == 1;
  const Pooling term = weighted ? Pooling::kWeightedSum : Pooling::kSum;  // PoolTerm's test, folded when kWeighted is known
  float* const out = p.pooled + b * p.pooled_width + fp.out_col;
  for (int64_t c0 = 0; c0 < dim; c0 += 32 * kChunk) {
    const int64_t c = c0 + lane * kChunk;
    const bool active = kDim128 || c < dim;
    const RowWord<kDtype>* const column = weights + c;
    SeqSum4 sum;
    if constexpr (kSeed) sum.v[0] = sum.v[1] = sum.v[2] = sum.v[3] = -0.0f;
    int64_t n = 0;
    for (int64_t v0 = begin; v0 < end; v0 += 32) {
      Row my_row = -1;
      float my_weight = 0.0f;
      if (v0 + lane < end) {
        const int64_t id = (kOpts & kOptPrefetch) != 0 && v0 == begin ? first_id : p.kjt.values[v0 + lane];
        my_row = static_cast<Row>(ResolveRow(t, id));
        if (weighted) my_weight = p.kjt.weights[v0 + lane];
      }
      if constexpr (kLean) n += __popc(__ballot_sync(kForwardFullMask, my_row >= 0));
      const int count = static_cast<int>(std::min<int64_t>(32, end - v0));
      for (int k0 = 0; k0 < count; k0 += kLoads) {
        StoredChunk<kDtype> raw[kLoads];
        unsigned valid = 0;  // bit u: position k0+u exists and its id is valid
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
          const Row row = __shfl_sync(kForwardFullMask, my_row, kLean ? k0 + u : (k0 + u) & 31);
          if ((kLean || k0 + u < count) && row >= 0) {
            valid |= 1u << u;
            if constexpr (kLean) {
              if (active) raw[u] = LoadChunkNoL1<kDtype>(RowAddress(column, static_cast<uint32_t>(row), row_bytes));
            } else {
              if (active) raw[u] = LoadChunkNoL1<kDtype>(column + row * dim);
            }
          }
        }
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
          float weight = 0.0f;
          if (!kLean || weighted) weight = __shfl_sync(kForwardFullMask, my_weight, (k0 + u) & 31);
          if ((valid >> u & 1u) == 0) continue;
          if constexpr (!kLean) ++n;
          if (!active) continue;
          float e[kChunk];
          WidenChunk(raw[u], e);
          PoolTerm(term, weight, e);
          if constexpr (kSeed) {
            for (int k = 0; k < kChunk; ++k) sum.v[k] = numerics::AddRn(sum.v[k], e[k]);
          } else {
            sum.Add(e);
          }
        }
      }
    }
    if (!active) continue;
    if constexpr (kSeed) sum.any = n > 0;
    float pooled[kChunk];
    FinishPool(pooling, sum, n, pooled);
    *reinterpret_cast<float4*>(out + c) = make_float4(pooled[0], pooled[1], pooled[2], pooled[3]);
  }
}

// PoolKernel's grid walk with the options in kOpts (the launch parameters as PoolKernel's).
template <ElementType kDtype, int kLoads, int kMinBlocks, int kWarps, unsigned kOpts>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks) PoolKernelVariant(const LaunchParams p) {
  constexpr bool kPrefetch = (kOpts & kOptPrefetch) != 0;
  const int64_t total = p.kjt.num_keys * p.kjt.batch;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps;
  const int lane = static_cast<int>(threadIdx.x % 32);
  BagWalk<(kOpts & kOptNoDivide) != 0> walk(static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32, stride,
                                            p.kjt.batch);
  // kPrefetch: this bag's bounds and first ids, and the next bag's bounds, loaded one and two bags ahead.
  int64_t begin = 0, end = 0, first_id = 0, next_begin = 0, next_end = 0;
  if constexpr (kPrefetch) {
    if (walk.bag < total) {
      begin = p.kjt.offsets[walk.bag], end = p.kjt.offsets[walk.bag + 1];
      if (begin + lane < end) first_id = p.kjt.values[begin + lane];
    }
    if (walk.bag + stride < total) next_begin = p.kjt.offsets[walk.bag + stride], next_end = p.kjt.offsets[walk.bag + stride + 1];
  }
  for (; walk.bag < total; walk.Next()) {
    int64_t next_id = 0, after_begin = 0, after_end = 0;
    if constexpr (kPrefetch) {
      // Issued before this bag's rows, used only by the next bags: the rows' latency covers theirs.
      const int64_t next = walk.bag + stride, after = next + stride;
      if (next < total && next_begin + lane < next_end) next_id = p.kjt.values[next_begin + lane];
      if (after < total) after_begin = p.kjt.offsets[after], after_end = p.kjt.offsets[after + 1];
    }
    const FeatureParams& fp = p.features[walk.Feature()];
    const TableParams& t = p.tables[fp.table];
    if (fp.pooling != Pooling::kNone && t.dtype == kDtype) {  // warp-uniform
      if constexpr (!kPrefetch) begin = p.kjt.offsets[walk.bag], end = p.kjt.offsets[walk.bag + 1];
      if constexpr ((kOpts & kOptLean) == 0) {
        PoolBagVariant<kDtype, kLoads, kOpts, -1>(p, fp, t, walk.Sample(), begin, end, first_id, lane);
      } else if (fp.pooling == Pooling::kWeightedSum) {
        PoolBagVariant<kDtype, kLoads, kOpts, 1>(p, fp, t, walk.Sample(), begin, end, first_id, lane);
      } else {
        PoolBagVariant<kDtype, kLoads, kOpts, 0>(p, fp, t, walk.Sample(), begin, end, first_id, lane);
      }
    }
    if constexpr (kPrefetch) begin = next_begin, end = next_end, first_id = next_id, next_begin = after_begin, next_end = after_end;
  }
}

}  // namespace gemtb::gpu::embedding::probe

#endif  // GEMTB_GPU_BENCH_POOL_KERNEL_VARIANTS_CUH_
