// Hopper backward kernels (sm_90a, head dim 128): the same functions as backward_row_dot.cuh,
// backward_dkdv_kernel.cuh and backward_dq_kernel.cuh (the emulate mode's casts), on warpgroup MMAs.
// Same host tile lists, same grids, same fixed summation orders (deterministic, no atomics).
//
//   One warpgroup (128 threads) per CTA, two CTAs per SM (about 100 KB of shared memory and up to
//   255 registers per thread each), so one CTA's elementwise work overlaps the other's MMAs.
//   Tiles in shared memory in the 128-byte swizzled layout (gpu/common/wgmma.cuh) through cp.async,
//   two stages: the next step's tiles load while this step computes.
//
//   dK/dV (per 64-key tile, loop over the readers' 64-row query steps, transposed orientation):
//     Sᵀ = K Qᵀ, dPᵀ = V dOᵀ (m64n64k16, both operands K-major in shared memory);
//     Pᵀ, dSᵀ elementwise in registers, rounded to the input type as register A operands;
//     dV += Pᵀ dO, dK += dSᵀ Q (m64n128k16, dO and Q MN-major in shared memory).
//     Within a step, Pᵀ is formed while dPᵀ is still on the tensor cores.
//   dQ (per 64-row query tile, loop over its readers and their 64-key steps):
//     S = Q Kᵀ, dP = dO Vᵀ, dS elementwise, dQ += dS K.
//   Few instructions per step (both kernels are issue-bound otherwise; tools/bench/NOTES.md):
//   unrolled tile loads with one swizzle phase per thread, wgmma descriptors built once per tile
//   and advanced by adding, softmax's exp as one FFMA + ex2, and no mask tests on full 64 x 64
//   blocks (every pair valid), nor a second one for dS.
//   D_i = rowsum(dO∘O) as the diagonal of dO Oᵀ on the same m64n64k16 MMA as dP, so that a row whose
//   O equals one value row gets dS = 0 exactly (backward_row_dot.cuh says why that matters).
#ifndef GEMTB_GPU_ATTENTION_BACKWARD_HOPPER_KERNEL_CUH_
#define GEMTB_GPU_ATTENTION_BACKWARD_HOPPER_KERNEL_CUH_

#include <type_traits>

#include "gpu/attention/activation.cuh"
#include "gpu/attention/backward_hopper_ds_layout.cuh"
#include "gpu/attention/forward_hopper_common.cuh"
#include "gpu/attention/mask.cuh"
#include "gpu/attention/params.h"
#include "gpu/common/mma.cuh"
#include "gpu/common/wgmma.cuh"

namespace gemtb::gpu {

inline constexpr int kHopperBwdThreads = 128;
inline constexpr uint32_t kHopperBwdTileBytes = 64 * kHopperHeadDim * 2;  // one 64-row tile

// Shared memory: 1024 bytes of alignment slack, then 64-row swizzled tiles.
//   dK/dV: K, V, then two stages of (Q, dO) (97 KB).
//   dQ: Q, two dO buffers (one per reader parity), then two stages of (K, V) (113 KB: two CTAs fill
//   the SM's 228 KB with their 1 KB reserves).
//   D_i: dO, O.
inline constexpr size_t kHopperDkDvSmemBytes = 1024 + 6 * kHopperBwdTileBytes;
inline constexpr size_t kHopperDqSmemBytes = 1024 + 7 * kHopperBwdTileBytes;
inline constexpr size_t kHopperRowDotSmemBytes = 1024 + 2 * kHopperBwdTileBytes;

// Rows [0, valid_rows) of a 64-row tile into the swizzled tile at `dst`, zero-filling the rest.
// Thread t always copies 16-byte column chunk t % 16 of rows t / 16 + 8i (i = 0..7): one row phase
// (row & 7) per thread, so the swizzled destination advances by one 1024-byte row group per copy and
// the loop unrolls into eight copies with no per-chunk index arithmetic (a generic loop costs about
// 20 instructions per copy, a fifth of a step's instructions).
__device__ __forceinline__ void HopperBwdLoad(uint32_t dst, const uint16_t* src, int64_t src_stride, int valid_rows,
                                              const uint16_t* any_valid) {
  constexpr int kChunks = kHopperHeadDim / 8;
  constexpr int kRowsPerPass = kHopperBwdThreads / kChunks;
  static_assert(kRowsPerPass == 8, "one row phase of the 128-byte swizzle per thread");
  const int c = static_cast<int>(threadIdx.x) % kChunks;
  const int r0 = static_cast<int>(threadIdx.x) / kChunks;
  const uint32_t d0 = dst + wgmma::SwizzledOffset(64, r0, c * 8);
  const uint16_t* s = src + r0 * src_stride + c * 8;
  const int64_t pass_stride = kRowsPerPass * src_stride;
#pragma unroll
  for (int i = 0; i < 64 / kRowsPerPass; ++i) {
    const bool ok = r0 + kRowsPerPass * i < valid_rows;
    wgmma::CpAsync16(d0 + static_cast<uint32_t>(i * kRowsPerPass * 128), ok ? s : any_valid, ok ? 16u : 0u);
    s += pass_stride;
  }
}

// C (64x64) = A Bᵀ over the head dim, A and B 64-row K-major swizzled tiles (8 k-steps of 16).
// The descriptors are built once per call and advanced by adding the k-step's byte offset >> 4 to
// their start-address field (tiles lie below 256 KB, so the 14-bit field never carries): about 8
// uniform instructions fewer per wgmma than building each descriptor.
template <ElementType E>
__device__ __forceinline__ void HopperBwdIssueAbT(float (&c)[32], uint32_t a_tile, uint32_t b_tile) {
  const uint64_t da = wgmma::SwizzledDescriptor(a_tile, 16, 1024);
  const uint64_t db = wgmma::SwizzledDescriptor(b_tile, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < kHopperHeadDim / 16; ++kk) {
    const uint64_t off = static_cast<uint64_t>(((kk >> 2) * 64 * 128 + (kk & 3) * 32) >> 4);
    wgmma::MmaSS64<E>(c, da + off, db + off, kk > 0 ? 1u : 0u);
  }
}

// C (64x128) += A (64x64 in registers, 4 fragments) * B (64x128 tile, MN-major: rows are the k dim).
template <ElementType E>
__device__ __forceinline__ void HopperBwdIssueAB(float (&c)[64], const uint32_t (&a)[4][4], uint32_t b_tile) {
  const uint64_t db = wgmma::SwizzledDescriptor(b_tile, 64 * 128, 1024);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    wgmma::MmaRS<E>(c, a[kk], db + static_cast<uint64_t>((kk * 16 * 128) >> 4), 1u);
  }
}

