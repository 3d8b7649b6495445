// Forward v9 for launches whose tiles all have at most 32 query rows and a pointwise act (PMA's
// seeds), the default there (GEMTB_FORWARD_SMALL=0 gives the split kernel, forward_variant.h): one
// warpgroup per CTA, one CTA per (tile, head) item in the heavy-first order, about 109 KB of shared
// memory so that two CTAs share an SM. On the H200, pma's forward: 0.302 ms against the split
// kernel's 0.327 (tools/bench/NOTES.md, "Session 9").
//
// Why: under Nsight Compute Meta's Triton GDPA runs PMA's forward as 4,608 independent 128-thread
// CTAs, two per SM, at 86% of DRAM's peak; our persistent split kernel (one CTA per SM, a producer
// and two consumers meeting at every item) reaches 80% (tools/bench/NOTES.md, "Meta's pma forward
// under Nsight Compute"). Here each SM runs two independent pipelines and the hardware starts a
// new item whenever one ends.
//
// The step is backward v6's at N = 32 (backward_hopper_fused_dq.cuh), transposed: Sᵀ = K Qᵀ
// (m64n32: 64 keys x 32 seed rows, no padding rows), Pᵀ = post * act(pre * Sᵀ) rounded to the input
// type and stored to shared memory by stmatrix.trans, then Oᵀ += Vᵀ Pᵀ with V read in place as the
// MN-major A operand (two m64 halves of the head dim). 64-key steps, two or three cp.async stages
// of K and V (zero-filled past the keys; ForwardSmallStages), all 128 threads loading. The epilogue
// writes Oᵀ's elements straight to O's rows. Deterministic: a fixed order of steps and MMAs per item.
//
// v10 (ForwardSmallPersistent, forward_variant.h): the same kernel on a grid of the CTAs that fit at
// once, each looping over every grid-th item with one cp.async pipeline across its items, so that no
// item starts with an empty pipeline (v9 has one CTA per item: ~8 steps each on PMA, and each began
// by waiting out a full DRAM latency for its first tile). O is bitwise v9's. Measured slower than v9
// (0.315 against 0.308 ms on pma), so off by default.
#ifndef GEMTB_GPU_ATTENTION_FORWARD_HOPPER_SMALL_KERNEL_CUH_
#define GEMTB_GPU_ATTENTION_FORWARD_HOPPER_SMALL_KERNEL_CUH_

#include "absl/status/status.h"
#include "gpu/attention/backward_hopper_fused_dq.cuh"
#include "gpu/attention/forward_variant.h"
#include "gpu/common/cuda_check.cuh"
#include "gpu/common/sm_count.h"

