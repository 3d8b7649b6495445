// The elementwise step of the backward (the emulate mode's casts) for one (query i, key j) pair,
// shared by the dK/dV and the dQ kernels so that both see the same P and dS:
//   softmax:   P̂ = exp(S - LSE_i),          P = post * P̂,       dS = P̂ (post * dP - D_i)
//   pointwise: P = post * act(S),            dS = post * act'(S) * dP
// Masked pairs give exactly P = dS = 0 (never computed: exp(S - (-inf)) of an empty row is inf).
#ifndef GEMTB_GPU_ATTENTION_BACKWARD_PAIR_CUH_
#define GEMTB_GPU_ATTENTION_BACKWARD_PAIR_CUH_

#include "gpu/attention/activation.cuh"
#include "gpu/attention/params.h"

namespace gemtb::gpu {

struct PairGradient {
  float p;   // for dV = Pᵀ dO
  float ds;  // for dQ = dS K and dK = dSᵀ Q (pre_scale applied to the matmul results)
};

// `qk` is the fp32 dot q_i . k_j, `dp` the fp32 dot dO_i . v_j.
__device__ __forceinline__ PairGradient BackwardPair(const ProblemParams& pr, bool valid, float qk,
                                                     float dp, float lse, float d_i) {
  if (!valid) return {0.f, 0.f};
  const float s = qk * pr.pre_scale;
  if (pr.options.act == Activation::kSoftmax) {
    const float p_hat = expf(s - lse);
    return {pr.post_scale * p_hat, p_hat * (pr.post_scale * dp - d_i)};
  }
  return {pr.post_scale * ActValue(pr.options.act, s),
          (pr.post_scale * ActDerivative(pr.options.act, s)) * dp};
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_BACKWARD_PAIR_CUH_