// Accumulator tile n's four values as their two words of the register A operand (CToA's layout:
// tiles 2kk and 2kk+1 are fragment kk). kF fragments: 4 for a 64-row step, 2 for the 32-row steps
// of the fused-dQ backward and the small forward.
template <ElementType E, int kF>
__device__ __forceinline__ void HopperBwdPack(uint32_t (&a)[kF][4], int n, const float (&v)[4]) {
  a[n >> 1][(n & 1) * 2] = PackRounded<E>(v[0], v[1]);
  a[n >> 1][(n & 1) * 2 + 1] = PackRounded<E>(v[2], v[3]);
}

// The per-pair step of backward_pair.cuh in two halves, so that the half that needs only S runs
// while dP is still on the tensor cores:
//   HopperBwdFromScore: P (for dV) and `kept`: softmax P̂ = exp(S - LSE), pointwise post * act'(S);
//     softmax takes LSE·log2(e) and scale_log2 = pre_scale·log2(e), so P̂ is one FFMA and one ex2
//     (exp2(qk·pre_scale·log2e − LSE·log2e), as the forward's log2-domain softmax);
//   HopperBwdDs:        dS = P̂ (post dP - D_i)  or  kept * dP.
// silu, gelu_tanh and the softmax exp take the special-function unit's fast paths (as the forward
// does): one exp and one approximate division per pair for both act and act', a few fp32 ulps from
// activation.cuh's exact forms before P and dS are rounded to 16 bits.
__device__ __forceinline__ void FastSiluBoth(float x, float& value, float& derivative) {
  const float e = __expf(-fabsf(x));  // in (0, 1]: no overflow for any x
  const float s = __fdividef(x >= 0.f ? 1.f : e, 1.f + e);
  value = x * s;
  derivative = s * (1.f + x * (1.f - s));
}

// gelu_tanh through σ = sigmoid(2u) = (1 + tanh u) / 2 and 1 − σ, each formed without a
// subtraction: value x σ, derivative σ + 2 x σ (1 − σ) u'. Forming tanh u first and then 1 + t and
// 1 − t² lost most of act' to cancellation on the negative tail (x ≈ −4: 1 + t ≈ 4e-5 from t ≈ −1,
// ~0.2% off), enough for one single-pair case of the check to fail dQ/dK by 3.6x its bound.
__device__ __forceinline__ void FastGeluTanhBoth(float x, float& value, float& derivative) {
  const float u = kSqrt2OverPi * (x + kGeluTanhA * x * x * x);
  const float e = __expf(-2.f * fabsf(u));  // in (0, 1]: no overflow for any x
  const float r = __fdividef(1.f, 1.f + e);
  const float sigma = u >= 0.f ? r : e * r;
  const float one_minus = u >= 0.f ? e * r : r;
  value = x * sigma;
  derivative = sigma + 2.f * x * sigma * one_minus * (kSqrt2OverPi + 3.f * kGeluTanhA * kSqrt2OverPi * x * x);
}

// The same through tanh.approx (AttentionOptions::tanh_approx): one MUFU per pair.
// silu: sigma(x) = (1 + tanh(x / 2)) / 2.
__device__ __forceinline__ void TanhApproxSiluBoth(float x, float& value, float& derivative) {
  const float s = fmaf(0.5f, TanhApprox(0.5f * x), 0.5f);
  value = x * s;
  derivative = s * (1.f + x * (1.f - s));
}

