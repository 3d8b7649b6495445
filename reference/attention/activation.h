// Attention activations and their exact derivatives, in fp64.
//
// Kinks take the left derivative: relu'(0) = 0, leaky'(0) = 0.01, hardswish'(-3) = 0,
// hardswish'(3) = 1.5. gelu is evaluated as x/2 * erfc(-x/sqrt 2), which keeps its relative accuracy
// for large negative x where 1 + erf(x/sqrt 2) would cancel; the logistic is overflow-safe.
#ifndef GEMTB_REFERENCE_ATTENTION_ACTIVATION_H_
#define GEMTB_REFERENCE_ATTENTION_ACTIVATION_H_

#include <cmath>

#include "model/attention/attention_options.h"

namespace gemtb::reference {

inline constexpr double kSqrt2 = 1.41421356237309504880;
inline constexpr double kSqrt2OverPi = 0.79788456080286535588;   // c of gelu_tanh
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;    // 1/sqrt(2 pi)
inline constexpr double kGeluTanhA = 0.044715;
inline constexpr double kLeakySlope = 0.01;

inline double Logistic(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

inline double NormalCdf(double x) { return 0.5 * std::erfc(-x / kSqrt2); }
inline double NormalPdf(double x) { return kInvSqrt2Pi * std::exp(-0.5 * x * x); }

// f(x) for the pointwise activations (softmax is not pointwise and is handled by the caller).
inline double ActivationValue(Activation act, double x) {
  switch (act) {
    case Activation::kIdentity: return x;
    case Activation::kGelu: return x * NormalCdf(x);
    case Activation::kGeluTanh: {
      const double t = std::tanh(kSqrt2OverPi * (x + kGeluTanhA * x * x * x));
      return 0.5 * x * (1.0 + t);
    }
    case Activation::kSilu: return x * Logistic(x);
    case Activation::kRelu: return x > 0 ? x : 0.0;
    case Activation::kReluSquare: return x > 0 ? x * x : 0.0;
    case Activation::kLeakyRelu: return x > 0 ? x : kLeakySlope * x;
    case Activation::kHardswish: {
      const double r = std::fmin(std::fmax(x + 3.0, 0.0), 6.0);
      return x * r / 6.0;
    }
    case Activation::kSoftmax: break;
  }
  return 0.0;
}

// f'(x), left derivative at kinks.
inline double ActivationDerivative(Activation act, double x) {
  switch (act) {
    case Activation::kIdentity: return 1.0;
    case Activation::kGelu: return NormalCdf(x) + x * NormalPdf(x);
    case Activation::kGeluTanh: {
      const double t = std::tanh(kSqrt2OverPi * (x + kGeluTanhA * x * x * x));
      return 0.5 * (1.0 + t) +
             0.5 * x * (1.0 - t * t) * (kSqrt2OverPi + 3.0 * kGeluTanhA * kSqrt2OverPi * x * x);
    }
    case Activation::kSilu: {
      const double s = Logistic(x);
      return s * (1.0 + x * (1.0 - s));
    }
    case Activation::kRelu: return x > 0 ? 1.0 : 0.0;
    case Activation::kReluSquare: return x > 0 ? 2.0 * x : 0.0;
    case Activation::kLeakyRelu: return x > 0 ? 1.0 : kLeakySlope;
    case Activation::kHardswish:
      if (x <= -3.0) return 0.0;
      if (x <= 3.0) return x / 3.0 + 0.5;
      return 1.0;
    case Activation::kSoftmax: break;
  }
  return 0.0;
}

}  // namespace gemtb::reference

#endif  // GEMTB_REFERENCE_ATTENTION_ACTIVATION_H_
