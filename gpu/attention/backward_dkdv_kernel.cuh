// dK/dV kernel of the backward: one CTA per (K/V tile of kBlockN keys, K/V head); each of
// the 4 warps owns 16 keys and accumulates their dK and dV rows in registers over every reader of
// the tile, in the fixed order of the host's segment list (reader b, then the query heads of the
// GQA group, then query rows), so the result is deterministic without atomics.
//
// Per step of kBwdBlockM query rows, in the transposed orientation (keys are the mma rows):
//   Sᵀ = K Qᵀ,  dPᵀ = V dOᵀ,  (P, dS) per pair,  dV += Pᵀ dO,  dK += dSᵀ Q;  at the end dK *= pre.
#ifndef GEMTB_GPU_ATTENTION_BACKWARD_DKDV_KERNEL_CUH_
#define GEMTB_GPU_ATTENTION_BACKWARD_DKDV_KERNEL_CUH_

#include "gpu/attention/backward_pair.cuh"
#include "gpu/attention/mask.cuh"
#include "gpu/attention/params.h"
#include "gpu/common/mma.cuh"
#include "gpu/common/tile_io.cuh"

namespace gemtb::gpu {

template <int D>
struct DkDvSmem {
  static_assert(IsKernelHeadDim(D), "the mma.sync kernels are built for head dims 16, 32, 64 and 128");
  static constexpr int kLd = D + 8;
  static constexpr size_t kTileBytes =
      sizeof(uint16_t) * static_cast<size_t>(kLd) * (2 * kBlockN + 2 * kBwdBlockM);
  // Then per query row of the step: its key range, LSE and D_i.
  static constexpr size_t kBytes =
      kTileBytes + kBwdBlockM * (sizeof(RowKeyRange) + 2 * sizeof(float));
};

template <ElementType E, int D>
__global__ void __launch_bounds__(kThreads) DkDvKernel(const BackwardParams p) {
  constexpr int kLd = DkDvSmem<D>::kLd;
  constexpr int kQTiles = kBwdBlockM / 8;
  constexpr int kDTiles = D / 8;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* sk = smem;
  uint16_t* sv = sk + kBlockN * kLd;
  uint16_t* sq = sv + kBlockN * kLd;
  uint16_t* s_do = sq + kBwdBlockM * kLd;
  auto* s_keys = reinterpret_cast<RowKeyRange*>(s_do + kBwdBlockM * kLd);
  auto* s_lse = reinterpret_cast<float*>(s_keys + kBwdBlockM);
  float* s_d = s_lse + kBwdBlockM;

  const ProblemParams& pr = p.problem;
  const DkvTile tile = p.dkv_tiles[blockIdx.x];
  const int hk = static_cast<int>(blockIdx.y);
  const int group = pr.heads / pr.kv_heads;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const LaneCoords ln = Lane();
  const int64_t q_stride = static_cast<int64_t>(pr.heads) * D;
  const int64_t kv_stride = static_cast<int64_t>(pr.kv_heads) * D;
  const bool softmax = pr.options.act == Activation::kSoftmax;

  const int k_rows = min(kBlockN, tile.lk - tile.j0);
  const int64_t kv_offset = (tile.kv_begin + tile.j0) * kv_stride + hk * D;
  LoadRowsZeroFill<kBlockN, D, kThreads>(sk, kLd, pr.k + kv_offset, kv_stride, k_rows);
  LoadRowsZeroFill<kBlockN, D, kThreads>(sv, kLd, pr.v + kv_offset, kv_stride, k_rows);
  const int key[2] = {warp * 16 + ln.g, warp * 16 + ln.g + 8};  // tile-local keys of c0/c1, c2/c3

  float dk[kDTiles][4] = {};
  float dv[kDTiles][4] = {};
  for (int sgi = 0; sgi < tile.seg_count; ++sgi) {
    const DkvSegment seg = p.dkv_segments[tile.seg_begin + sgi];
    const SeqInfo seq = pr.seqs[seg.b];
    for (int h = hk * group; h < (hk + 1) * group; ++h) {
      for (int q0 = seg.i0; q0 < seg.i1; q0 += kBwdBlockM) {
        const int nq = min(kBwdBlockM, seg.i1 - q0);
        __syncthreads();  // the previous step's reads of the Q/dO tiles are done
        LoadRowsZeroFill<kBwdBlockM, D, kThreads>(
            sq, kLd, pr.q + (seq.q_begin + q0) * q_stride + h * D, q_stride, nq);
        LoadRowsZeroFill<kBwdBlockM, D, kThreads>(
            s_do, kLd, p.d_o + (seq.out_begin + q0) * q_stride + h * D, q_stride, nq);
        if (threadIdx.x < kBwdBlockM) {
          const int r = static_cast<int>(threadIdx.x);
          const bool row_ok = r < nq;
          s_keys[r] = row_ok ? RowKeys(pr.options, q0 + r, seq.lq, seq.lk) : RowKeyRange{0, 0};
          const int64_t at = h * pr.out_rows + seq.out_begin + q0 + r;
          s_lse[r] = softmax && row_ok ? p.lse[at] : 0.f;
          s_d[r] = softmax && row_ok ? p.d_rows[at] : 0.f;
        }
        __syncthreads();

        float st[kQTiles][4] = {};
        float dpt[kQTiles][4] = {};
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
          uint32_t a_k[4], a_v[4];
          LoadA(sk, kLd, warp * 16, kk * 16, a_k);
          LoadA(sv, kLd, warp * 16, kk * 16, a_v);
#pragma unroll
          for (int n = 0; n < kQTiles; ++n) {
            uint32_t b[2];
            LoadBFromRows(sq, kLd, n * 8, kk * 16, b);
            Mma16816<E>(st[n], a_k, b);
            LoadBFromRows(s_do, kLd, n * 8, kk * 16, b);
            Mma16816<E>(dpt[n], a_v, b);
          }
        }
#pragma unroll
        for (int n = 0; n < kQTiles; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int c = n * 8 + 2 * ln.t + (e & 1);  // query row within the step
            const int j = tile.j0 + key[e >> 1];
            const PairGradient g =
                BackwardPair(pr, Contains(s_keys[c], j), st[n][e], dpt[n][e], s_lse[c], s_d[c]);
            st[n][e] = g.p;
            dpt[n][e] = g.ds;
          }
        }
#pragma unroll
        for (int kk = 0; kk < kBwdBlockM / 16; ++kk) {
          uint32_t a_p[4], a_ds[4];
          CToA<E>(st[2 * kk], st[2 * kk + 1], a_p);
          CToA<E>(dpt[2 * kk], dpt[2 * kk + 1], a_ds);
#pragma unroll
          for (int nd = 0; nd < kDTiles; ++nd) {
            uint32_t b[2];
            LoadBFromCols(s_do, kLd, kk * 16, nd * 8, b);
            Mma16816<E>(dv[nd], a_p, b);
            LoadBFromCols(sq, kLd, kk * 16, nd * 8, b);
            Mma16816<E>(dk[nd], a_ds, b);
          }
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (key[r] >= k_rows) continue;
    const int64_t at = ((tile.kv_begin + tile.j0 + key[r]) * pr.kv_heads + hk) * D + 2 * ln.t;
#pragma unroll
    for (int nd = 0; nd < kDTiles; ++nd) {
      *reinterpret_cast<uint32_t*>(p.dk + at + nd * 8) =
          PackRounded<E>(pr.pre_scale * dk[nd][2 * r], pr.pre_scale * dk[nd][2 * r + 1]);
      *reinterpret_cast<uint32_t*>(p.dv + at + nd * 8) = PackRounded<E>(dv[nd][2 * r], dv[nd][2 * r + 1]);
    }
  }
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_BACKWARD_DKDV_KERNEL_CUH_