__device__ __forceinline__ void TanhApproxGeluBoth(float x, float& value, float& derivative) {
  const float x2 = x * x;
  const float t = TanhApprox(x * fmaf(x2, kSqrt2OverPi * kGeluTanhA, kSqrt2OverPi));
  const float half_x = 0.5f * x;
  value = fmaf(half_x, t, half_x);
  derivative = fmaf(0.5f, t, 0.5f) + half_x * (1.f - t * t) * fmaf(x2, 3.f * kGeluTanhA * kSqrt2OverPi, kSqrt2OverPi);
}

inline constexpr float kHopperBwdLog2e = 1.44269504088896340736f;

template <HopperAct kAct>
__device__ __forceinline__ float HopperBwdFromScore(const ProblemParams& pr, float qk, float lse_log2,
                                                    float scale_log2, float& p) {
  if constexpr (kAct == HopperAct::kSoftmax) {
    const float p_hat = Log2Softmax::Exp2(fmaf(qk, scale_log2, -lse_log2));
    p = pr.post_scale * p_hat;
    return p_hat;
  } else {
    const float s = qk * pr.pre_scale;
    float value, derivative;
    if constexpr (kAct == HopperAct::kSilu) {
      FastSiluBoth(s, value, derivative);
    } else if constexpr (kAct == HopperAct::kGeluTanh) {
      FastGeluTanhBoth(s, value, derivative);
    } else if constexpr (kAct == HopperAct::kSiluTanhApprox) {
      TanhApproxSiluBoth(s, value, derivative);
    } else if constexpr (kAct == HopperAct::kGeluTanhApprox) {
      TanhApproxGeluBoth(s, value, derivative);
    } else {
      value = ActValue(pr.options.act, s);
      derivative = ActDerivative(pr.options.act, s);
    }
    p = pr.post_scale * value;
    return pr.post_scale * derivative;
  }
}

template <HopperAct kAct>
__device__ __forceinline__ float HopperBwdDs(const ProblemParams& pr, float kept, float dp, float d_i) {
  if constexpr (kAct == HopperAct::kSoftmax) {
    return kept * (pr.post_scale * dp - d_i);
  } else {
    return kept * dp;
  }
}

// The step pieces that the one-tile kernels below and the chained kernels
// (backward_hopper_dkdv_chain.cuh, backward_hopper_dq_chain.cuh) share, so that the chains run the
// same elementwise code and MMAs. The callers keep their `form_p` / `form_kept` lambdas around the
// first two (the lambda's closure in the kernel is part of what keeps the compiled code as fast as
// the loops written inline).

// Pᵀ (rounded, into pa) and kept (in place of Sᵀ in st4) of a dK/dV step, from Sᵀ: lse and keys are
// the per-row LSE·log2(e) and key ranges of the step's 64 query rows, key the key rows of this
// thread's c0/c1 and c2/c3; kMasked: test each pair (else every pair of the block is valid).
// kN 8-column tiles: 8 (64 query rows), or 4 for the 32-row steps of the fused-dQ backward and the small
// forward (backward_hopper_fused_dq.cuh, forward_hopper_small_kernel.cuh).
template <ElementType E, HopperAct kAct, bool kMasked, int kN = 8>
__device__ __forceinline__ void HopperBwdDkDvFormP(const LaneCoords& ln, const ProblemParams& pr, float (&st4)[kN][4],
                                                   const float (&lse)[64], float scale_log2,
                                                   const RowKeyRange (&keys)[64], const int (&key)[2],
                                                   uint32_t (&pa)[kN / 2][4]) {
#pragma unroll
  for (int n = 0; n < kN; ++n) {
    float pv[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = n * 8 + 2 * ln.t + (e & 1);  // query row within the step
      float pe;
      const float kept = HopperBwdFromScore<kAct>(pr, st4[n][e], lse[c], scale_log2, pe);
      if constexpr (kMasked) {
        const bool ok = Contains(keys[c], key[e >> 1]);
        pv[e] = ok ? pe : 0.f;
        st4[n][e] = ok ? kept : 0.f;
      } else {
        pv[e] = pe;
        st4[n][e] = kept;
      }
    }
    HopperBwdPack<E>(pa, n, pv);
  }
}

// kept (P̂ or act', 0 on invalid pairs when kMasked) in place of S in s4, for a dQ step over keys
// [j0, j0 + 64): lse and keys of this thread's rows r = 0, 1 (c0/c1 and c2/c3).
template <HopperAct kAct, bool kMasked>
__device__ __forceinline__ void HopperBwdDqFormKept(const ProblemParams& pr, float (&s4)[8][4], const float (&lse)[2],
                                                    float scale_log2, const RowKeyRange (&keys)[2], int j0,
                                                    const LaneCoords& ln) {
#pragma unroll
  for (int n = 0; n < 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e >> 1;
      float unused_p;
      const float kept = HopperBwdFromScore<kAct>(pr, s4[n][e], lse[r], scale_log2, unused_p);
      if constexpr (kMasked) {
        s4[n][e] = Contains(keys[r], j0 + n * 8 + 2 * ln.t + (e & 1)) ? kept : 0.f;
      } else {
        s4[n][e] = kept;
      }
    }
  }
}

