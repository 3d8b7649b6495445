// What the Hopper forward kernels (sm_90a, head dim 128; forward_hopper_ws_kernel.cuh,
// forward_hopper_tma_kernel.cuh, forward_hopper_split_kernel.cuh) share: their shared-memory layout,
// the activation dispatch, the elementwise step from S to P, P as wgmma's register A operand and the
// epilogue that writes O and LSE. The function is forward_kernel.cuh's (the emulate mode's casts).
//
//   S = Q Kᵀ: wgmma m64nBNk16, both operands from shared memory (128-byte swizzled, K-major).
//   P = act(S) (or the online-softmax exp) in registers, rounded to the input type, and used as the
//   register A operand of O += P V (wgmma m64n128k16, V MN-major from shared memory): no shared-
//   memory round trip for P.
//   Masks: a step whose keys lie inside every row's valid range runs without any per-element test;
//   only boundary steps test each (row, key) pair.
#ifndef GEMTB_GPU_ATTENTION_FORWARD_HOPPER_COMMON_CUH_
#define GEMTB_GPU_ATTENTION_FORWARD_HOPPER_COMMON_CUH_

#include <climits>
#include <type_traits>

#include "gpu/attention/activation.cuh"
#include "gpu/attention/mask.cuh"
#include "gpu/attention/params.h"
#include "gpu/attention/softmax.cuh"
#include "gpu/common/mma.cuh"
#include "gpu/common/quad_transpose.cuh"
#include "gpu/common/sm_count.h"
#include "gpu/common/wgmma.cuh"

namespace gemtb::gpu {

// Shared memory of the Hopper forwards for kBlockN keys per step: Q, then kStages K/V stages.
template <int kBlockN>
struct HopperForwardSmem {
  static constexpr uint32_t kQBytes = kHopperBlockM * kHopperHeadDim * 2;
  static constexpr uint32_t kKvBytes = kBlockN * kHopperHeadDim * 2;
  static constexpr int kStages = 3;
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

// Online softmax in the log2 domain for one thread's two rows (g, g+8) of a 64-key step: scores
// are scaled by pre*log2(e) once, so each probability is one ex2 (the SFU's native exp). Same
// FlashAttention order as softmax.cuh (max, unnormalised exp, fp32 row sums, rescale factor).
struct Log2Softmax {
  float m[2] = {-INFINITY, -INFINITY};  // running max of the log2-scaled scores
  float l[2] = {0.f, 0.f};              // this lane's partial row sums

  // `s` holds log2-scaled scores (-inf where masked); replaces them by exp2(s - m_new).
  template <int kTiles>
  __device__ __forceinline__ void Step(float (&s)[kTiles][4], float (&rescale)[2]) {
    OnlineSoftmaxStep<kTiles>([](float x) { return Exp2(x); }, m, l, s, rescale);
  }

  // Row sums (0: no valid key) and LSE = ln(2) * (m + log2(l)) in natural-log units.
  __device__ __forceinline__ void Finish(float (&row_sum)[2], float (&lse)[2]) const {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_sum[r] = QuadSum(l[r]);
      lse[r] = row_sum[r] > 0.f ? (m[r] + log2f(row_sum[r])) * 0.69314718055994530942f : -INFINITY;
    }
  }

  static __device__ __forceinline__ float Exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
  }
};

// gelu_tanh(x) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3), the identity
// 0.5 (1 + tanh(u)) = sigmoid(2u) with the SFU's exp and reciprocal (tanhf is far slower).
__device__ __forceinline__ float FastGeluTanh(float x) {
  const float u = kSqrt2OverPi * (x + kGeluTanhA * x * x * x);
  return __fdividef(x, 1.f + __expf(-2.f * u));
}

// The activation is a template argument: each kernel holds one straight-line elementwise path (a
// per-element switch over every activation made the code large enough to miss the instruction
// cache and kept the SFU operations of neighbouring elements from overlapping).
// kSiluTanhApprox and kGeluTanhApprox evaluate the act through tanh.approx (AttentionOptions::tanh_approx);
// only the kernels whose launchers use DispatchHopperActTanhApprox below have them.
enum class HopperAct { kSoftmax, kSilu, kGeluTanh, kOther, kSiluTanhApprox, kGeluTanhApprox };

