// Pointwise attention activations and their exact derivatives, in fp32 on the device; the same
// formulas as reference/attention/activation.h (erfc form of gelu, overflow-safe logistic, left
// derivatives at kinks: relu'(0) = 0, leaky'(0) = 0.01, hardswish'(-3) = 0, hardswish'(3) = 1.5).
// Softmax is not pointwise and lives in softmax.cuh. `act` is uniform across a launch, so the
// switch costs a predictable branch, not divergence.
#ifndef GEMTB_GPU_ATTENTION_ACTIVATION_CUH_
#define GEMTB_GPU_ATTENTION_ACTIVATION_CUH_

#include "model/attention/attention_options.h"

namespace gemtb::gpu {

inline constexpr float kInvSqrt2 = 0.70710678118654752440f;
inline constexpr float kSqrt2OverPi = 0.79788456080286535588f;
inline constexpr float kInvSqrt2Pi = 0.39894228040143267794f;
inline constexpr float kGeluTanhA = 0.044715f;
inline constexpr float kLeakySlope = 0.01f;

__device__ __forceinline__ float Logistic(float x) {
  if (x >= 0.f) return 1.f / (1.f + expf(-x));
  const float e = expf(x);
  return e / (1.f + e);
}

__device__ __forceinline__ float NormalCdf(float x) { return 0.5f * erfcf(-x * kInvSqrt2); }

// gelu_tanh's σ = sigmoid(2u) = (1 + tanh u) / 2 and 1 − σ, u = sqrt(2/pi) (x + a x³), each without a
// subtraction (1 + tanh u from tanhf cancels on the negative tail).
__device__ __forceinline__ void GeluTanhSigmoid(float x, float& sigma, float& one_minus) {
  const float u = kSqrt2OverPi * (x + kGeluTanhA * x * x * x);
  const float e = expf(-2.f * fabsf(u));
  const float r = 1.f / (1.f + e);
  sigma = u >= 0.f ? r : e * r;
  one_minus = u >= 0.f ? e * r : r;
}

__device__ __forceinline__ float ActValue(Activation act, float x) {
  switch (act) {
    case Activation::kIdentity: return x;
    case Activation::kGelu: return x * NormalCdf(x);
    case Activation::kGeluTanh: {
      float sigma, one_minus;
      GeluTanhSigmoid(x, sigma, one_minus);
      return x * sigma;
    }
    case Activation::kSilu: return x * Logistic(x);
    case Activation::kRelu: return x > 0.f ? x : 0.f;
    case Activation::kReluSquare: return x > 0.f ? x * x : 0.f;
    case Activation::kLeakyRelu: return x > 0.f ? x : kLeakySlope * x;
    case Activation::kHardswish: return x * fminf(fmaxf(x + 3.f, 0.f), 6.f) / 6.f;
    case Activation::kSoftmax: break;
  }
  return 0.f;
}

__device__ __forceinline__ float ActDerivative(Activation act, float x) {
  switch (act) {
    case Activation::kIdentity: return 1.f;
    case Activation::kGelu: return NormalCdf(x) + x * kInvSqrt2Pi * expf(-0.5f * x * x);
    case Activation::kGeluTanh: {
      float sigma, one_minus;
      GeluTanhSigmoid(x, sigma, one_minus);
      return sigma + 2.f * x * sigma * one_minus * (kSqrt2OverPi + 3.f * kGeluTanhA * kSqrt2OverPi * x * x);
    }
    case Activation::kSilu: {
      const float s = Logistic(x);
      return s * (1.f + x * (1.f - s));
    }
    case Activation::kRelu: return x > 0.f ? 1.f : 0.f;
    case Activation::kReluSquare: return x > 0.f ? 2.f * x : 0.f;
    case Activation::kLeakyRelu: return x > 0.f ? 1.f : kLeakySlope;
    case Activation::kHardswish:
      if (x <= -3.f) return 0.f;
      if (x <= 3.f) return x / 3.f + 0.5f;
      return 1.f;
    case Activation::kSoftmax: break;
  }
  return 0.f;
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_ACTIVATION_CUH_