// Whether every pair of this thread's two rows (row[r] of the tile's q_rows, key ranges keys[r]) and
// keys [j0, j0 + 64) of a reader whose range ends at k_hi is valid; a warp with all lanes covered
// skips the mask tests.
__device__ __forceinline__ bool HopperBwdDqCovers(int k_hi, int j0, const int (&row)[2], int q_rows,
                                                  const RowKeyRange (&keys)[2]) {
  bool covers = k_hi - j0 >= 64;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    // Rows past the tile (zero Q and dO rows, never written) give dS = 0 either way.
    covers = covers && (row[r] >= q_rows || (keys[r].begin <= j0 && keys[r].end >= j0 + 64));
  }
  return covers;
}

// dSᵀ of a dK/dV step as register A operands (dsa), from kept (in st4) and dPᵀ: D_i of the step's
// 64 query rows in d. ds4: four values' staging, the caller's (declared in the kernel as it was
// when this loop was inline there; declared here, the kernels compiled to other register numbers).
// kN as for HopperBwdDkDvFormP.
template <ElementType E, HopperAct kAct, int kN = 8>
__device__ __forceinline__ void HopperBwdDkDvDs(const LaneCoords& ln, const ProblemParams& pr,
                                                const float (&st4)[kN][4], const float (&dpt4)[kN][4],
                                                const float (&d)[64], float (&ds4)[4], uint32_t (&dsa)[kN / 2][4]) {
#pragma unroll
  for (int n = 0; n < kN; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = n * 8 + 2 * ln.t + (e & 1);
      ds4[e] = HopperBwdDs<kAct>(pr, st4[n][e], dpt4[n][e], d[c]);
    }
    HopperBwdPack<E>(dsa, n, ds4);
  }
}

// dS of a dQ step as register A operands (dsa), from kept (in s4) and dP: D_i of this thread's two
// rows in d_i; ds4 as for HopperBwdDkDvDs.
template <ElementType E, HopperAct kAct>
__device__ __forceinline__ void HopperBwdDqDs(const ProblemParams& pr, const float (&s4)[8][4],
                                              const float (&dp4)[8][4], const float (&d_i)[2], float (&ds4)[4],
                                              uint32_t (&dsa)[4][4]) {
#pragma unroll
  for (int n = 0; n < 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      ds4[e] = HopperBwdDs<kAct>(pr, s4[n][e], dp4[n][e], d_i[e >> 1]);  // 0 where kept is 0
    }
    HopperBwdPack<E>(dsa, n, ds4);
  }
}

// dV += Pᵀ dO and dK += dSᵀ Q (pa, dsa: Pᵀ and dSᵀ as register A operands; sq, s_do: the step's Q
// and dO tiles), waited for. Both after dSᵀ: issuing dV first (to overlap it with dSᵀ) kept Pᵀ's
// operand live beside dSᵀ's and spilled registers (255 per thread).
template <ElementType E>
__device__ __forceinline__ void HopperBwdDkDvAccumulate(const uint32_t (&pa)[4][4], const uint32_t (&dsa)[4][4],
                                                        uint32_t sq, uint32_t s_do, float (&dk)[64], float (&dv)[64]) {
  wgmma::Fence();
  HopperBwdIssueAB<E>(dv, pa, s_do);
  HopperBwdIssueAB<E>(dk, dsa, sq);
  wgmma::Commit();
  wgmma::Wait<0>();
  wgmma::FenceRegisters(dv);
  wgmma::FenceRegisters(dk);
}

// dQ += dS K (dsa: dS as register A operands; sk: the step's K tile), waited for.
template <ElementType E>
__device__ __forceinline__ void HopperBwdDqAccumulate(const uint32_t (&dsa)[4][4], uint32_t sk, float (&dq)[64]) {
  wgmma::Fence();
  HopperBwdIssueAB<E>(dq, dsa, sk);
  wgmma::Commit();
  wgmma::Wait<0>();
  wgmma::FenceRegisters(dq);
}

// What a dK/dV step does with its dSᵀ before the dV/dK MMAs: nothing (the recompute backward), or
// store it (the stored-dS backward: the kernel passes a lambda around HopperBwdStoreDsBlock).
struct HopperBwdNoDsStore {
  __device__ __forceinline__ void operator()(const uint32_t (&)[4][4]) const {}
};