// Calls fn.template operator()<A>() with the HopperAct that runs `act` (kOther for the acts without
// a kernel of their own): the one place where the launchers map an Activation to a kernel.
template <typename Fn>
auto DispatchHopperAct(Activation act, Fn&& fn) {
  switch (act) {
    case Activation::kSoftmax: return fn.template operator()<HopperAct::kSoftmax>();
    case Activation::kSilu: return fn.template operator()<HopperAct::kSilu>();
    case Activation::kGeluTanh: return fn.template operator()<HopperAct::kGeluTanh>();
    default: return fn.template operator()<HopperAct::kOther>();
  }
}

// As DispatchHopperAct, but silu and gelu_tanh take their tanh.approx kernels when the call permits
// it (options.tanh_approx). For the launchers of kernels that have those paths (the persistent TMA
// forward, the split forward and the Hopper backward).
template <typename Fn>
auto DispatchHopperActTanhApprox(const AttentionOptions& options, Fn&& fn) {
  if (options.tanh_approx && options.act == Activation::kSilu) {
    return fn.template operator()<HopperAct::kSiluTanhApprox>();
  }
  if (options.tanh_approx && options.act == Activation::kGeluTanh) {
    return fn.template operator()<HopperAct::kGeluTanhApprox>();
  }
  return DispatchHopperAct(options.act, static_cast<Fn&&>(fn));
}

// The special-function unit's tanh (MUFU.TANH). PTX ISA §9.7.3.22: maximum relative error 2^-11 over
// the whole range, ±1 at ±inf.
__device__ __forceinline__ float TanhApprox(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// P = act(S) of one step of BN keys starting at key j0, in place (post_scale applied, 0 outside the
// row's keys), or for softmax the log2-scaled scores (-inf outside) fed to the online softmax, which
// replaces them by their exp2 and sets `rescale`, its factor for O. `masked`: some key of the step
// may lie outside a row's range (only then are the ranges tested). The cp.async warp-specialised
// forward's; the TMA and split forwards run forward_tma_elementwise.cuh's leaner form.
template <HopperAct kAct, int BN>
__device__ __forceinline__ void ScoresToP(float (&s4)[BN / 8][4], int j0, bool masked, int lane_t,
                                          const RowKeyRange (&keys)[2], float score_scale,
                                          const ProblemParams& pr, Log2Softmax& online, float (&rescale)[2]) {
  if constexpr (kAct == HopperAct::kSoftmax) {
#pragma unroll
    for (int n = 0; n < BN / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float x = s4[n][e] * score_scale;
        const int j = j0 + n * 8 + 2 * lane_t + (e & 1);
        s4[n][e] = (masked && !Contains(keys[e >> 1], j)) ? -INFINITY : x;
      }
    }
    online.Step(s4, rescale);
  } else {
#pragma unroll
    for (int n = 0; n < BN / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float x = s4[n][e] * score_scale;
        float y;
        if constexpr (kAct == HopperAct::kSilu) {
          y = FastSilu(x);
        } else if constexpr (kAct == HopperAct::kGeluTanh) {
          y = FastGeluTanh(x);
        } else {
          y = ActValue(pr.options.act, x);
        }
        y *= pr.post_scale;
        const int j = j0 + n * 8 + 2 * lane_t + (e & 1);
        s4[n][e] = (masked && !Contains(keys[e >> 1], j)) ? 0.f : y;
      }
    }
  }
}

// O (one warpgroup's 64 x 128 fp32 accumulator) times the online softmax's factor of each of this
// thread's two rows (rescale[0]: c0/c1, rescale[1]: c2/c3), before P V adds the step's terms.
__device__ __forceinline__ void RescaleHopperRows(float (&acc)[64], const float (&rescale)[2]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    acc[4 * i + 0] *= rescale[0];
    acc[4 * i + 1] *= rescale[0];
    acc[4 * i + 2] *= rescale[1];
    acc[4 * i + 3] *= rescale[1];
  }
}

// P (fp32 accumulator layout) rounded to the input type as the register A operand of O += P V.
template <ElementType E, int BN>
__device__ __forceinline__ void PToOperand(float (&s4)[BN / 8][4], uint32_t (&pa)[BN / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) CToA<E>(s4[2 * kk], s4[2 * kk + 1], pa[kk]);
}

