// The fused-dQ Hopper backward for broadcast_q with at most 32 query rows (PMA's seeds; sm_90a, head dim 128):
// one chained kernel computes dK, dV and this chain's part of dQ, and a small kernel sums the parts.
//
// Why: under broadcast_q every sequence's K/V rows read the same 32 seed rows, so dQ of a head is a
// sum over every K/V tile of the launch. The chained recompute backward (backward_hopper_dkdv_chain.cuh)
// computes dK/dV, then a dQ pass (backward_hopper_dq_chain.cuh) reads all of K and V a second time to
// recompute S and dP (PMA: ~0.4 of its ~1.4 ms backward). Here the dK/dV chain already holds dSᵀ for each step, and K is
// in shared memory: dQᵀ += Kᵀ dSᵀ is two more small MMAs per step, accumulated in registers over the
// whole chain. Storing dS to global memory instead was slower (tools/bench/NOTES.md).
//
// The step runs at N = 32 query rows instead of the chained kernel's 64 (the seed count fits): Sᵀ and
// dPᵀ are m64n32, Pᵀ and dSᵀ have two k16 fragments, dV += Pᵀ dO and dK += dSᵀ Q two k-steps, with no
// 32 rows of padding in each. That frees the 32 registers the dQᵀ accumulator takes (2 x m64n32: the
// head dim is M, the seeds N). dSᵀ goes to shared memory (4 KB, one stmatrix.trans per fragment) as
// the dQ MMA's K-major B operand; K is read as the MN-major A operand in place.
//
// Determinism: a chain's tiles, steps and MMAs are fixed by the host's tile list and the chain
// length; each chain writes its fp32 dQᵀ to its own slot; the reduce adds the slots of a head in
// chain order (eight interleaved partial sums, then those in order). No atomics: the same bytes every
// run.
//
// Shared memory: the chained kernel's three slots of two 64-row tiles (96 KB) and the 4 KB dSᵀ tile; two CTAs per SM.
#ifndef GEMTB_GPU_ATTENTION_BACKWARD_HOPPER_FUSED_DQ_CUH_
#define GEMTB_GPU_ATTENTION_BACKWARD_HOPPER_FUSED_DQ_CUH_

#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "absl/status/status.h"
#include "gpu/attention/backward_fused_dq_plan.h"
#include "gpu/attention/backward_hopper_chain_launch.cuh"
#include "gpu/attention/backward_hopper_dkdv_chain.cuh"
#include "gpu/attention/backward_hopper_kernel.cuh"
#include "gpu/common/cuda_check.cuh"
#include "model/common/status_macros.h"

namespace gemtb::gpu {

static_assert(kFusedDqHeadDim == kHopperHeadDim, "the plan's head dim");
inline constexpr uint32_t kFusedDsTileBytes = kFusedDqRows * 64 * 2;
inline constexpr size_t kHopperFusedSmemBytes = kHopperDkDvSmemBytes + kFusedDsTileBytes;
// The reduce: 32 consecutive outputs per warp, kFusedReduceLanes warps per CTA over the chains.
inline constexpr int kFusedReduceLanes = 8;

// Sᵀ (or dPᵀ) = A Bᵀ for the 32 rows of B: A a 64-row K-major tile (K or V), B's rows 0..31 (Q or dO)
// of a tile whose 64-column blocks lie b_block_bytes apart (a 64-row tile's 8 KB by default; the
// small forward's 32-row Q tile: 4 KB).
template <ElementType E>
__device__ __forceinline__ void FusedIssueAbT(float (&c)[16], uint32_t a_tile, uint32_t b_tile,
                                              uint32_t b_block_bytes = 64 * 128) {
  const uint64_t da = wgmma::SwizzledDescriptor(a_tile, 16, 1024);
  const uint64_t db = wgmma::SwizzledDescriptor(b_tile, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < kHopperHeadDim / 16; ++kk) {
    const uint64_t off_a = static_cast<uint64_t>(((kk >> 2) * 64 * 128 + (kk & 3) * 32) >> 4);
    const uint64_t off_b = static_cast<uint64_t>(((kk >> 2) * b_block_bytes + (kk & 3) * 32) >> 4);
    wgmma::MmaSS32<E, false>(c, da + off_a, db + off_b, kk > 0 ? 1u : 0u);
  }
}

// C (64x128) += A (64x32 in registers, two fragments) * B (rows 0..31 of a 64-row MN-major tile).
template <ElementType E>
__device__ __forceinline__ void FusedIssueAB(float (&c)[64], const uint32_t (&a)[2][4], uint32_t b_tile) {
  const uint64_t db = wgmma::SwizzledDescriptor(b_tile, 64 * 128, 1024);
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) wgmma::MmaRS<E>(c, a[kk], db + static_cast<uint64_t>((kk * 16 * 128) >> 4), 1u);
}

