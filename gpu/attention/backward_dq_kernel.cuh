// dQ kernel of the backward, separate from dK/dV so that no gradient needs atomics: one CTA per
// (query tile of kBlockM rows, query head) owns its dQ rows and sums, in increasing b, every reader
// of them (one output sequence, or all under broadcast_q):
//   S = Q Kᵀ,  dP = dO Vᵀ,  (P, dS) per pair,  dQ += dS K;  at the end dQ *= pre.
// A part of a split tile (tile.partial >= 0) writes its fp32 sum instead; DqReduceKernel adds the
// parts in slot order, scales and rounds.
#ifndef GEMTB_GPU_ATTENTION_BACKWARD_DQ_KERNEL_CUH_
#define GEMTB_GPU_ATTENTION_BACKWARD_DQ_KERNEL_CUH_

#include "gpu/attention/backward_pair.cuh"
#include "gpu/attention/mask.cuh"
#include "gpu/attention/params.h"
#include "gpu/common/mma.cuh"
#include "gpu/common/tile_io.cuh"

namespace gemtb::gpu {

template <int D>
struct DqSmem {
  static_assert(IsKernelHeadDim(D), "the mma.sync kernels are built for head dims 16, 32, 64 and 128");
  static constexpr int kLd = D + 8;
  static constexpr size_t kBytes = sizeof(uint16_t) * static_cast<size_t>(kLd) * (2 * kBlockM + 2 * kBlockN);
};

template <ElementType E, int D>
__global__ void __launch_bounds__(kThreads) DqKernel(const BackwardParams p) {
  constexpr int kLd = DqSmem<D>::kLd;
  constexpr int kColTiles = kBlockN / 8;
  constexpr int kDTiles = D / 8;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* sq = smem;
  uint16_t* s_do = sq + kBlockM * kLd;
  uint16_t* sk = s_do + kBlockM * kLd;
  uint16_t* sv = sk + kBlockN * kLd;

  const ProblemParams& pr = p.problem;
  const DqTile tile = p.dq_tiles[blockIdx.x];
  const int h = static_cast<int>(blockIdx.y);
  const int hk = h / (pr.heads / pr.kv_heads);
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const LaneCoords ln = Lane();
  const int64_t q_stride = static_cast<int64_t>(pr.heads) * D;
  const int64_t kv_stride = static_cast<int64_t>(pr.kv_heads) * D;
  const bool softmax = pr.options.act == Activation::kSoftmax;

  // Every reader reads the same query rows: take them from the first.
  const SeqInfo first = pr.seqs[p.dq_readers[tile.reader_begin].b];
  const int q_rows = min(kBlockM, first.lq - tile.i0);
  LoadRowsZeroFill<kBlockM, D, kThreads>(sq, kLd, pr.q + (first.q_begin + tile.i0) * q_stride + h * D,
                                         q_stride, q_rows);
  const int row[2] = {warp * 16 + ln.g, warp * 16 + ln.g + 8};

  float dq[kDTiles][4] = {};
  for (int ri = 0; ri < tile.reader_count; ++ri) {
    const DqReader reader = p.dq_readers[tile.reader_begin + ri];
    const SeqInfo seq = pr.seqs[reader.b];
    __syncthreads();  // the previous reader's reads of dO are done
    LoadRowsZeroFill<kBlockM, D, kThreads>(
        s_do, kLd, p.d_o + (seq.out_begin + tile.i0) * q_stride + h * D, q_stride, q_rows);
    RowKeyRange keys[2];
    float lse[2] = {0.f, 0.f};
    float d_i[2] = {0.f, 0.f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      keys[r] = RowKeys(pr.options, tile.i0 + row[r], seq.lq, seq.lk);
      if (softmax && row[r] < q_rows) {
        const int64_t at = h * pr.out_rows + seq.out_begin + tile.i0 + row[r];
        lse[r] = p.lse[at];
        d_i[r] = p.d_rows[at];
      }
    }
    for (int j0 = reader.k_lo; j0 < reader.k_hi; j0 += kBlockN) {
      __syncthreads();  // the previous step's reads of K and V are done
      const int64_t kv_offset = (seq.kv_begin + j0) * kv_stride + hk * D;
      const int k_rows = min(kBlockN, reader.k_hi - j0);
      LoadRowsZeroFill<kBlockN, D, kThreads>(sk, kLd, pr.k + kv_offset, kv_stride, k_rows);
      LoadRowsZeroFill<kBlockN, D, kThreads>(sv, kLd, pr.v + kv_offset, kv_stride, k_rows);
      __syncthreads();

      float s[kColTiles][4] = {};
      float dp[kColTiles][4] = {};
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t a_q[4], a_do[4];
        LoadA(sq, kLd, warp * 16, kk * 16, a_q);
        LoadA(s_do, kLd, warp * 16, kk * 16, a_do);
#pragma unroll
        for (int n = 0; n < kColTiles; ++n) {
          uint32_t b[2];
          LoadBFromRows(sk, kLd, n * 8, kk * 16, b);
          Mma16816<E>(s[n], a_q, b);
          LoadBFromRows(sv, kLd, n * 8, kk * 16, b);
          Mma16816<E>(dp[n], a_do, b);
        }
      }
#pragma unroll
      for (int n = 0; n < kColTiles; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e >> 1;
          const int j = j0 + n * 8 + 2 * ln.t + (e & 1);
          s[n][e] = BackwardPair(pr, Contains(keys[r], j), s[n][e], dp[n][e], lse[r], d_i[r]).ds;
        }
      }
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        uint32_t a[4];
        CToA<E>(s[2 * kk], s[2 * kk + 1], a);
#pragma unroll
        for (int nd = 0; nd < kDTiles; ++nd) {
          uint32_t b[2];
          LoadBFromCols(sk, kLd, kk * 16, nd * 8, b);
          Mma16816<E>(dq[nd], a, b);
        }
      }
    }
  }

  if (tile.partial >= 0) {  // one part of a split tile: the fp32 sum, for DqReduceKernel
    float* part = p.dq_partial + ((static_cast<int64_t>(tile.partial) * pr.heads + h) * kBlockM) * D + 2 * ln.t;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int nd = 0; nd < kDTiles; ++nd) {
        part[row[r] * D + nd * 8] = dq[nd][2 * r];
        part[row[r] * D + nd * 8 + 1] = dq[nd][2 * r + 1];
      }
    }
    return;
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row[r] >= q_rows) continue;
    const int64_t at = ((first.q_begin + tile.i0 + row[r]) * pr.heads + h) * D + 2 * ln.t;
#pragma unroll
    for (int nd = 0; nd < kDTiles; ++nd) {
      *reinterpret_cast<uint32_t*>(p.dq + at + nd * 8) =
          PackRounded<E>(pr.pre_scale * dq[nd][2 * r], pr.pre_scale * dq[nd][2 * r + 1]);
    }
  }
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_BACKWARD_DQ_KERNEL_CUH_
