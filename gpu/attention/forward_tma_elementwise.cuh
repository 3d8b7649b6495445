// The elementwise phase of the persistent TMA and split forwards (forward_hopper_tma_kernel.cuh,
// forward_hopper_split_kernel.cuh): S of one step to P, with fewer instructions per element than
// ScoresToP (forward_hopper_common.cuh, which the cp.async kernel keeps). ScoresToP's silu step holds
// ~23 warp instructions per element where ~6 do the arithmetic (tools/bench/NOTES.md); the rest
// comes from
//   - the mask: `masked && !Contains(...)` per element, if-converted by the compiler into predicate
//     shuffling (PLOP3, LOP3 on predicate words) that runs on full steps too. Here a full step has
//     no mask code at all; a boundary step runs one extra pass (two compares and a select per
//     element) in a branch of its own;
//   - non-ftz __expf / __fdividef (denormal range checks and scalings around each MUFU). Here
//     ex2.approx.ftz and rcp.approx.ftz: a denormal e^-x (x > 87) flushed to 0 gives silu = x, a
//     denormal quotient flushed to 0 lies below bf16's range of P anyway;
//   - separate pre_scale, log2(e) and post_scale multiplies. Here the constants are folded once per
//     launch: silu(pre s) post = (pre post s) * rcp(1 + ex2(-pre log2e s)), i.e. 2 FMUL, FADD and
//     two MUFU per element; softmax's exponent is one FFMA, s (pre log2e) - m, with the max taken
//     on the raw scores (m = c max(s) exactly, since rounding is monotonic, for c >= 0; a negative
//     scale and boundary steps scale first and take the max of the scaled scores).
// Same formulas as ScoresToP otherwise, so the check's tolerances (the GPU criteria) hold with the same
// margins: the differences are a few fp32 ulps before P is rounded to 16 bits.
#ifndef GEMTB_GPU_ATTENTION_FORWARD_TMA_ELEMENTWISE_CUH_
#define GEMTB_GPU_ATTENTION_FORWARD_TMA_ELEMENTWISE_CUH_

#include "gpu/attention/forward_hopper_common.cuh"