// dSᵀ (keys x 32 query rows, register A fragments) to the 32 x 64 K-major swizzled tile at sds
// (row = query row, 64 keys = 128 bytes): fragment kc's four 8x8 blocks are (keys 16w + 8(i&1),
// query rows 16kc + 8(i>>1)); stored transposed, lane 8i+j writes query row 16kc + 8(i>>1) + j.
__device__ __forceinline__ void FusedStoreDsT(const uint32_t (&dsa)[2][4], uint32_t sds) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int w = static_cast<int>(threadIdx.x) / 32;
  const int i = lane >> 3, j = lane & 7;
  const int chunk = 2 * w + (i & 1);
#pragma unroll
  for (int kc = 0; kc < 2; ++kc) {
    const int q = 16 * kc + 8 * (i >> 1) + j;
    const uint32_t addr = sds + static_cast<uint32_t>(q * 128 + ((chunk ^ (q & 7)) << 4));
    wgmma::StMatrixX4Trans(addr, dsa[kc][0], dsa[kc][1], dsa[kc][2], dsa[kc][3]);
  }
}

// dQᵀ (head dim x 32 seeds; two m64 halves) += Kᵀ dSᵀ over the step's 64 keys: A = the K tile read
// MN-major (rows are keys), B = the dSᵀ tile (K-major).
template <ElementType E>
__device__ __forceinline__ void FusedIssueDq(float (&dqt)[2][16], uint32_t sk, uint32_t sds) {
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    const uint64_t da = wgmma::SwizzledDescriptor(sk + static_cast<uint32_t>(m * 64 * 128), 64 * 128, 1024);
    const uint64_t db = wgmma::SwizzledDescriptor(sds, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      wgmma::MmaSS32<E, true>(dqt[m], da + static_cast<uint64_t>((kk * 16 * 128) >> 4),
                              db + static_cast<uint64_t>((kk * 32) >> 4), 1u);
    }
  }
}