// The rest of a dK/dV step once Sᵀ and dPᵀ are issued: wait for Sᵀ, form_p (the caller's lambda
// around HopperBwdDkDvFormP: Pᵀ into pa, kept into Sᵀ) while dPᵀ runs, with (full) or without mask
// tests; wait for dPᵀ; dSᵀ (HopperBwdDkDvDs, D_i in d); store_ds(dsa); dV += Pᵀ dO, dK += dSᵀ Q,
// waited for.
template <ElementType E, HopperAct kAct, typename FormP, typename StoreDs = HopperBwdNoDsStore>
__device__ __forceinline__ void HopperBwdDkDvStepRest(const LaneCoords& ln, const ProblemParams& pr, float (&st)[32],
                                                      float (&dpt)[32], bool full, const FormP& form_p,
                                                      const float (&d)[64], float (&ds4)[4], uint32_t (&pa)[4][4],
                                                      uint32_t (&dsa)[4][4], uint32_t sq, uint32_t s_do,
                                                      float (&dk)[64], float (&dv)[64],
                                                      const StoreDs& store_ds = StoreDs{}) {
  wgmma::Wait<1>();
  wgmma::FenceRegisters(st);
  if (full) {
    form_p(std::false_type{});
  } else {
    form_p(std::true_type{});
  }
  wgmma::Wait<0>();  // dPᵀ
  wgmma::FenceRegisters(dpt);
  HopperBwdDkDvDs<E, kAct>(ln, pr, *reinterpret_cast<const float(*)[8][4]>(&st),
                           *reinterpret_cast<const float(*)[8][4]>(&dpt), d, ds4, dsa);
  store_ds(dsa);
  HopperBwdDkDvAccumulate<E>(pa, dsa, sq, s_do, dk, dv);
}

// The middle of a dQ step once S is in (dP still running): form_kept (the caller's lambda
// around HopperBwdDqFormKept: kept into S) while dP runs, without mask tests when every lane's rows
// cover keys [j0, j0 + 64) (HopperBwdDqCovers); wait for dP.
template <typename FormKept>
__device__ __forceinline__ void HopperBwdDqStepKept(float (&dp)[32], int k_hi, int j0,
                                                    const int (&row)[2], int q_rows, const RowKeyRange (&keys)[2],
                                                    const FormKept& form_kept) {
  if (__all_sync(0xffffffffu, HopperBwdDqCovers(k_hi, j0, row, q_rows, keys))) {
    form_kept(std::false_type{});
  } else {
    form_kept(std::true_type{});
  }
  wgmma::Wait<0>();
  wgmma::FenceRegisters(dp);
}

// A dQ step's per-row state for a new reader (sequence seq): key ranges of this thread's rows row[r]
// of the query tile at i0 (q_rows rows), and for softmax their LSE·log2(e) and D_i. kClear: rows
// past the tile get 0 rather than keeping what they held (the chains reuse them across tiles).
template <bool kSoftmax, bool kClear>
__device__ __forceinline__ void HopperBwdDqRowState(const BackwardParams& p, const SeqInfo& seq, int h, int i0,
                                                    const int (&row)[2], int q_rows, RowKeyRange (&keys)[2],
                                                    float (&lse)[2], float (&d_i)[2]) {
  const ProblemParams& pr = p.problem;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    keys[r] = RowKeys(pr.options, i0 + row[r], seq.lq, seq.lk);
    if constexpr (kClear) {
      lse[r] = 0.f;
      d_i[r] = 0.f;
    }
    if (kSoftmax && row[r] < q_rows) {
      const int64_t at = h * pr.out_rows + seq.out_begin + i0 + row[r];
      lse[r] = p.lse[at] * kHopperBwdLog2e;
      d_i[r] = p.d_rows[at];
    }
  }
}

// One part of a split dQ tile: the fp32 sum of rows row[r] of query head h, for DqReduceKernel.
__device__ __forceinline__ void HopperBwdStoreDqPartial(const BackwardParams& p, const float (&dq)[64], int partial,
                                                        int h, const int (&row)[2], const LaneCoords& ln) {
  constexpr int D = kHopperHeadDim;
  float* part = p.dq_partial + (static_cast<int64_t>(partial) * p.problem.heads + h) * 64 * D + 2 * ln.t;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      *reinterpret_cast<float2*>(part + row[r] * D + i * 8) = make_float2(dq[4 * i + 2 * r], dq[4 * i + 2 * r + 1]);
    }
  }
}

// dQ of a whole query tile: rows row[r] (< q_rows) of query head h from query row first_row on,
// times pre_scale, rounded to the input type.
template <ElementType E>
__device__ __forceinline__ void HopperBwdStoreDqRows(const BackwardParams& p, const float (&dq)[64], int64_t first_row,
                                                     int q_rows, int h, const int (&row)[2], const LaneCoords& ln) {
  constexpr int D = kHopperHeadDim;
  const ProblemParams& pr = p.problem;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row[r] >= q_rows) continue;
    const int64_t at = ((first_row + row[r]) * pr.heads + h) * D + 2 * ln.t;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      *reinterpret_cast<uint32_t*>(p.dq + at + i * 8) =
          PackRounded<E>(pr.pre_scale * dq[4 * i + 2 * r], pr.pre_scale * dq[4 * i + 2 * r + 1]);
    }
  }
}

