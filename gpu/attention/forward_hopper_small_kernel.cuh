// The small forward (kernel_policy.h runs it when every tile of the launch has at most kSmallRows
// query rows and the act is pointwise: PMA's seeds): one warpgroup per CTA, one CTA per (tile, head)
// item in the heavy-first order, about 109 KB of shared memory so that two CTAs share an SM.
//
// Why: under Nsight Compute Meta's Triton GDPA runs PMA's forward as 4,608 independent 128-thread
// CTAs, two per SM, at 86% of DRAM's peak; the persistent split kernel (one CTA per SM, a producer
// and two consumers meeting at every item) reaches 80% (tools/bench/NOTES.md). Here each SM runs two
// independent pipelines and the hardware starts a new item whenever one ends.
//
// The step is the fused-dQ backward's at N = 32 (backward_hopper_fused_dq.cuh), transposed: Sᵀ = K Qᵀ
// (m64n32: 64 keys x 32 seed rows, no padding rows), Pᵀ = post * act(pre * Sᵀ) rounded to the input
// type and stored to shared memory by stmatrix.trans, then Oᵀ += Vᵀ Pᵀ with V read in place as the
// MN-major A operand (two m64 halves of the head dim). 64-key steps, three cp.async stages of K and
// V (zero-filled past the keys), all 128 threads loading. The epilogue writes Oᵀ's elements straight
// to O's rows. Deterministic: a fixed order of steps and MMAs per item.
#ifndef GEMTB_GPU_ATTENTION_FORWARD_HOPPER_SMALL_KERNEL_CUH_
#define GEMTB_GPU_ATTENTION_FORWARD_HOPPER_SMALL_KERNEL_CUH_

#include "absl/status/status.h"
#include "gpu/attention/backward_hopper_fused_dq.cuh"
#include "gpu/attention/kernel_policy.h"
#include "gpu/common/cuda_check.cuh"

namespace gemtb::gpu {

static_assert(kSmallRows == kFusedDqRows, "the small forward's step is the fused-dQ backward's N = 32 step");
inline constexpr uint32_t kSmallQBytes = kSmallRows * kHopperHeadDim * 2;  // 32 rows, two 4 KB blocks
// Stages of 64 keys (K and V, 32 KB each) and Pᵀ's own 4 KB: ~109 KB per CTA, two CTAs per SM.
inline constexpr int kSmallStages = 3;
inline constexpr int kSmallCtasPerSm = 2;
inline constexpr size_t kSmallSmemBytes =
    1024 + kSmallQBytes + kFusedDsTileBytes + static_cast<size_t>(kSmallStages) * 2 * kHopperBwdTileBytes;

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

// CTA blockIdx.x runs item blockIdx.x.
template <ElementType E, HopperAct kAct>
__global__ void __launch_bounds__(kHopperBwdThreads, kSmallCtasPerSm) ForwardHopperSmallKernel(const ForwardParams p) {
  static_assert(kAct != HopperAct::kSoftmax, "pointwise acts only");
  constexpr int kStages = kSmallStages;
  constexpr int D = kHopperHeadDim;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  __shared__ RowKeyRange s_keys[64];
  __shared__ float s_unused[64];  // HopperBwdDkDvFormP's LSE argument (pointwise acts read none)
  const uint32_t base = (wgmma::SmemAddress(smem_raw) + 1023u) & ~1023u;
  const uint32_t sq = base;
  const auto sk = [&](int stage) {
    return base + kSmallQBytes + kFusedDsTileBytes + static_cast<uint32_t>(stage) * 2u * kHopperBwdTileBytes;
  };
  const auto sv = [&](int stage) { return sk(stage) + kHopperBwdTileBytes; };

  const ProblemParams& pr = p.problem;
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const LaneCoords ln = Lane();
  const int64_t q_stride = static_cast<int64_t>(pr.heads) * D;
  const int64_t kv_stride = static_cast<int64_t>(pr.kv_heads) * D;

  const SmallItem cur = SmallItemAt(pr, p.tiles, static_cast<int>(blockIdx.x));
  // The load cursor: the step whose K/V the next cp.async group brings (kStages - 1 steps ahead of
  // the compute), and the stage it lands in.
  int ld_step = 0, ld_stage = 0;
  const auto load_next = [&]() {
    if (ld_step < cur.steps) {
      const int j0 = cur.tile.k_lo + ld_step * 64;
      const int64_t offset = (cur.seq.kv_begin + j0) * kv_stride + cur.hk * D;
      const int rows = min(64, cur.tile.k_hi - j0);
      HopperBwdLoad(sk(ld_stage), pr.k + offset, kv_stride, rows, pr.k);
      HopperBwdLoad(sv(ld_stage), pr.v + offset, kv_stride, rows, pr.v);
      ++ld_step;
    }
    ld_stage = ld_stage + 1 == kStages ? 0 : ld_stage + 1;
    CopyAsyncCommit();  // one group per step, empty past the last step
  };
  // Q rows [i0, i0 + q_rows) into the 32-row tile by cp.async with the first group, zero-filled below.
  {
    const int q_rows = min(kSmallRows, cur.seq.lq - cur.tile.i0);
    for (int idx = tid; idx < kSmallRows * (D / 8); idx += kHopperBwdThreads) {
      const int r = idx / (D / 8), c = idx % (D / 8);
      const bool ok = r < q_rows;
      const uint16_t* src = ok ? pr.q + (cur.seq.q_begin + cur.tile.i0 + r) * q_stride + cur.h * D + c * 8 : pr.q;
      wgmma::CpAsync16(sq + wgmma::SwizzledOffset(kSmallRows, r, c * 8), src, ok ? 16u : 0u);
    }
  }
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) load_next();
  int stage = 0;
  {
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
      CopyAsyncWait<kStages - 2>();  // this step's group (and Q with the first) has landed
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
      const uint32_t sp = base + kSmallQBytes;  // Pᵀ as the K-major B operand
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

    // Oᵀ (thread: head dims m*64 + 16w + g (+8), rows 8n + 2t (+1)) straight to O's rows, with no
    // staging tile; the L2 merges the 16-byte pieces.
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
  }
  CopyAsyncWait<0>();  // no copy outlives the CTA
}

// One CTA per item; the launch attributes are set on every launch, the shared-memory carveout left
// to the driver.
template <ElementType E>
absl::Status LaunchForwardHopperSmall(const ForwardParams& params, int items) {
  return DispatchHopperActTanhApprox(params.problem.options, [&]<HopperAct A>() -> absl::Status {
    if constexpr (A == HopperAct::kSoftmax) {
      return absl::InternalError("attention forward: the small kernel has no softmax");
    } else {
      const char* name = "attention forward kernel (Hopper, small)";
      const auto kernel = ForwardHopperSmallKernel<E, A>;
      GEMTB_RETURN_IF_ERROR(CudaStatus(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmallSmemBytes)),
          name));
      kernel<<<static_cast<unsigned>(items), kHopperBwdThreads, kSmallSmemBytes>>>(params);
      return CudaStatus(cudaGetLastError(), name);
    }
  });
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_FORWARD_HOPPER_SMALL_KERNEL_CUH_