// Chain c of K/V head h (the grid as DkDvHopperChainKernel's, tiles_per_cta from FusedDqChainTiles); writes its dQᵀ part to slot
// c * heads + h of p.dq_partial ([slot][head dim][seed], fp32, not yet times pre_scale).
// Requires heads == kv_heads and every step's query rows <= 32 (kernel_policy.h).
template <ElementType E, HopperAct kAct>
__global__ void __launch_bounds__(kHopperBwdThreads, 2)
    DkDvDqFusedKernel(const BackwardParams p, int tiles_per_cta, int num_tiles, int head_minor) {
  constexpr int D = kHopperHeadDim;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  __shared__ RowKeyRange s_keys[3][64];
  __shared__ float s_lse[3][64];
  __shared__ float s_d[3][64];
  const uint32_t base = (wgmma::SmemAddress(smem_raw) + 1023u) & ~1023u;
  const auto slot_at = [&](int s) { return base + static_cast<uint32_t>(s) * 2u * kHopperBwdTileBytes; };
  const uint32_t sds = base + 6u * kHopperBwdTileBytes;

  const ProblemParams& pr = p.problem;
  const int h = head_minor != 0 ? static_cast<int>(blockIdx.x) % pr.kv_heads : static_cast<int>(blockIdx.y);
  const int chain = head_minor != 0 ? static_cast<int>(blockIdx.x) / pr.kv_heads : static_cast<int>(blockIdx.x);
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const LaneCoords ln = Lane();
  const int64_t q_stride = static_cast<int64_t>(pr.heads) * D;
  const int64_t kv_stride = static_cast<int64_t>(pr.kv_heads) * D;
  constexpr bool softmax = kAct == HopperAct::kSoftmax;
  const float scale_log2 = pr.pre_scale * kHopperBwdLog2e;
  const int t_begin = chain * tiles_per_cta;
  const int t_end = min(num_tiles, t_begin + tiles_per_cta);

  // A step: tile t, its segment sgi (one step each: at most 32 rows).
  struct Cursor {
    int t, sgi;
  };
  const auto segment = [&](const DkvTile& tile, int sgi) { return p.dkv_segments[tile.seg_begin + sgi]; };
  const auto advance = [&](Cursor c, const DkvTile& tile) {
    if (++c.sgi < tile.seg_count) return c;
    return Cursor{c.t + 1, 0};
  };
  struct Rows {
    int b, q0, nq;
  };
  // Always every seed row from row 0, whatever rows the segment names (a mask can start it past
  // row 0): tile row r must be seed row r, since dQᵀ's column r adds up over every step of the chain.
  // Rows without a key in the tile are masked to zero like the keys past a sequence's end.
  const auto rows_of = [&](const Cursor& c, const DkvTile& tile) {
    const int b = segment(tile, c.sgi).b;
    return Rows{b, 0, pr.seqs[b].lq};
  };
  const auto load_kv = [&](const DkvTile& tile, int slot) {
    const int k_rows = min(64, tile.lk - tile.j0);
    const int64_t kv_offset = (tile.kv_begin + tile.j0) * kv_stride + h * D;
    HopperBwdLoad(slot_at(slot), pr.k + kv_offset, kv_stride, k_rows, pr.k);
    HopperBwdLoad(slot_at(slot) + kHopperBwdTileBytes, pr.v + kv_offset, kv_stride, k_rows, pr.v);
  };
  const auto load_rows = [&](const Rows& r, int slot) {
    const SeqInfo seq = pr.seqs[r.b];
    HopperBwdLoad(slot_at(slot), pr.q + (seq.q_begin + r.q0) * q_stride + h * D, q_stride, r.nq, pr.q);
    HopperBwdLoad(slot_at(slot) + kHopperBwdTileBytes, p.d_o + (seq.out_begin + r.q0) * q_stride + h * D, q_stride,
                  r.nq, p.d_o);
    if (tid < 64) {
      const bool row_ok = tid < r.nq;
      s_keys[slot][tid] = row_ok ? RowKeys(pr.options, r.q0 + tid, seq.lq, seq.lk) : RowKeyRange{0, 0};
      const int64_t at = h * pr.out_rows + seq.out_begin + r.q0 + tid;
      s_lse[slot][tid] = softmax && row_ok ? p.lse[at] * kHopperBwdLog2e : 0.f;
      s_d[slot][tid] = softmax && row_ok ? p.d_rows[at] : 0.f;
    }
  };
  struct Plan {
    Cursor next;
    bool reuse_rows;
  };
  const auto plan_after = [&](const Cursor& c) {
    const DkvTile tile = p.dkv_tiles[c.t];
    Plan plan{advance(c, tile), false};
    if (plan.next.t < t_end && plan.next.t != c.t) {
      const Rows a = rows_of(c, tile), b = rows_of(plan.next, p.dkv_tiles[plan.next.t]);
      plan.reuse_rows = a.b == b.b && a.q0 == b.q0 && a.nq == b.nq;
    }
    return plan;
  };

  if (t_begin >= t_end) return;
  // The host's lists give every tile at least one segment (a K/V tile nobody reads is not listed).
  int kv_slot = 0, q_slot = 1, free_slot = 2;
  Cursor cur{t_begin, 0};
  {
    const DkvTile tile = p.dkv_tiles[t_begin];
    load_kv(tile, kv_slot);
    load_rows(rows_of(cur, tile), q_slot);
  }
  CopyAsyncCommit();

  float dk[64], dv[64], dqt[2][16];
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    dk[i] = 0.f;
    dv[i] = 0.f;
  }
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    dqt[0][i] = 0.f;
    dqt[1][i] = 0.f;
  }
  while (cur.t < t_end) {
    const DkvTile tile = p.dkv_tiles[cur.t];
    const int k_rows = min(64, tile.lk - tile.j0);
    const int key[2] = {tile.j0 + warp * 16 + ln.g, tile.j0 + warp * 16 + ln.g + 8};
    CopyAsyncWait<0>();
    wgmma::FenceProxyAsync();
    // Full: every pair of the 64 keys x 32 rows is valid (rows past the seeds have no keys, so
    // fewer than 32 seeds always test each pair, as do rows the mask keeps from these keys). The
    // barrier also frees the free slot and the dSᵀ tile (every warp's last dQ MMA is waited for).
    int vote = 1;
    if (tid < kFusedDqRows) {
      const RowKeyRange keys = s_keys[q_slot][tid];
      vote = k_rows == 64 && keys.begin <= tile.j0 && keys.end >= tile.j0 + 64 ? 1 : 0;
    }
    const bool full = __syncthreads_and(vote) != 0;

    const uint32_t sk = slot_at(kv_slot), sv = sk + kHopperBwdTileBytes;
    const uint32_t sq = slot_at(q_slot), s_do = sq + kHopperBwdTileBytes;
    float st[16], dpt[16];
    wgmma::Fence();
    FusedIssueAbT<E>(st, sk, sq);
    wgmma::Commit();
    FusedIssueAbT<E>(dpt, sv, s_do);
    wgmma::Commit();
    {
      const Plan plan = plan_after(cur);
      if (plan.next.t < t_end) {
        if (plan.next.t != cur.t) {
          load_kv(p.dkv_tiles[plan.next.t], free_slot);
        } else {
          load_rows(rows_of(plan.next, tile), free_slot);
        }
      }
    }
    CopyAsyncCommit();
    float(&st4)[4][4] = *reinterpret_cast<float(*)[4][4]>(&st);
    float(&dpt4)[4][4] = *reinterpret_cast<float(*)[4][4]>(&dpt);
    uint32_t pa[2][4], dsa[2][4];
    wgmma::Wait<1>();
    wgmma::FenceRegisters(st);
    if (full) {
      HopperBwdDkDvFormP<E, kAct, false, 4>(ln, pr, st4, s_lse[q_slot], scale_log2, s_keys[q_slot], key, pa);
    } else {
      HopperBwdDkDvFormP<E, kAct, true, 4>(ln, pr, st4, s_lse[q_slot], scale_log2, s_keys[q_slot], key, pa);
    }
    wgmma::Wait<0>();
    wgmma::FenceRegisters(dpt);
    float ds4[4];
    HopperBwdDkDvDs<E, kAct, 4>(ln, pr, st4, dpt4, s_d[q_slot], ds4, dsa);
    FusedStoreDsT(dsa, sds);
    wgmma::FenceProxyAsync();
    __syncthreads();  // every warp's dSᵀ rows are in the tile
    wgmma::Fence();
    FusedIssueAB<E>(dv, pa, s_do);
    FusedIssueAB<E>(dk, dsa, sq);
    FusedIssueDq<E>(dqt, sk, sds);
    wgmma::Commit();
    wgmma::Wait<0>();
    wgmma::FenceRegisters(dv);
    wgmma::FenceRegisters(dk);
    wgmma::FenceRegisters(dqt[0]);
    wgmma::FenceRegisters(dqt[1]);

    const Plan plan = plan_after(cur);
    const bool more = plan.next.t < t_end;
    if (plan.next.t != cur.t) {  // this tile's last step: store dK and dV, switch slots (as the chained kernel)
      const DkvTile done = p.dkv_tiles[cur.t];
      const int done_rows = min(64, done.lk - done.j0);
      __syncthreads();
      int rows_slot = q_slot;
      if (more && !plan.reuse_rows) {
        rows_slot = kv_slot;
        load_rows(rows_of(plan.next, p.dkv_tiles[plan.next.t]), rows_slot);
        CopyAsyncCommit();
      }
      const uint32_t epi = slot_at(more && plan.reuse_rows ? kv_slot : q_slot);
      StoreHopperBwdRows<E>(dk, pr.pre_scale, epi, done_rows, p.dk + ((done.kv_begin + done.j0) * pr.kv_heads + h) * D,
                            kv_stride);
      __syncthreads();
      StoreHopperBwdRows<E>(dv, 1.f, epi, done_rows, p.dv + ((done.kv_begin + done.j0) * pr.kv_heads + h) * D,
                            kv_stride);
#pragma unroll
      for (int i = 0; i < 64; ++i) {
        dk[i] = 0.f;
        dv[i] = 0.f;
      }
      const int old_kv = kv_slot, old_q = q_slot;
      kv_slot = free_slot;
      q_slot = rows_slot;
      free_slot = rows_slot == old_q ? old_kv : old_q;
    } else {
      const int old_q = q_slot;
      q_slot = free_slot;
      free_slot = old_q;
    }
    cur = plan.next;
  }

  // This chain's dQᵀ: thread (warp w, g, t) holds head dims m*64 + 16w + g (+8) and seeds 8n + 2t (+1).
  float* slot = p.dq_partial + (static_cast<int64_t>(chain) * pr.heads + h) * kFusedDqSlotFloats;