// D_i for 64 output rows of one head (blockIdx.x: row block, blockIdx.y: head).
template <ElementType E>
__global__ void __launch_bounds__(kHopperBwdThreads) RowDotHopperKernel(const BackwardParams p) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t s_do = (wgmma::SmemAddress(smem_raw) + 1023u) & ~1023u;
  const uint32_t s_o = s_do + kHopperBwdTileBytes;
  const ProblemParams& pr = p.problem;
  const int h = static_cast<int>(blockIdx.y);
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * 64;
  const int rows = static_cast<int>(min(int64_t{64}, pr.out_rows - row0));
  const int64_t stride = static_cast<int64_t>(pr.heads) * kHopperHeadDim;
  HopperBwdLoad(s_do, p.d_o + row0 * stride + h * kHopperHeadDim, stride, rows, p.d_o);
  HopperBwdLoad(s_o, p.o + row0 * stride + h * kHopperHeadDim, stride, rows, p.o);
  CopyAsyncCommit();
  CopyAsyncWait<0>();
  wgmma::FenceProxyAsync();
  __syncthreads();
  float c[32];
  wgmma::Fence();
  HopperBwdIssueAbT<E>(c, s_do, s_o);
  wgmma::Commit();
  wgmma::Wait<0>();
  wgmma::FenceRegisters(c);
  // Diagonal (r, r), r = 16w + g: column tile 2w, element 2t + e == g; r + 8: column tile 2w+1, c2/c3.
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const LaneCoords ln = Lane();
  if ((ln.g >> 1) == ln.t) {
    const bool odd = (ln.g & 1) != 0;
    float d0 = 0.f, d1 = 0.f;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      if (w == warp) {
        d0 = odd ? c[4 * (2 * w) + 1] : c[4 * (2 * w)];
        d1 = odd ? c[4 * (2 * w + 1) + 3] : c[4 * (2 * w + 1) + 2];
      }
    }
    const int r0 = warp * 16 + ln.g;
    if (r0 < rows) p.d_rows[h * pr.out_rows + row0 + r0] = d0;
    if (r0 + 8 < rows) p.d_rows[h * pr.out_rows + row0 + r0 + 8] = d1;
  }
}

