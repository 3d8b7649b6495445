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
// turns Oᵀ back into O rows through shared memory. Deterministic: a fixed order of steps and MMAs
// per item.
#ifndef GEMTB_GPU_ATTENTION_FORWARD_HOPPER_SMALL_KERNEL_CUH_
#define GEMTB_GPU_ATTENTION_FORWARD_HOPPER_SMALL_KERNEL_CUH_

#include "absl/status/status.h"
#include "gpu/attention/backward_hopper_fused_dq.cuh"
#include "gpu/attention/forward_variant.h"
#include "gpu/common/cuda_check.cuh"

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
inline constexpr int kSmallEpiRowBytes = kHopperHeadDim * 2 + 16;

template <ElementType E, HopperAct kAct, int kStages>
__global__ void __launch_bounds__(kHopperBwdThreads, kStages == 2 ? 3 : 2)
    ForwardHopperSmallKernel(const ForwardParams p) {
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
  const int item = static_cast<int>(blockIdx.x);
  const ForwardTile tile = p.tiles[item / pr.heads];
  const int h = item % pr.heads;
  const int hk = h / (pr.heads / pr.kv_heads);
  const SeqInfo seq = pr.seqs[tile.b];
  const int q_rows = min(kSmallRows, seq.lq - tile.i0);
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const LaneCoords ln = Lane();
  const int64_t q_stride = static_cast<int64_t>(pr.heads) * D;
  const int64_t kv_stride = static_cast<int64_t>(pr.kv_heads) * D;
  const int steps = (tile.k_hi - tile.k_lo + 63) / 64;

  const auto load_kv = [&](int step, int stage) {
    const int j0 = tile.k_lo + step * 64;
    const int64_t offset = (seq.kv_begin + j0) * kv_stride + hk * D;
    const int rows = min(64, tile.k_hi - j0);
    HopperBwdLoad(sk(stage), pr.k + offset, kv_stride, rows, pr.k);
    HopperBwdLoad(sv(stage), pr.v + offset, kv_stride, rows, pr.v);
  };
  // Q rows [i0, i0 + q_rows) into the 32-row tile, zero-filled below.
  for (int idx = tid; idx < kSmallRows * (D / 8); idx += kHopperBwdThreads) {
    const int r = idx / (D / 8), c = idx % (D / 8);
    const bool ok = r < q_rows;
    const uint16_t* src = ok ? pr.q + (seq.q_begin + tile.i0 + r) * q_stride + h * D + c * 8 : pr.q;
    wgmma::CpAsync16(sq + wgmma::SwizzledOffset(kSmallRows, r, c * 8), src, ok ? 16u : 0u);
  }
  load_kv(0, 0);
  wgmma::CpAsyncCommit();
#pragma unroll
  for (int i = 1; i < kStages - 1; ++i) {
    if (steps > i) load_kv(i, i);
    wgmma::CpAsyncCommit();
  }
  if (tid < 64) {
    s_keys[tid] = tid < q_rows ? RowKeys(pr.options, tile.i0 + tid, seq.lq, seq.lk) : RowKeyRange{0, 0};
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
  for (int step = 0; step < steps; ++step) {
    const int stage = step % kStages;
    wgmma::CpAsyncWait<kStages - 2>();  // this step's group (and Q with step 0) has landed
    wgmma::FenceProxyAsync();
    __syncthreads();  // every thread's copies are in; every warp's MMAs of the step before are done
    if (step + kStages - 1 < steps) load_kv(step + kStages - 1, (step + kStages - 1) % kStages);
    wgmma::CpAsyncCommit();
    const int j0 = tile.k_lo + step * 64;
    const int k_rows = min(64, tile.k_hi - j0);
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
  }

  // Oᵀ (thread: head dims m*64 + 16w + g (+8), rows 8n + 2t (+1)) to O's rows through stage 0's
  // K tile (free: no copy is in flight, every MMA is done), then whole 16-byte chunks out.
  wgmma::CpAsyncWait<0>();
  __syncthreads();
  const uint32_t staging = sk(0);
#pragma unroll
  for (int m = 0; m < 2; ++m) {
#pragma unroll
    for (int n = 0; n < 4; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int d = m * 64 + warp * 16 + ln.g + 8 * (e >> 1);
        const int q = 8 * n + 2 * ln.t + (e & 1);
        const uint16_t bits = Storage<E>::FromFloat(ot[m][4 * n + e]);
        asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(staging + static_cast<uint32_t>(q * kSmallEpiRowBytes + 2 * d)),
                     "h"(bits)
                     : "memory");
      }
    }
  }
  __syncthreads();
  for (int idx = tid; idx < kSmallRows * (D / 8); idx += kHopperBwdThreads) {
    const int r = idx / (D / 8), c = idx % (D / 8);
    if (r < q_rows) {
      *reinterpret_cast<uint4*>(p.o + ((seq.out_begin + tile.i0 + r) * pr.heads + h) * D + c * 8) =
          LdSharedV4(staging + static_cast<uint32_t>(r * kSmallEpiRowBytes + 16 * c));
    }
  }
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
      GEMTB_RETURN_IF_ERROR(CudaStatus(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)), name));
      kernel<<<static_cast<unsigned>(items), kHopperBwdThreads, smem>>>(params);
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