#pragma unroll
  for (int m = 0; m < 2; ++m) {
#pragma unroll
    for (int n = 0; n < 4; ++n) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int d = m * 64 + warp * 16 + ln.g + 8 * r;
        const int q = 8 * n + 2 * ln.t;
        *reinterpret_cast<float2*>(slot + d * kFusedDqRows + q) =
            make_float2(dqt[m][4 * n + 2 * r], dqt[m][4 * n + 2 * r + 1]);
      }
    }
  }
}

// dQ[seed q][head h][dim d] = pre_scale * (sum over chains c of slot (c, h)[d][q]), rounded once.
// One CTA per (head, head dim d): warp k sums chains k, k + 8, ... in order for the 32 seeds (lane =
// seed), then warp 0 adds the eight sums in order: the same bytes whatever the launch.
template <ElementType E>
__global__ void __launch_bounds__(32 * kFusedReduceLanes) FusedDqReduceKernel(const BackwardParams p, int chains) {
  __shared__ float part[kFusedReduceLanes][kFusedDqRows];
  const ProblemParams& pr = p.problem;
  const int h = static_cast<int>(blockIdx.y);
  const int d = static_cast<int>(blockIdx.x);
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int k = static_cast<int>(threadIdx.x) / 32;
  const int64_t chain_stride = static_cast<int64_t>(pr.heads) * kFusedDqSlotFloats;
  const float* src = p.dq_partial + h * kFusedDqSlotFloats + d * kFusedDqRows + lane;
  constexpr int kBatch = 8;
  float acc = 0.f;
  bool any = false;
  for (int c0 = k; c0 < chains; c0 += kBatch * kFusedReduceLanes) {
    float v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int c = c0 + u * kFusedReduceLanes;
      v[u] = c < chains ? src[c * chain_stride] : 0.f;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (c0 + u * kFusedReduceLanes < chains) {  // no `+ 0.f` for missing chains (keeps a -0 sum)
        acc = any ? acc + v[u] : v[u];
        any = true;
      }
    }
  }
  part[k][lane] = acc;
  __syncthreads();
  if (k != 0) return;
  float sum = part[0][lane];
  for (int i = 1; i < kFusedReduceLanes && i < chains; ++i) sum += part[i][lane];
  const int lq = pr.seqs[0].lq;
  if (lane < lq) {
    const int64_t row = pr.seqs[0].q_begin + lane;
    p.dq[(row * pr.heads + h) * kHopperHeadDim + d] = Storage<E>::FromFloat(pr.pre_scale * sum);
  }
}