namespace gemtb::gpu {

static_assert(kSmallRows == kFusedDqRows, "the small forward's step is v6's N = 32 step");
inline constexpr uint32_t kSmallQBytes = kSmallRows * kHopperHeadDim * 2;  // 32 rows, two 4 KB blocks
// Stages of 64 keys (K and V, 32 KB). Three: Pᵀ has its own 4 KB, ~109 KB per CTA, two CTAs per SM.
// Two: Pᵀ is written over the step's K tile once Sᵀ is done (one more barrier per step), ~74 KB per
// CTA, three CTAs per SM: fewer bytes in flight per CTA, more independent pipelines per SM.
constexpr bool SmallPInK(int stages) { return stages == 2; }
constexpr size_t SmallSmemBytes(int stages) {
  return 1024 + kSmallQBytes + (SmallPInK(stages) ? 0 : kFusedDsTileBytes) +
         static_cast<size_t>(stages) * 2 * kHopperBwdTileBytes;
}

// One (tile, head) item as the kernel walks it: its tile, head, sequence and 64-key steps.
struct SmallItem {
  ForwardTile tile;
  SeqInfo seq;
  int h = 0, hk = 0, steps = 0;
};
__device__ __forceinline__ SmallItem SmallItemAt(const ProblemParams& pr, const ForwardTile* tiles, int item) {
  SmallItem it;
  it.tile = tiles[item / pr.heads];
  it.h = item % pr.heads;
  it.hk = it.h / (pr.heads / pr.kv_heads);
  it.seq = pr.seqs[it.tile.b];
  it.steps = (it.tile.k_hi - it.tile.k_lo + 63) / 64;
  return it;
}

// CTA c runs items c, c + gridDim.x, ... (one each when the grid has one CTA per item: v9; fewer
// CTAs: v10). The cp.async pipeline runs over the CTA's steps of all its items in one sequence, so
// the next item's first K/V tiles load while this item's last steps compute, and its Q, when it
// differs (not with broadcast_q and a grid that is a multiple of the head count), is reloaded at the
// boundary.
template <ElementType E, HopperAct kAct, int kStages>
__global__ void __launch_bounds__(kHopperBwdThreads, SmallCtasPerSm(kStages))
    ForwardHopperSmallKernel(const ForwardParams p, const int items) {
  static_assert(kAct != HopperAct::kSoftmax, "pointwise acts only");
  static_assert(kStages == 2 || kStages == 3, "two or three stages");
  constexpr bool kPInK = SmallPInK(kStages);
  constexpr int D = kHopperHeadDim;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  __shared__ RowKeyRange s_keys[64];
  __shared__ float s_unused[64];  // HopperBwdDkDvFormP's LSE argument (pointwise acts read none)
  const uint32_t base = (wgmma::SmemAddress(smem_raw) + 1023u) & ~1023u;
  const uint32_t sq = base;
  const auto sk = [&](int stage) {
    return base + kSmallQBytes + (kPInK ? 0u : kFusedDsTileBytes) +
           static_cast<uint32_t>(stage) * 2u * kHopperBwdTileBytes;
  };
  const auto sv = [&](int stage) { return sk(stage) + kHopperBwdTileBytes; };

  const ProblemParams& pr = p.problem;
  const int stride = static_cast<int>(gridDim.x);
  int item = static_cast<int>(blockIdx.x);
  if (item >= items) return;
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const LaneCoords ln = Lane();
  const int64_t q_stride = static_cast<int64_t>(pr.heads) * D;
  const int64_t kv_stride = static_cast<int64_t>(pr.kv_heads) * D;

  // The load cursor: the item and step whose K/V the next cp.async group brings (kStages - 1 steps
  // ahead of the compute), and the stage it lands in.
  SmallItem ld = SmallItemAt(pr, p.tiles, item);
  int ld_item = item, ld_step = 0, ld_stage = 0;
  const auto load_next = [&]() {
    if (ld_item < items) {
      const int j0 = ld.tile.k_lo + ld_step * 64;
      const int64_t offset = (ld.seq.kv_begin + j0) * kv_stride + ld.hk * D;
      const int rows = min(64, ld.tile.k_hi - j0);
      HopperBwdLoad(sk(ld_stage), pr.k + offset, kv_stride, rows, pr.k);
      HopperBwdLoad(sv(ld_stage), pr.v + offset, kv_stride, rows, pr.v);
      if (++ld_step == ld.steps) {
        ld_step = 0;
        ld_item += stride;
        if (ld_item < items) ld = SmallItemAt(pr, p.tiles, ld_item);
      }
    }
    ld_stage = ld_stage + 1 == kStages ? 0 : ld_stage + 1;
    wgmma::CpAsyncCommit();  // one group per step, empty past the last item
  };
  // Q rows [i0, i0 + q_rows) of `it` into the 32-row tile, zero-filled below: by cp.async with the
  // first group, or by plain loads at an item boundary (the groups in flight are the next steps').
  const auto q_row0 = [&](const SmallItem& it) { return it.seq.q_begin + it.tile.i0; };
  const auto load_q = [&](const SmallItem& it, bool async) {
    const int q_rows = min(kSmallRows, it.seq.lq - it.tile.i0);
    for (int idx = tid; idx < kSmallRows * (D / 8); idx += kHopperBwdThreads) {
      const int r = idx / (D / 8), c = idx % (D / 8);
      const bool ok = r < q_rows;
      const uint16_t* src = ok ? pr.q + (q_row0(it) + r) * q_stride + it.h * D + c * 8 : pr.q;
      const uint32_t dst = sq + wgmma::SwizzledOffset(kSmallRows, r, c * 8);
      if (async) {
        wgmma::CpAsync16(dst, src, ok ? 16u : 0u);
      } else {
        const uint4 x = ok ? *reinterpret_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(x.x), "r"(x.y), "r"(x.z), "r"(x.w)
                     : "memory");
      }
    }
  };