namespace gemtb::gpu {

__device__ __forceinline__ float Ex2Ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float RcpFtz(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

inline constexpr float kLog2e = 1.44269504088896340736f;

// Launch-uniform constants of the elementwise phase, computed once per CTA.
struct TmaElementwiseConstants {
  float exp_mul;   // softmax: pre log2e; silu: -pre log2e; gelu_tanh: -2 sqrt(2/pi) log2e pre;
                   // tanh.approx acts: the tanh argument's factor (silu pre / 2, gelu_tanh pre sqrt(2/pi))
  float p_mul;     // pointwise acts: pre post (silu), post (gelu_tanh, generic), pre post / 2 (tanh.approx
                   // acts); softmax: unused
  float pre;       // pre_scale (gelu_tanh's x, the generic act's argument)
  float cube_mul;  // gelu_tanh with tanh.approx: pre^3 sqrt(2/pi) 0.044715
};

template <HopperAct kAct>
__device__ __forceinline__ TmaElementwiseConstants MakeTmaElementwiseConstants(const ProblemParams& pr) {
  TmaElementwiseConstants c;
  c.pre = pr.pre_scale;
  c.cube_mul = 0.f;
  if constexpr (kAct == HopperAct::kSoftmax) {
    c.exp_mul = pr.pre_scale * kLog2e;
    c.p_mul = 1.f;
  } else if constexpr (kAct == HopperAct::kSilu) {
    c.exp_mul = -pr.pre_scale * kLog2e;
    c.p_mul = pr.pre_scale * pr.post_scale;
  } else if constexpr (kAct == HopperAct::kGeluTanh) {
    c.exp_mul = -2.f * kSqrt2OverPi * kLog2e;
    c.p_mul = pr.post_scale;
  } else if constexpr (kAct == HopperAct::kSiluTanhApprox) {
    c.exp_mul = 0.5f * pr.pre_scale;
    c.p_mul = 0.5f * pr.pre_scale * pr.post_scale;
  } else if constexpr (kAct == HopperAct::kGeluTanhApprox) {
    c.exp_mul = pr.pre_scale * kSqrt2OverPi;
    c.cube_mul = pr.pre_scale * pr.pre_scale * pr.pre_scale * (kSqrt2OverPi * kGeluTanhA);
    c.p_mul = 0.5f * pr.pre_scale * pr.post_scale;
  } else {
    c.exp_mul = 0.f;
    c.p_mul = pr.post_scale;
  }
  return c;
}

// Sets the pairs of a boundary step outside their row's keys to `fill`. Column n*8 + 2t + (e&1) of
// the step is key j0 + that; the row's range is shifted once so each element is two compares.
template <int BN>
__device__ __forceinline__ void MaskStep(float (&s4)[BN / 8][4], int j0, int lane_t, const RowKeyRange (&keys)[2],
                                         float fill) {
  int lo[2], hi[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    lo[r] = keys[r].begin - j0 - 2 * lane_t;
    hi[r] = keys[r].end - j0 - 2 * lane_t;
  }
#pragma unroll
  for (int n = 0; n < BN / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = n * 8 + (e & 1);
      const int r = e >> 1;
      s4[n][e] = (col >= lo[r] && col < hi[r]) ? s4[n][e] : fill;
    }
  }
}

// Online softmax step in the log2 domain on raw scores (Log2Softmax's state and finish, its order:
// max, unnormalised exp2, fp32 row sums, the rescale factor for O).
template <int BN>
__device__ __forceinline__ void SoftmaxStepTma(float (&s4)[BN / 8][4], bool masked, int j0, int lane_t,
                                               const RowKeyRange (&keys)[2], float exp_mul, Log2Softmax& online,
                                               float (&rescale)[2]) {
  float k = exp_mul;  // the exponent is s k - m
  float tile_max[2] = {-INFINITY, -INFINITY};
  if (masked || !(exp_mul >= 0.f)) {
    // Boundary step or a negative scale: scale, mask to -inf, max of the scaled scores.
#pragma unroll
    for (int n = 0; n < BN / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s4[n][e] *= exp_mul;
    }
    if (masked) MaskStep<BN>(s4, j0, lane_t, keys, -INFINITY);
#pragma unroll
    for (int n = 0; n < BN / 8; ++n) {
      tile_max[0] = fmaxf(tile_max[0], fmaxf(s4[n][0], s4[n][1]));
      tile_max[1] = fmaxf(tile_max[1], fmaxf(s4[n][2], s4[n][3]));
    }
    k = 1.f;
  } else {
    // Full step, scale >= 0: max of the raw scores, then scaled (exact: rounding is monotonic).
#pragma unroll
    for (int n = 0; n < BN / 8; ++n) {
      tile_max[0] = fmaxf(tile_max[0], fmaxf(s4[n][0], s4[n][1]));
      tile_max[1] = fmaxf(tile_max[1], fmaxf(s4[n][2], s4[n][3]));
    }
    tile_max[0] *= exp_mul;
    tile_max[1] *= exp_mul;
  }
  float neg_m[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float m_new = fmaxf(online.m[r], QuadMax(tile_max[r]));
    rescale[r] = online.m[r] == -INFINITY ? 0.f : Ex2Ftz(online.m[r] - m_new);
    neg_m[r] = m_new == -INFINITY ? 0.f : -m_new;  // an all-masked row: exp2(-inf - 0) = 0
    online.m[r] = m_new;
  }
  float sum[2] = {0.f, 0.f};
#pragma unroll
  for (int n = 0; n < BN / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s4[n][e] = Ex2Ftz(fmaf(s4[n][e], k, neg_m[e >> 1]));
      sum[e >> 1] += s4[n][e];
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) online.l[r] = online.l[r] * rescale[r] + sum[r];
}

// P = act(S) of one step of BN keys starting at key j0, in place (post_scale applied, 0 outside the
// row's keys), or for softmax the unnormalised exp2 with `rescale`, its factor for O. `masked`:
// some key of the step may lie outside a row's range (only then are the ranges tested).
template <HopperAct kAct, int BN>
__device__ __forceinline__ void ScoresToPTma(float (&s4)[BN / 8][4], int j0, bool masked, int lane_t,
                                             const RowKeyRange (&keys)[2], const TmaElementwiseConstants& c,
                                             const ProblemParams& pr, Log2Softmax& online, float (&rescale)[2]) {
  if constexpr (kAct == HopperAct::kSoftmax) {
    SoftmaxStepTma<BN>(s4, masked, j0, lane_t, keys, c.exp_mul, online, rescale);
  } else {
#pragma unroll
    for (int n = 0; n < BN / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float s = s4[n][e];
        float y;
        if constexpr (kAct == HopperAct::kSilu) {
          // silu(x) post = x post / (1 + 2^(-x log2e)), x = pre s.
          y = (s * c.p_mul) * RcpFtz(1.f + Ex2Ftz(s * c.exp_mul));
        } else if constexpr (kAct == HopperAct::kGeluTanh) {
          // gelu_tanh(x) = x sigmoid(2u), u = sqrt(2/pi) (x + a x^3) (FastGeluTanh's identity).
          const float x = s * c.pre;
          const float t = x * fmaf(x * x, kGeluTanhA * c.exp_mul, c.exp_mul);
          y = (x * c.p_mul) * RcpFtz(1.f + Ex2Ftz(t));
        } else if constexpr (kAct == HopperAct::kSiluTanhApprox) {
          // silu(x) post = h (1 + tanh(x / 2)), h = x post / 2: one MUFU per element.
          const float h = s * c.p_mul;
          y = fmaf(h, TanhApprox(s * c.exp_mul), h);
        } else if constexpr (kAct == HopperAct::kGeluTanhApprox) {
          // gelu_tanh(x) post = h (1 + tanh(u)), h = x post / 2, u = sqrt(2/pi) (x + a x^3) with x = pre s
          // folded into the constants: u = s (pre sqrt(2/pi) + pre^3 sqrt(2/pi) a s^2).
          const float u = s * fmaf(s * s, c.cube_mul, c.exp_mul);
          const float h = s * c.p_mul;
          y = fmaf(h, TanhApprox(u), h);
        } else {
          y = ActValue(pr.options.act, s * c.pre) * c.p_mul;
        }
        s4[n][e] = y;
      }
    }
    if (masked) MaskStep<BN>(s4, j0, lane_t, keys, 0.f);
  }
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_FORWARD_TMA_ELEMENTWISE_CUH_