template <ElementType E>
absl::Status LaunchDkDvDqFusedHopper(const BackwardParams& params, int64_t num_tiles, int tiles_per_cta) {
  if (num_tiles <= 0) return absl::OkStatus();
  if (num_tiles > INT32_MAX) return absl::InvalidArgumentError("attention backward (fused dQ): too many K/V tiles");
  const int tiles = static_cast<int>(num_tiles);
  GEMTB_RETURN_IF_ERROR(DispatchHopperActTanhApprox(params.problem.options, [&]<HopperAct A>() {
    return LaunchBwdChainKernel(DkDvDqFusedKernel<E, A>, kHopperFusedSmemBytes,
                                "attention backward dK/dV/dQ kernel (Hopper, broadcast_q)", params, tiles,
                                tiles_per_cta, params.problem.kv_heads);
  }));
  const int chains = (tiles + tiles_per_cta - 1) / tiles_per_cta;
  const dim3 grid(kHopperHeadDim, static_cast<unsigned>(params.problem.heads));
  FusedDqReduceKernel<E><<<grid, 32 * kFusedReduceLanes>>>(params, chains);
  return CudaStatus(cudaGetLastError(), "attention backward dQ reduce (Hopper, broadcast_q)");
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_BACKWARD_HOPPER_FUSED_DQ_CUH_
