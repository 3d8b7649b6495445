// Forward kernel (the emulate mode's casts): one CTA per (forward tile, query head), 4 warps of 16 query
// rows each, K/V in steps of kBlockN keys over the tile's key range.
//
//   S = pre * Q Kᵀ (fp32 accumulate)      mask -> -inf (softmax) or P = 0 (pointwise)
//   softmax:   online max/sum, P = exp(S - m) rounded to the input type, O = acc / l * post, LSE
//   pointwise: P = post * act(S) rounded to the input type, O = acc
//   O += P V (P straight from the S registers, see gpu/common/mma.cuh)
//
// Shared memory holds Q, K and V tiles with rows padded by 8 elements (16 bytes), which puts the
// 8 row groups of a fragment load in distinct banks.
#ifndef GEMTB_GPU_ATTENTION_FORWARD_KERNEL_CUH_
#define GEMTB_GPU_ATTENTION_FORWARD_KERNEL_CUH_

#include "gpu/attention/activation.cuh"
#include "gpu/attention/mask.cuh"
#include "gpu/attention/params.h"
#include "gpu/attention/softmax.cuh"
#include "gpu/common/mma.cuh"
#include "gpu/common/tile_io.cuh"

namespace gemtb::gpu {

template <int D>
struct ForwardSmem {
  static_assert(IsKernelHeadDim(D), "the mma.sync kernels are built for head dims 16, 32, 64 and 128");
  static constexpr int kLd = D + 8;
  static constexpr size_t kBytes = sizeof(uint16_t) * static_cast<size_t>(kLd) * (kBlockM + 2 * kBlockN);
};

template <ElementType E, int D>
__global__ void __launch_bounds__(kThreads) ForwardKernel(const ForwardParams p) {
  constexpr int kLd = ForwardSmem<D>::kLd;
  constexpr int kColTiles = kBlockN / 8;
  constexpr int kDTiles = D / 8;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* sq = smem;
  uint16_t* sk = sq + kBlockM * kLd;
  uint16_t* sv = sk + kBlockN * kLd;

  const ProblemParams& pr = p.problem;
  const ForwardTile tile = p.tiles[blockIdx.x];
  const int h = static_cast<int>(blockIdx.y);
  const int hk = h / (pr.heads / pr.kv_heads);
  const SeqInfo seq = pr.seqs[tile.b];
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const LaneCoords ln = Lane();
  const int64_t q_stride = static_cast<int64_t>(pr.heads) * D;
  const int64_t kv_stride = static_cast<int64_t>(pr.kv_heads) * D;
  const bool softmax = pr.options.act == Activation::kSoftmax;

  const int q_rows = min(kBlockM, seq.lq - tile.i0);
  LoadRowsZeroFill<kBlockM, D, kThreads>(sq, kLd, pr.q + (seq.q_begin + tile.i0) * q_stride + h * D,
                                         q_stride, q_rows);
  const int row[2] = {warp * 16 + ln.g, warp * 16 + ln.g + 8};  // tile-local rows of c0/c1, c2/c3
  RowKeyRange keys[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) keys[r] = RowKeys(pr.options, tile.i0 + row[r], seq.lq, seq.lk);

  OnlineSoftmax<kColTiles> online;
  float acc[kDTiles][4] = {};
  for (int j0 = tile.k_lo; j0 < tile.k_hi; j0 += kBlockN) {
    __syncthreads();  // the previous step's reads of K and V are done
    const int64_t kv_offset = (seq.kv_begin + j0) * kv_stride + hk * D;
    const int k_rows = min(kBlockN, tile.k_hi - j0);
    LoadRowsZeroFill<kBlockN, D, kThreads>(sk, kLd, pr.k + kv_offset, kv_stride, k_rows);
    LoadRowsZeroFill<kBlockN, D, kThreads>(sv, kLd, pr.v + kv_offset, kv_stride, k_rows);
    __syncthreads();

    float s[kColTiles][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      LoadA(sq, kLd, warp * 16, kk * 16, a);
#pragma unroll
      for (int n = 0; n < kColTiles; ++n) {
        uint32_t b[2];
        LoadBFromRows(sk, kLd, n * 8, kk * 16, b);
        Mma16816<E>(s[n], a, b);
      }
    }
#pragma unroll
    for (int n = 0; n < kColTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = j0 + n * 8 + 2 * ln.t + (e & 1);
        const bool valid = Contains(keys[e >> 1], j);
        const float x = s[n][e] * pr.pre_scale;
        if (softmax) {
          s[n][e] = valid ? x : -INFINITY;
        } else {
          s[n][e] = valid ? pr.post_scale * ActValue(pr.options.act, x) : 0.f;
        }
      }
    }
    if (softmax) {
      float rescale[2];
      online.Step(s, rescale);
#pragma unroll
      for (int nd = 0; nd < kDTiles; ++nd) {
        acc[nd][0] *= rescale[0];
        acc[nd][1] *= rescale[0];
        acc[nd][2] *= rescale[1];
        acc[nd][3] *= rescale[1];
      }
    }
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      uint32_t a[4];
      CToA<E>(s[2 * kk], s[2 * kk + 1], a);
#pragma unroll
      for (int nd = 0; nd < kDTiles; ++nd) {
        uint32_t b[2];
        LoadBFromCols(sv, kLd, kk * 16, nd * 8, b);
        Mma16816<E>(acc[nd], a, b);
      }
    }
  }

  float row_sum[2] = {1.f, 1.f};
  float lse[2] = {-INFINITY, -INFINITY};
  if (softmax) online.Finish(row_sum, lse);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row[r] >= q_rows) continue;
    const int64_t out_row = seq.out_begin + tile.i0 + row[r];
    uint16_t* o = p.o + (out_row * pr.heads + h) * D + 2 * ln.t;
#pragma unroll
    for (int nd = 0; nd < kDTiles; ++nd) {
      float v0 = acc[nd][2 * r];
      float v1 = acc[nd][2 * r + 1];
      if (softmax) {
        // An empty row (no valid key) has O = 0 and LSE = -inf.
        v0 = row_sum[r] > 0.f ? (v0 / row_sum[r]) * pr.post_scale : 0.f;
        v1 = row_sum[r] > 0.f ? (v1 / row_sum[r]) * pr.post_scale : 0.f;
      }
      *reinterpret_cast<uint32_t*>(o + nd * 8) = PackRounded<E>(v0, v1);
    }
    if (softmax && ln.t == 0) p.lse[h * pr.out_rows + out_row] = lse[r];
  }
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_FORWARD_KERNEL_CUH_
