// Hopper forward kernel (sm_90a, head dim 128): the same function as forward_kernel.cuh (spec §3,
// casts of §7), on warpgroup MMAs.
//
//   CTA = 2 warpgroups x 64 query rows (a 128-row tile of the host list), K/V in steps of 128 keys.
//   Q, K, V tiles in shared memory in the 128-byte swizzled layout (gpu/common/wgmma.cuh), loaded
//   with cp.async (zero-filled past the tile's rows) two K/V stages deep: step s+1 loads while
//   step s computes.
//   S = Q Kᵀ: 8 wgmma m64n128k16, both operands from shared memory (K-major).
//   P = act(S) (or the online-softmax exp) in registers, rounded to the input type, and used as the
//   register A operand of O += P V: 8 wgmma m64n128k16 with V MN-major (transposed) from shared
//   memory. No shared-memory round trip for P.
//   Masks: a step whose keys lie inside every row's valid range (the intersection, computed once per
//   CTA) runs without any per-element test; only boundary steps test each (row, key) pair.
//   Grid: one CTA per (tile, head), tile-major, so the host's heavy-first order holds across heads.
#ifndef GEMTB_GPU_ATTENTION_FORWARD_HOPPER_KERNEL_CUH_
#define GEMTB_GPU_ATTENTION_FORWARD_HOPPER_KERNEL_CUH_

#include <climits>

#include "gpu/attention/activation.cuh"
#include "gpu/attention/mask.cuh"
#include "gpu/attention/params.h"
#include "gpu/attention/softmax.cuh"
#include "gpu/common/mma.cuh"
#include "gpu/common/wgmma.cuh"

namespace gemtb::gpu {

struct HopperForwardSmem {
  static constexpr uint32_t kQBytes = kHopperBlockM * kHopperHeadDim * 2;
  static constexpr uint32_t kKvBytes = kHopperBlockN * kHopperHeadDim * 2;
  static constexpr int kStages = 2;
  // 1024 bytes of slack to align the tiles to the swizzle pattern's 1024-byte period.
  static constexpr size_t kBytes = 1024 + kQBytes + kStages * 2 * kKvBytes;
};

// silu on the fast paths of the special-function unit: x / (1 + e^-x) with __expf and __fdividef
// (a few fp32 ulps from ActValue's exact-division form; P is then rounded to 16 bits). For x below
// about -87, e^-x exceeds 2^126 and the quotient is 0 (the exact value is below 1e-36).
__device__ __forceinline__ float FastSilu(float x) { return __fdividef(x, 1.f + __expf(-x)); }

// Rows [0, valid_rows) of a [tile_rows, 128] tile from global memory (rows src_stride elements
// apart) into the swizzled tile at shared address `dst`, zero-filling the rest (`any_valid` is a
// readable address for the zero-filled copies, which read nothing).
__device__ __forceinline__ void HopperLoadRows(uint32_t dst, int tile_rows, const uint16_t* src,
                                               int64_t src_stride, int valid_rows, const uint16_t* any_valid) {
  constexpr int kChunks = kHopperHeadDim / 8;  // 16-byte chunks per row
  for (int idx = static_cast<int>(threadIdx.x); idx < tile_rows * kChunks; idx += kHopperThreads) {
    const int r = idx / kChunks;
    const int c = idx % kChunks;
    const bool ok = r < valid_rows;
    wgmma::CpAsync16(dst + wgmma::SwizzledOffset(tile_rows, r, c * 8), ok ? src + r * src_stride + c * 8 : any_valid,
                     ok ? 16u : 0u);
  }
}

template <ElementType E>
__global__ void __launch_bounds__(kHopperThreads, 1) ForwardHopperKernel(const ForwardParams p) {
  constexpr int D = kHopperHeadDim;
  constexpr int BM = kHopperBlockM;
  constexpr int BN = kHopperBlockN;
  using Smem = HopperForwardSmem;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  __shared__ int s_full_lo, s_full_hi;
  const uint32_t raw = wgmma::SmemAddress(smem_raw);
  const uint32_t sq = (raw + 1023u) & ~1023u;
  const auto sk = [&](int stage) { return sq + Smem::kQBytes + static_cast<uint32_t>(stage) * 2u * Smem::kKvBytes; };
  const auto sv = [&](int stage) { return sk(stage) + Smem::kKvBytes; };

  const ProblemParams& pr = p.problem;
  const int tile_index = static_cast<int>(blockIdx.x) / pr.heads;
  const int h = static_cast<int>(blockIdx.x) % pr.heads;
  const int hk = h / (pr.heads / pr.kv_heads);
  const ForwardTile tile = p.tiles[tile_index];
  const SeqInfo seq = pr.seqs[tile.b];
  const int tid = static_cast<int>(threadIdx.x);
  const int wg = tid / 128;
  const int warp = (tid / 32) % 4;
  const LaneCoords ln = Lane();
  const int64_t q_stride = static_cast<int64_t>(pr.heads) * D;
  const int64_t kv_stride = static_cast<int64_t>(pr.kv_heads) * D;
  const bool softmax = pr.options.act == Activation::kSoftmax;
  const bool silu = pr.options.act == Activation::kSilu;

  const int q_rows = min(BM, seq.lq - tile.i0);
  HopperLoadRows(sq, BM, pr.q + (seq.q_begin + tile.i0) * q_stride + h * D, q_stride, q_rows, pr.q);
  const auto load_kv = [&](int stage, int j0) {
    const int64_t offset = (seq.kv_begin + j0) * kv_stride + hk * D;
    const int rows = min(BN, tile.k_hi - j0);
    HopperLoadRows(sk(stage), BN, pr.k + offset, kv_stride, rows, pr.k);
    HopperLoadRows(sv(stage), BN, pr.v + offset, kv_stride, rows, pr.v);
  };
  load_kv(0, tile.k_lo);
  wgmma::CpAsyncCommit();

  // Rows of this thread (c0/c1 and c2/c3 of every accumulator tile) and their key ranges; the
  // intersection of the valid rows' ranges is where no step needs a mask.
  const int row[2] = {wg * 64 + warp * 16 + ln.g, wg * 64 + warp * 16 + ln.g + 8};
  RowKeyRange keys[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) keys[r] = RowKeys(pr.options, tile.i0 + row[r], seq.lq, seq.lk);
  if (tid == 0) {
    s_full_lo = INT_MIN;
    s_full_hi = INT_MAX;
  }
  __syncthreads();
  if (ln.t == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (row[r] < q_rows) {
        atomicMax(&s_full_lo, keys[r].begin);
        atomicMin(&s_full_hi, keys[r].end);
      }
    }
  }
  __syncthreads();
  const int full_lo = s_full_lo;
  const int full_hi = s_full_hi;

