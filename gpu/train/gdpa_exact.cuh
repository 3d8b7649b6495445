// GDPA's fp32 arithmetic as the reference rounds it (reference/model/gdpa.h, ops.h): a score's dot
// product summed in order with every product and sum rounded on its own (no FMA contraction), the
// overflow-safe sigmoid, and the weight and score gradient around one sigmoid. gdpa.cu's fp32 kernels
// and the short-side kernels (gdpa_short_side_kernels.cuh) both compute with these, which is why the
// two give the same bytes from the same values. Device code, also built by a host compiler for the CPU
// emulation (tests/gpu/emulation/cuda_shim.h).
#ifndef GEMTB_GPU_TRAIN_GDPA_EXACT_CUH_
#define GEMTB_GPU_TRAIN_GDPA_EXACT_CUH_

#include <math.h>

namespace gemtb::gpu::train::gdpa {

// a . b summed over c = 0 .. kDh-1 in order from 0, as the reference's Scores; element c of a at
// a[c * kStrideA], of b at b[c * kStrideB].
template <int kDh, int kStrideA = 1, int kStrideB = 1>
__device__ __forceinline__ float Dot(const float* a, const float* b) {
  float z = 0.0f;
#pragma unroll
  for (int c = 0; c < kDh; ++c) z = __fadd_rn(z, __fmul_rn(a[c * kStrideA], b[c * kStrideB]));
  return z;
}

// reference/model/ops.h's overflow-safe sigmoid: exp of a non-positive argument only.
__device__ __forceinline__ float Sigmoid(float x) {
  if (x >= 0.0f) return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x)));
  const float e = expf(x);
  return __fdiv_rn(e, __fadd_rn(1.0f, e));
}

// post * silu(z), written as the reference's backward writes it around one sigmoid.
__device__ __forceinline__ float Weight(float z, float sg, float post) { return __fmul_rn(post, __fmul_rn(z, sg)); }

// dL/dz = post * silu'(z) * dp, silu'(z) = sg (1 + z (1 - sg)).
__device__ __forceinline__ float ScoreGrad(float z, float sg, float dp, float post) {
  const float grad = __fmul_rn(sg, __fadd_rn(1.0f, __fmul_rn(z, __fsub_rn(1.0f, sg))));
  return __fmul_rn(__fmul_rn(post, grad), dp);
}

}  // namespace gemtb::gpu::train::gdpa

#endif  // GEMTB_GPU_TRAIN_GDPA_EXACT_CUH_
