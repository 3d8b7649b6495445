// GELU in its erf form (reference/model/ops.h) and its derivative, per value in
// fp32: what the elementwise GELU kernels (layer_norm.cu) and the fused
// feed-forward backward (ffn_fused_kernels.cuh) both evaluate, so that the two
// give the same bits. Device code, also compiled by a host compiler for the CPU
// emulation (tests/gpu/emulation, through its cuda_shim.h).
#ifndef GEMTB_GPU_TRAIN_GELU_CUH_
#define GEMTB_GPU_TRAIN_GELU_CUH_

#include <cmath>

namespace gemtb::gpu::train {

// Phi(x) = erfc(-x / sqrt 2) / 2, as ops.h writes it.
__device__ __forceinline__ float NormalCdf(float x) { return 0.5f * erfcf(__fmul_rn(-x, 0.70710678118654752440f)); }

__device__ __forceinline__ float GeluOf(float v) { return __fmul_rn(v, NormalCdf(v)); }

__device__ __forceinline__ float GeluGradOf(float v) {
  const float pdf = __fmul_rn(0.39894228040143267794f, expf(__fmul_rn(-0.5f, __fmul_rn(v, v))));
  return __fadd_rn(NormalCdf(v), __fmul_rn(v, pdf));
}

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_GELU_CUH_
