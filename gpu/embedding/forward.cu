// The forward of every table and key in one launch, a warp per bag (f, b). Lanes own 4-column
// chunks (one vector load each) and walk the bag's positions in order, so every column is the
// oracle's seqsum; the ids of 32 positions resolve in parallel, one per lane, and several rows'
// loads are in flight before their terms are added in position order. The pooling loop is
// compiled once per storage type: each lane keeps the raw bits of its loads (16 bytes a load for
// fp32, 8 for fp16/bf16) and widens a chunk only when adding it, so a 2-byte table has twice the
// loads in flight in the same registers (the same bytes in flight per warp as fp32) and its
// conversion is the one of its type (bf16: a shift), not a choice between all of them per value.
#include <algorithm>

#include "gpu/common/device_buffer.h"
#include "gpu/embedding/launch.h"
#include "gpu/embedding/tbe_row_ops.h"

namespace gemtb::gpu::embedding {
namespace {

constexpr int kWarpsPerBlock = 8;
// Loads in flight per lane: 128 bytes of raw chunks per lane whatever the storage type.
template <ElementType kDtype>
inline constexpr int kLoadsInFlight = kDtype == ElementType::kFloat32 ? 8 : 16;
constexpr unsigned kFullMask = 0xFFFFFFFFu;

__device__ void GatherSequence(const LaunchParams& p, const FeatureParams& fp, const TableParams& t, int64_t begin,
                               int64_t end, int lane) {
  for (int64_t v = begin; v < end; ++v) {
    const int64_t row = ResolveRow(t, p.kjt.values[v]);
    for (int64_t c = lane * kChunk; c < t.dim; c += 32 * kChunk) {
      float e[kChunk] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (row >= 0) LoadChunk(t, row, c, e);
      *reinterpret_cast<float4*>(fp.sequence + (v - fp.value_begin) * t.dim + c) = make_float4(e[0], e[1], e[2], e[3]);
    }
  }
}

template <ElementType kDtype>
__device__ void PoolBag(const LaunchParams& p, const FeatureParams& fp, const TableParams& t, int64_t b,
                        int64_t begin, int64_t end, int lane) {
  constexpr int kLoads = kLoadsInFlight<kDtype>;
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
          const int64_t row = __shfl_sync(kFullMask, my_row, (k0 + u) & 31);
          if (k0 + u < count && row >= 0) {
            valid |= 1u << u;
            if (active) raw[u] = LoadStoredChunk<kDtype>(t, row, c);
          }
        }
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
          const float weight = __shfl_sync(kFullMask, my_weight, (k0 + u) & 31);
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

__global__ void __launch_bounds__(kWarpsPerBlock * 32) ForwardKernel(const LaunchParams p) {
  const int64_t bag = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (bag >= p.kjt.num_keys * p.kjt.batch) return;  // whole warps leave together
  const int lane = static_cast<int>(threadIdx.x % 32);
  const FeatureParams fp = p.features[bag / p.kjt.batch];
  const TableParams t = p.tables[fp.table];
  const int64_t begin = p.kjt.offsets[bag], end = p.kjt.offsets[bag + 1];
  if (fp.pooling == Pooling::kNone) {
    GatherSequence(p, fp, t, begin, end, lane);
  } else {
    switch (t.dtype) {
      case ElementType::kFloat32: PoolBag<ElementType::kFloat32>(p, fp, t, bag % p.kjt.batch, begin, end, lane); break;
      case ElementType::kBFloat16: PoolBag<ElementType::kBFloat16>(p, fp, t, bag % p.kjt.batch, begin, end, lane); break;
      default: PoolBag<ElementType::kFloat16>(p, fp, t, bag % p.kjt.batch, begin, end, lane); break;
    }
  }
}

}  // namespace

absl::Status LaunchForward(const LaunchParams& p) {
  const int64_t bags = p.kjt.num_keys * p.kjt.batch;
  if (bags == 0) return absl::OkStatus();
  const int64_t blocks = (bags + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > 0x7FFFFFFF) return absl::InvalidArgumentError(absl::StrCat("F*B=", bags, " bags: too many for one launch"));
  ForwardKernel<<<static_cast<unsigned>(blocks), kWarpsPerBlock * 32>>>(p);
  return CudaOk(cudaGetLastError(), "launch of the embedding forward kernel");
}

}  // namespace gemtb::gpu::embedding