// dK and dV of one 64-key tile (blockIdx.x) of K/V head blockIdx.y. kStoreDs (stored-dS backward): also
// write each step's dSᵀ to its block of p.ds (backward_hopper_ds_layout.cuh) for the stored-dS dQ
// pass; the plan (backward_stored_ds_plan.h) guarantees the steps start on 64-row blocks.
template <ElementType E, HopperAct kAct, bool kStoreDs = false>
__global__ void __launch_bounds__(kHopperBwdThreads, 2) DkDvHopperKernel(const BackwardParams p) {
  constexpr int D = kHopperHeadDim;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  __shared__ RowKeyRange s_keys[2][64];
  __shared__ float s_lse[2][64];
  __shared__ float s_d[2][64];
  const uint32_t sk = (wgmma::SmemAddress(smem_raw) + 1023u) & ~1023u;
  const uint32_t sv = sk + kHopperBwdTileBytes;
  const auto sq = [&](int stage) { return sv + (1u + 2u * static_cast<uint32_t>(stage)) * kHopperBwdTileBytes; };
  const auto s_do = [&](int stage) { return sq(stage) + kHopperBwdTileBytes; };

  const ProblemParams& pr = p.problem;
  const DkvTile tile = p.dkv_tiles[blockIdx.x];
  const int hk = static_cast<int>(blockIdx.y);
  const int group = pr.heads / pr.kv_heads;
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const LaneCoords ln = Lane();
  const int64_t q_stride = static_cast<int64_t>(pr.heads) * D;
  const int64_t kv_stride = static_cast<int64_t>(pr.kv_heads) * D;
  constexpr bool softmax = kAct == HopperAct::kSoftmax;
  const float scale_log2 = pr.pre_scale * kHopperBwdLog2e;

  const int k_rows = min(64, tile.lk - tile.j0);
  const int64_t kv_offset = (tile.kv_begin + tile.j0) * kv_stride + hk * D;
  HopperBwdLoad(sk, pr.k + kv_offset, kv_stride, k_rows, pr.k);
  HopperBwdLoad(sv, pr.v + kv_offset, kv_stride, k_rows, pr.v);

  // The steps in the fixed order of the mma.sync kernel: segment, then query head of the GQA
  // group, then 64-row query steps.
  struct Cursor {
    int sgi, h, q0;
  };
  const auto segment = [&](int sgi) { return p.dkv_segments[tile.seg_begin + sgi]; };
  const auto advance = [&](Cursor c) {
    const DkvSegment seg = segment(c.sgi);
    c.q0 += 64;
    if (c.q0 < seg.i1) return c;
    if (++c.h < (hk + 1) * group) {
      c.q0 = seg.i0;
      return c;
    }
    c.h = hk * group;
    if (++c.sgi < tile.seg_count) c.q0 = segment(c.sgi).i0;
    return c;
  };
  int full_vote = 1;  // see `full` below
  const auto load_step = [&](Cursor c, int stage) {
    const DkvSegment seg = segment(c.sgi);
    const SeqInfo seq = pr.seqs[seg.b];
    const int nq = min(64, seg.i1 - c.q0);
    HopperBwdLoad(sq(stage), pr.q + (seq.q_begin + c.q0) * q_stride + c.h * D, q_stride, nq, pr.q);
    HopperBwdLoad(s_do(stage), p.d_o + (seq.out_begin + c.q0) * q_stride + c.h * D, q_stride, nq, p.d_o);
    if (tid < 64) {
      const bool row_ok = tid < nq;
      const RowKeyRange keys = row_ok ? RowKeys(pr.options, c.q0 + tid, seq.lq, seq.lk) : RowKeyRange{0, 0};
      s_keys[stage][tid] = keys;
      full_vote = nq == 64 && k_rows == 64 && keys.begin <= tile.j0 && keys.end >= tile.j0 + 64 ? 1 : 0;
      const int64_t at = c.h * pr.out_rows + seq.out_begin + c.q0 + tid;
      s_lse[stage][tid] = softmax && row_ok ? p.lse[at] * kHopperBwdLog2e : 0.f;
      s_d[stage][tid] = softmax && row_ok ? p.d_rows[at] : 0.f;
    }
  };

  // A step is full when every pair of its 64 x 64 block is valid (the usual case inside long
  // sequences): then the elementwise part skips the mask tests, which took about a fifth of a
  // step's instructions. Rows 0..63 vote when their step is loaded; the barrier that starts the
  // step ANDs the votes.
  Cursor cur{0, hk * group, segment(0).i0};
  load_step(cur, 0);
  CopyAsyncCommit();

  const int key[2] = {tile.j0 + warp * 16 + ln.g, tile.j0 + warp * 16 + ln.g + 8};  // rows of c0/c1, c2/c3
  float dk[64], dv[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    dk[i] = 0.f;
    dv[i] = 0.f;
  }
  for (int stage = 0; cur.sgi < tile.seg_count; stage ^= 1) {
    CopyAsyncWait<0>();
    wgmma::FenceProxyAsync();
    // This step's tiles are in; every thread is done with the other stage.
    const bool full = __syncthreads_and(full_vote) != 0;
    const Cursor next = advance(cur);
    if (next.sgi < tile.seg_count) load_step(next, stage ^ 1);
    CopyAsyncCommit();

    // Sᵀ and dPᵀ; P̂ (or act, act') from Sᵀ while dPᵀ runs; dSᵀ; dV += Pᵀ dO and dK += dSᵀ Q.
    float st[32], dpt[32];
    wgmma::Fence();
    HopperBwdIssueAbT<E>(st, sk, sq(stage));
    wgmma::Commit();
    HopperBwdIssueAbT<E>(dpt, sv, s_do(stage));
    wgmma::Commit();
    // Invalid pairs get P = 0 and kept = 0, so their dS = kept * (...) is 0 as well (dP and D_i are
    // finite) without a second mask test.
    float(&st4)[8][4] = *reinterpret_cast<float(*)[8][4]>(&st);
    uint32_t pa[4][4], dsa[4][4];
    const auto form_p = [&](auto masked) {
      HopperBwdDkDvFormP<E, kAct, decltype(masked)::value>(ln, pr, st4, s_lse[stage], scale_log2, s_keys[stage], key,
                                                           pa);
    };
    float ds4[4];
    if constexpr (kStoreDs) {
      uint16_t* const ds_block =
          p.ds + HopperBwdDsBlockOffset(p, segment(cur.sgi).b, cur.q0 / kDsBlock, tile.j0 / kDsBlock, cur.h);
      const auto store_ds = [&](const uint32_t(&w)[4][4]) { HopperBwdStoreDsBlock(ds_block, w, ln, warp); };
      HopperBwdDkDvStepRest<E, kAct>(ln, pr, st, dpt, full, form_p, s_d[stage], ds4, pa, dsa, sq(stage), s_do(stage),
                                     dk, dv, store_ds);
    } else {
      HopperBwdDkDvStepRest<E, kAct>(ln, pr, st, dpt, full, form_p, s_d[stage], ds4, pa, dsa, sq(stage), s_do(stage),
                                     dk, dv);
    }
    cur = next;
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (key[r] - tile.j0 >= k_rows) continue;
    const int64_t at = ((tile.kv_begin + key[r]) * pr.kv_heads + hk) * D + 2 * ln.t;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      *reinterpret_cast<uint32_t*>(p.dk + at + i * 8) =
          PackRounded<E>(pr.pre_scale * dk[4 * i + 2 * r], pr.pre_scale * dk[4 * i + 2 * r + 1]);
      *reinterpret_cast<uint32_t*>(p.dv + at + i * 8) = PackRounded<E>(dv[4 * i + 2 * r], dv[4 * i + 2 * r + 1]);
    }
  }
}