  OnlineSoftmax<BN / 8> online;
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.f;
  const int steps = (tile.k_hi - tile.k_lo + BN - 1) / BN;
  for (int step = 0; step < steps; ++step) {
    const int j0 = tile.k_lo + step * BN;
    const int stage = step & 1;
    if (step + 1 < steps) {
      load_kv(stage ^ 1, j0 + BN);
      wgmma::CpAsyncCommit();
      wgmma::CpAsyncWait<1>();
    } else {
      wgmma::CpAsyncWait<0>();
    }
    wgmma::FenceProxyAsync();
    __syncthreads();

    float s[64];
    wgmma::Fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      // k-step kk: column block kk/4 of the 64-wide swizzled blocks, 32 bytes per 16 elements in it.
      const uint32_t a = sq + static_cast<uint32_t>((kk >> 2) * BM * 128 + wg * 64 * 128 + (kk & 3) * 32);
      const uint32_t b = sk(stage) + static_cast<uint32_t>((kk >> 2) * BN * 128 + (kk & 3) * 32);
      wgmma::MmaSS<E>(s, wgmma::SwizzledDescriptor(a, 16, 1024), wgmma::SwizzledDescriptor(b, 16, 1024),
                      kk > 0 ? 1u : 0u);
    }
    wgmma::Commit();
    wgmma::Wait<0>();
    wgmma::FenceRegisters(s);

    float(&s4)[BN / 8][4] = *reinterpret_cast<float(*)[BN / 8][4]>(&s);
    const bool masked = !(j0 >= full_lo && j0 + BN <= full_hi);
    if (softmax) {
#pragma unroll
      for (int n = 0; n < BN / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float x = s4[n][e] * pr.pre_scale;
          const int j = j0 + n * 8 + 2 * ln.t + (e & 1);
          s4[n][e] = (masked && !Contains(keys[e >> 1], j)) ? -INFINITY : x;
        }
      }
      float rescale[2];
      online.Step(s4, rescale);
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        acc[4 * i + 0] *= rescale[0];
        acc[4 * i + 1] *= rescale[0];
        acc[4 * i + 2] *= rescale[1];
        acc[4 * i + 3] *= rescale[1];
      }
    } else {
#pragma unroll
      for (int n = 0; n < BN / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float x = s4[n][e] * pr.pre_scale;
          const float y = pr.post_scale * (silu ? FastSilu(x) : ActValue(pr.options.act, x));
          const int j = j0 + n * 8 + 2 * ln.t + (e & 1);
          s4[n][e] = (masked && !Contains(keys[e >> 1], j)) ? 0.f : y;
        }
      }
    }
    uint32_t pa[BN / 16][4];
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) CToA<E>(s4[2 * kk], s4[2 * kk + 1], pa[kk]);

    wgmma::Fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint32_t b = sv(stage) + static_cast<uint32_t>(kk * 16 * 128);
      wgmma::MmaRS<E>(acc, pa[kk], wgmma::SwizzledDescriptor(b, BN * 128, 1024), 1u);
    }
    wgmma::Commit();
    wgmma::Wait<0>();
    wgmma::FenceRegisters(acc);
    __syncthreads();  // every warp is done with this stage before step+1 refills it
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
    for (int i = 0; i < D / 8; ++i) {
      float v0 = acc[4 * i + 2 * r];
      float v1 = acc[4 * i + 2 * r + 1];
      if (softmax) {
        // An empty row (no valid key) has O = 0 and LSE = -inf (spec §3).
        v0 = row_sum[r] > 0.f ? (v0 / row_sum[r]) * pr.post_scale : 0.f;
        v1 = row_sum[r] > 0.f ? (v1 / row_sum[r]) * pr.post_scale : 0.f;
      }
      *reinterpret_cast<uint32_t*>(o + i * 8) = PackRounded<E>(v0, v1);
    }
    if (softmax && ln.t == 0) p.lse[h * pr.out_rows + out_row] = lse[r];
  }
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_FORWARD_HOPPER_KERNEL_CUH_