  SmallItem cur = ld;
  load_q(cur, true);
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) load_next();
  int stage = 0;
  while (true) {
    const int q_rows = min(kSmallRows, cur.seq.lq - cur.tile.i0);
    if (tid < 64) {
      s_keys[tid] = tid < q_rows ? RowKeys(pr.options, cur.tile.i0 + tid, cur.seq.lq, cur.seq.lk) : RowKeyRange{0, 0};
      s_unused[tid] = 0.f;
    }
    __syncthreads();
    // Keys every one of the 32 rows sees (a step inside them with 64 keys needs no mask tests).
    int full_lo = INT_MIN, full_hi = INT_MAX;
    for (int r = 0; r < kSmallRows; ++r) {
      full_lo = max(full_lo, s_keys[r].begin);
      full_hi = min(full_hi, s_keys[r].end);
    }
    const bool all_rows = q_rows == kSmallRows;

    float ot[2][16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      ot[0][i] = 0.f;
      ot[1][i] = 0.f;
    }
    for (int step = 0; step < cur.steps; ++step) {
      wgmma::CpAsyncWait<kStages - 2>();  // this step's group (and Q with the first) has landed
      wgmma::FenceProxyAsync();
      __syncthreads();  // every thread's copies are in; every warp's MMAs of the step before are done
      load_next();
      const int j0 = cur.tile.k_lo + step * 64;
      const int k_rows = min(64, cur.tile.k_hi - j0);
      float st[16];
      wgmma::Fence();
      FusedIssueAbT<E>(st, sk(stage), sq, kSmallRows * 128);
      wgmma::Commit();
      wgmma::Wait<0>();
      wgmma::FenceRegisters(st);
      float(&st4)[4][4] = *reinterpret_cast<float(*)[4][4]>(&st);
      const int key[2] = {j0 + warp * 16 + ln.g, j0 + warp * 16 + ln.g + 8};
      uint32_t pa[2][4];
      if (all_rows && k_rows == 64 && j0 >= full_lo && j0 + 64 <= full_hi) {
        HopperBwdDkDvFormP<E, kAct, false, 4>(ln, pr, st4, s_unused, 0.f, s_keys, key, pa);
      } else {
        HopperBwdDkDvFormP<E, kAct, true, 4>(ln, pr, st4, s_unused, 0.f, s_keys, key, pa);
      }
      // Pᵀ as the K-major B operand: over the step's K tile when it has no room of its own, once every
      // warp's Sᵀ MMAs (which read that tile) are done.
      const uint32_t sp = kPInK ? sk(stage) : base + kSmallQBytes;
      if constexpr (kPInK) __syncthreads();
      FusedStoreDsT(pa, sp);
      wgmma::FenceProxyAsync();
      __syncthreads();
      wgmma::Fence();
      FusedIssueDq<E>(ot, sv(stage), sp);  // Oᵀ += Vᵀ Pᵀ
      wgmma::Commit();
      wgmma::Wait<0>();
      wgmma::FenceRegisters(ot[0]);
      wgmma::FenceRegisters(ot[1]);
      stage = stage + 1 == kStages ? 0 : stage + 1;
    }

    // Oᵀ (thread: head dims m*64 + 16w + g (+8), rows 8n + 2t (+1)) straight to O's rows: the stages
    // hold the next item's K/V, so there is no staging tile; the L2 merges the 16-byte pieces.
    uint16_t* o_item = p.o + ((cur.seq.out_begin + cur.tile.i0) * pr.heads + cur.h) * D;
#pragma unroll
    for (int m = 0; m < 2; ++m) {
#pragma unroll
      for (int n = 0; n < 4; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int d = m * 64 + warp * 16 + ln.g + 8 * (e >> 1);
          const int q = 8 * n + 2 * ln.t + (e & 1);
          if (q < q_rows) o_item[static_cast<int64_t>(q) * q_stride + d] = Storage<E>::FromFloat(ot[m][4 * n + e]);
        }
      }
    }
    item += stride;
    if (item >= items) break;
    const SmallItem next = SmallItemAt(pr, p.tiles, item);
    __syncthreads();  // every warp is past the last step's FormP (s_keys) and MMAs (Q)
    if (q_row0(next) != q_row0(cur) || next.h != cur.h) load_q(next, false);
    cur = next;
  }
  wgmma::CpAsyncWait<0>();  // no copy outlives the CTA
}

template <ElementType E, int kStages>
absl::Status LaunchForwardHopperSmallStages(const ForwardParams& params, int items) {
  return DispatchHopperActTanhApprox(params.problem.options, [&]<HopperAct A>() -> absl::Status {
    if constexpr (A == HopperAct::kSoftmax) {
      return absl::InternalError("attention forward: the small kernel has no softmax");
    } else {
      const char* name = "attention forward kernel (Hopper, small)";
      const auto kernel = ForwardHopperSmallKernel<E, A, kStages>;
      constexpr size_t smem = SmallSmemBytes(kStages);
      const auto set_attributes = [&](bool pin_carveout) -> absl::Status {
        GEMTB_RETURN_IF_ERROR(CudaStatus(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)), name));
        if (!pin_carveout) return absl::OkStatus();
        return CudaStatus(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                               static_cast<int>(cudaSharedmemCarveoutMaxShared)),
                          name);
      };
      if (ForwardSmallAttributesOnce()) {
        static const absl::Status once = set_attributes(true);  // per instantiation, thread-safe
        GEMTB_RETURN_IF_ERROR(once);
      } else {
        GEMTB_RETURN_IF_ERROR(set_attributes(false));
      }
      const int64_t grid = ForwardSmallPersistent() ? ForwardSmallGrid(items, HopperSmCount(), params.problem.heads) : items;
      kernel<<<static_cast<unsigned>(grid), kHopperBwdThreads, smem>>>(params, items);
      return CudaStatus(cudaGetLastError(), name);
    }
  });
}

template <ElementType E>
absl::Status LaunchForwardHopperSmall(const ForwardParams& params, int items) {
  return ForwardSmallStages() == 2 ? LaunchForwardHopperSmallStages<E, 2>(params, items)
                                   : LaunchForwardHopperSmallStages<E, 3>(params, items);
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_FORWARD_HOPPER_SMALL_KERNEL_CUH_