// dQ of one 64-row query tile (blockIdx.x) of query head blockIdx.y, over its readers in order.
template <ElementType E, HopperAct kAct>
__global__ void __launch_bounds__(kHopperBwdThreads, 2) DqHopperKernel(const BackwardParams p) {
  constexpr int D = kHopperHeadDim;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t sq = (wgmma::SmemAddress(smem_raw) + 1023u) & ~1023u;
  const auto s_do = [&](int buf) { return sq + (1u + static_cast<uint32_t>(buf)) * kHopperBwdTileBytes; };
  const auto sk = [&](int stage) { return sq + (3u + 2u * static_cast<uint32_t>(stage)) * kHopperBwdTileBytes; };
  const auto sv = [&](int stage) { return sk(stage) + kHopperBwdTileBytes; };

  const ProblemParams& pr = p.problem;
  const DqTile tile = p.dq_tiles[blockIdx.x];
  const int h = static_cast<int>(blockIdx.y);
  const int hk = h / (pr.heads / pr.kv_heads);
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const LaneCoords ln = Lane();
  const int64_t q_stride = static_cast<int64_t>(pr.heads) * D;
  const int64_t kv_stride = static_cast<int64_t>(pr.kv_heads) * D;
  constexpr bool softmax = kAct == HopperAct::kSoftmax;
  const float scale_log2 = pr.pre_scale * kHopperBwdLog2e;

  // Every reader reads the same query rows: take them from the first.
  const SeqInfo first = pr.seqs[p.dq_readers[tile.reader_begin].b];
  const int q_rows = min(64, first.lq - tile.i0);
  HopperBwdLoad(sq, pr.q + (first.q_begin + tile.i0) * q_stride + h * D, q_stride, q_rows, pr.q);

  // Steps: reader ri, keys [j0, j0+64) of its range. dO buffer ri % 2 is loaded with the reader's
  // first step.
  struct Cursor {
    int ri, j0;
  };
  const auto reader = [&](int ri) { return p.dq_readers[tile.reader_begin + ri]; };
  const auto advance = [&](Cursor c) {
    c.j0 += 64;
    if (c.j0 < reader(c.ri).k_hi) return c;
    if (++c.ri < tile.reader_count) c.j0 = reader(c.ri).k_lo;
    return c;
  };
  const auto load_step = [&](Cursor c, int stage, bool new_reader) {
    const DqReader rd = reader(c.ri);
    const SeqInfo seq = pr.seqs[rd.b];
    const int64_t kv_offset = (seq.kv_begin + c.j0) * kv_stride + hk * D;
    const int k_rows = min(64, rd.k_hi - c.j0);
    HopperBwdLoad(sk(stage), pr.k + kv_offset, kv_stride, k_rows, pr.k);
    HopperBwdLoad(sv(stage), pr.v + kv_offset, kv_stride, k_rows, pr.v);
    if (new_reader) {
      HopperBwdLoad(s_do(c.ri & 1), p.d_o + (seq.out_begin + tile.i0) * q_stride + h * D, q_stride, q_rows, p.d_o);
    }
  };
  Cursor cur{0, reader(0).k_lo};
  load_step(cur, 0, true);
  CopyAsyncCommit();

  const int row[2] = {warp * 16 + ln.g, warp * 16 + ln.g + 8};
  float dq[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) dq[i] = 0.f;
  RowKeyRange keys[2] = {{0, 0}, {0, 0}};
  float lse[2] = {0.f, 0.f};
  float d_i[2] = {0.f, 0.f};
  int row_reader = -1;
  for (int stage = 0; cur.ri < tile.reader_count; stage ^= 1) {
    CopyAsyncWait<0>();
    wgmma::FenceProxyAsync();
    __syncthreads();
    const Cursor next = advance(cur);
    if (next.ri < tile.reader_count) load_step(next, stage ^ 1, next.ri != cur.ri);
    CopyAsyncCommit();
    const SeqInfo seq = pr.seqs[reader(cur.ri).b];
    if (row_reader != cur.ri) {
      row_reader = cur.ri;
      HopperBwdDqRowState<softmax, false>(p, seq, h, tile.i0, row, q_rows, keys, lse, d_i);
    }

    // S and dP; P̂ (or act') from S while dP runs; dS; dQ += dS K.
    float s[32], dp[32];
    wgmma::Fence();
    HopperBwdIssueAbT<E>(s, sq, sk(stage));
    wgmma::Commit();
    HopperBwdIssueAbT<E>(dp, s_do(cur.ri & 1), sv(stage));
    wgmma::Commit();
    wgmma::Wait<1>();
    wgmma::FenceRegisters(s);
    float(&s4)[8][4] = *reinterpret_cast<float(*)[8][4]>(&s);
    float(&dp4)[8][4] = *reinterpret_cast<float(*)[8][4]>(&dp);
    const auto form_kept = [&](auto masked) {
      HopperBwdDqFormKept<kAct, decltype(masked)::value>(pr, s4, lse, scale_log2, keys, cur.j0, ln);
    };
    HopperBwdDqStepKept(dp, reader(cur.ri).k_hi, cur.j0, row, q_rows, keys, form_kept);
    uint32_t dsa[4][4];
    float ds4[4];
    HopperBwdDqDs<E, kAct>(pr, s4, dp4, d_i, ds4, dsa);
    HopperBwdDqAccumulate<E>(dsa, sk(stage), dq);
    cur = next;
  }

  if (tile.partial >= 0) {  // one part of a split tile: the fp32 sum, for DqReduceKernel
    HopperBwdStoreDqPartial(p, dq, tile.partial, h, row, ln);
    return;
  }
  HopperBwdStoreDqRows<E>(p, dq, first.q_begin + tile.i0, q_rows, h, row, ln);
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_BACKWARD_HOPPER_KERNEL_CUH_
