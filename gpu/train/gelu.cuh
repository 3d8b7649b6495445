// GELU in its erf form (reference/model/ops.h: x Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2) and its
// derivative, per value in fp32, in two evaluations:
// - GeluOf / GeluGradOf, by erfcf and expf (a few ulps each): what the kernels with fp32 results take
//   (the elementwise GELU kernels of layer_norm.cu at fp32).
// - GeluOfBf16 / GeluGradOfBf16, for kernels whose result is stored in bf16 (the elementwise kernels
//   at bf16, GELU's backward with column sums in column_sums_kernels.cuh, the fused feed-forward
//   backward in ffn_fused_kernels.cuh; all of them take these, so they give the same bits). Phi's lower
//   tail is exp(-x^2 / 2) t P(t), t = 1 / (1 + q |x|), with P a polynomial of degree 8, so a value costs
//   one exp (shared with the derivative's density), one reciprocal and eight FMAs, the exponential and
//   the reciprocal the hardware's (ex2.approx.ftz, __fdividef): a fraction of the instructions of erfcf and a
//   second expf, which had bound the bf16 kernels by issue, not bytes. P interpolates
//   erfc(z) exp(z^2) / (2 t) at Chebyshev nodes of t for z = |x| / sqrt 2 in [0, 10] (beyond,
//   exp(-x^2 / 2) is below fp32's normal range). Evaluated with an exact exponential and reciprocal
//   (the CPU emulation's), the results are within 1e-6 of their magnitude (the derivative: of
//   Phi + |x| phi), plus what rounding x^2 / 2 moves the exponential by, of the fp64 definition for
//   |x| <= 12 (tests/gpu/emulation/gelu_emulated_test.cc); the hardware exp2 adds 2 ulps and |x^2 / 2| ulps (its
//   argument scaled to base 2), by that arithmetic at most 6e-6 where the result is normal. That is a thousand times finer
//   than bf16's rounding (4e-3), but not erfcf's bits, and the oracle check of the fp32 trainer follows a
//   trajectory that any change of bits moves (its held-out NE), so the fp32 kernels keep erfcf.
// Device code, also compiled by a host compiler for the CPU emulation (tests/gpu/emulation, through its
// cuda_shim.h).
#ifndef GEMTB_GPU_TRAIN_GELU_CUH_
#define GEMTB_GPU_TRAIN_GELU_CUH_

#include <cmath>

namespace gemtb::gpu::train {

namespace gelu {

// t = 1 / (1 + kTailQ |x|); P(t) = kTail0 + kTail1 t + ... + kTail8 t^8.
constexpr float kTailQ = 0.26870056986808777f;
constexpr float kTail0 = 0.10720819234848022f, kTail1 = 0.10691360384225845f, kTail2 = 0.10227907449007034f,
                kTail3 = 0.06806875020265579f, kTail4 = 0.11791019141674042f, kTail5 = -0.08483748883008957f,
                kTail6 = 0.18543869256973267f, kTail7 = -0.13279615342617035f, kTail8 = 0.029815131798386574f;

// 1 / sqrt(2 pi).
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

// exp(-x^2 / 2), the Gaussian's kernel shared by Phi's tail and the density, by the hardware's
// exponential (as __expf: 2 ulps, plus |x^2 / 2| ulps from scaling the argument to base 2; at most 6e-6
// of itself where the result is above fp32's normal range, against bf16's 4e-3). On the GPU the exp2 runs
// with denormals flushed (ex2.approx.ftz): for |x| > 13.2, where exp(-x^2 / 2) is below fp32's normal
// range, the kernel is 0 instead of a denormal (GELU and its derivative there differ from 0 and from 1
// by less than 2^-122), and __expf's range fix-up (a compare and two multiplies a value) is gone.
__device__ __forceinline__ float GaussianKernel(float x) {
  const float a = __fmul_rn(-0.5f, __fmul_rn(x, x));
#ifdef __CUDA_ARCH__
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(__fmul_rn(a, 1.44269504088896341f)));
  return e;
#else
  return __expf(a);
#endif
}

// Phi(x) given e = GaussianKernel(x): the tail Phi(-|x|) = e t P(t), and 1 - tail for x >= 0.
__device__ __forceinline__ float NormalCdf(float x, float e) {
  const float t = __fdividef(1.0f, __fmaf_rn(kTailQ, fabsf(x), 1.0f));  // the hardware's reciprocal, 1 ulp
  float p = __fmaf_rn(kTail8, t, kTail7);
  p = __fmaf_rn(p, t, kTail6);
  p = __fmaf_rn(p, t, kTail5);
  p = __fmaf_rn(p, t, kTail4);
  p = __fmaf_rn(p, t, kTail3);
  p = __fmaf_rn(p, t, kTail2);
  p = __fmaf_rn(p, t, kTail1);
  p = __fmaf_rn(p, t, kTail0);
  const float tail = __fmul_rn(e, __fmul_rn(t, p));
  return x < 0.0f ? tail : __fsub_rn(1.0f, tail);
}

}  // namespace gelu

// Phi(x) = erfc(-x / sqrt 2) / 2, as ops.h writes it.
__device__ __forceinline__ float NormalCdf(float x) { return 0.5f * erfcf(__fmul_rn(-x, 0.70710678118654752440f)); }

__device__ __forceinline__ float GeluOf(float v) { return __fmul_rn(v, NormalCdf(v)); }

__device__ __forceinline__ float GeluGradOf(float v) {
  const float pdf = __fmul_rn(gelu::kInvSqrt2Pi, expf(__fmul_rn(-0.5f, __fmul_rn(v, v))));
  return __fadd_rn(NormalCdf(v), __fmul_rn(v, pdf));
}

__device__ __forceinline__ float GeluOfBf16(float v) {
  return __fmul_rn(v, gelu::NormalCdf(v, gelu::GaussianKernel(v)));
}

// Phi(v) + v phi(v), phi(v) = e / sqrt(2 pi).
__device__ __forceinline__ float GeluGradOfBf16(float v) {
  const float e = gelu::GaussianKernel(v);
  return __fadd_rn(gelu::NormalCdf(v, e), __fmul_rn(v, __fmul_rn(gelu::kInvSqrt2Pi, e)));
}

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_GELU_CUH_