// The epilogue of one warp's 2 x 16 rows: O = acc (softmax: / row sum, then post_scale; an empty row
// (no valid key) has O = 0 and LSE = -inf) rounded to the output type, and the softmax's
// LSE. `row`: this thread's two rows in the tile; rows >= q_rows lie past the sequence's end.
// kRcp (the TMA forward's softmax): the normalisation as one multiply per element by
// post / row_sum, formed once per row, instead of dividing each of a thread's 64 outputs (an IEEE
// division with its slow-path check, ~9 instructions each, as many as a K/V step's elementwise
// work on cross attention's two-step tiles). Two roundings either way (v / l, then * post; or
// post / l, then * v), before O is rounded to 16 bits.
template <ElementType E, HopperAct kAct, bool kRcp = false>
__device__ __forceinline__ void StoreHopperRows(const float (&acc)[64], Log2Softmax& online, const int (&row)[2],
                                                int q_rows, int64_t first_out_row, const ForwardParams& p, int h,
                                                int lane_t) {
  constexpr bool softmax = kAct == HopperAct::kSoftmax;
  constexpr int D = kHopperHeadDim;
  const ProblemParams& pr = p.problem;
  float row_sum[2] = {1.f, 1.f};
  float lse[2] = {-INFINITY, -INFINITY};
  float scale[2] = {1.f, 1.f};  // kRcp: post / row_sum
  if constexpr (softmax) {
    online.Finish(row_sum, lse);
    if constexpr (kRcp) {
#pragma unroll
      for (int r = 0; r < 2; ++r) scale[r] = row_sum[r] > 0.f ? pr.post_scale / row_sum[r] : 0.f;
    }
  }
  // The thread's outputs, rounded and packed in pairs: w[r][i] holds columns 8i + 2t, 8i + 2t + 1
  // of its row r.
  uint32_t w[2][D / 8];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      float v0 = acc[4 * i + 2 * r];
      float v1 = acc[4 * i + 2 * r + 1];
      if constexpr (softmax && kRcp) {
        v0 *= scale[r];
        v1 *= scale[r];
      } else if constexpr (softmax) {
        v0 = row_sum[r] > 0.f ? (v0 / row_sum[r]) * pr.post_scale : 0.f;
        v1 = row_sum[r] > 0.f ? (v1 / row_sum[r]) * pr.post_scale : 0.f;
      }
      w[r][i] = PackRounded<E>(v0, v1);
    }
  }
  // Whole 16-byte blocks per thread (QuadTranspose4) where the launch allows 16-byte stores
  // (ForwardParams::wide_o_stores): a warp's store instruction then writes whole 32-byte sectors (64
  // contiguous bytes of each of 8 rows), where 4-byte stores wrote half sectors and took four times
  // as many instructions, whose queue the next item's first loads waited behind (Nsight Compute on
  // cross_gdpa_gelu, tools/bench/NOTES.md). A launch-uniform branch; the shuffles run in
  // every lane, the stores only in valid rows.
  if (p.wide_o_stores != 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int k = 0; k < D / 32; ++k) {
        uint32_t block[4] = {w[r][4 * k], w[r][4 * k + 1], w[r][4 * k + 2], w[r][4 * k + 3]};
        QuadTranspose4(block, lane_t);  // block: columns 8 (4k + t) .. 8 (4k + t) + 7 of row r
        if (row[r] < q_rows) {
          uint16_t* o = p.o + ((first_out_row + row[r]) * pr.heads + h) * D + (4 * k + lane_t) * 8;
          *reinterpret_cast<uint4*>(o) = make_uint4(block[0], block[1], block[2], block[3]);
        }
      }
    }
  } else {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (row[r] >= q_rows) continue;
      uint16_t* o = p.o + ((first_out_row + row[r]) * pr.heads + h) * D + 2 * lane_t;
#pragma unroll
      for (int i = 0; i < D / 8; ++i) *reinterpret_cast<uint32_t*>(o + i * 8) = w[r][i];
    }
  }
  if (softmax && lane_t == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (row[r] < q_rows) p.lse[h * pr.out_rows + first_out_row + row[r]] = lse[r];
    }
  }
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_FORWARD_HOPPER_COMMON_CUH_
