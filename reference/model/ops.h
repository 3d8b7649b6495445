// Small dense kernels for the reference model, templated on the scalar (float for training, double
// for the gradient check and the all-fp64 mode). Row-major, plain loops.
//
// Why our own loops and not Eigen: every sum here runs in an order fixed by the shapes alone, so the
// result is the same bits on any machine of the pinned ISA and for any thread count. The inner loops
// run over the output's columns (saxpy form), which the compiler vectorises without reassociating a
// sum. Convention (as llm.c): parameter and input gradients accumulate with +=, activations use =.
#ifndef GEMTB_REFERENCE_MODEL_OPS_H_
#define GEMTB_REFERENCE_MODEL_OPS_H_

#include <cmath>
#include <cstddef>

namespace gemtb::reference::model {

// y[n,out] = x[n,in] * w[in,out] (+ b[out] if b).
template <typename T>
void MatMul(const T* x, int n, int in, const T* w, int out, const T* b, T* y) {
  for (int t = 0; t < n; ++t) {
    T* yr = y + static_cast<size_t>(t) * out;
    for (int o = 0; o < out; ++o) yr[o] = b ? b[o] : T(0);
    const T* xr = x + static_cast<size_t>(t) * in;
    for (int i = 0; i < in; ++i) {
      const T a = xr[i];
      const T* wr = w + static_cast<size_t>(i) * out;
      for (int o = 0; o < out; ++o) yr[o] += a * wr[o];
    }
  }
}

// dx[n,in] += dy[n,out] * w[in,out]^T, through a transposed copy so the inner loop is a saxpy.
template <typename T>
void MatMulBackwardInput(const T* dy, int n, int out, const T* w, int in, T* dx, T* scratch_wt) {
  for (int i = 0; i < in; ++i)
    for (int o = 0; o < out; ++o) scratch_wt[static_cast<size_t>(o) * in + i] = w[static_cast<size_t>(i) * out + o];
  for (int t = 0; t < n; ++t) {
    T* dxr = dx + static_cast<size_t>(t) * in;
    const T* dyr = dy + static_cast<size_t>(t) * out;
    for (int o = 0; o < out; ++o) {
      const T g = dyr[o];
      const T* wr = scratch_wt + static_cast<size_t>(o) * in;
      for (int i = 0; i < in; ++i) dxr[i] += g * wr[i];
    }
  }
}

// dw[in,out] += x[n,in]^T * dy[n,out]; db[out] += sum_t dy[t] (if db). Tokens in increasing order.
template <typename T>
void MatMulBackwardWeight(const T* x, const T* dy, int n, int in, int out, T* dw, T* db) {
  for (int t = 0; t < n; ++t) {
    const T* xr = x + static_cast<size_t>(t) * in;
    const T* dyr = dy + static_cast<size_t>(t) * out;
    for (int i = 0; i < in; ++i) {
      const T a = xr[i];
      T* dwr = dw + static_cast<size_t>(i) * out;
      for (int o = 0; o < out; ++o) dwr[o] += a * dyr[o];
    }
    if (db)
      for (int o = 0; o < out; ++o) db[o] += dyr[o];
  }
}

template <typename T>
T Sigmoid(T x) {
  // Overflow-safe: exp of a non-positive argument only.
  if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}

// GELU (erf form) and its derivative Phi(x) + x phi(x).
template <typename T>
T Gelu(T x) {
  return T(0.5) * x * std::erfc(-x * T(0.70710678118654752440));
}
template <typename T>
T GeluGrad(T x) {
  const T cdf = T(0.5) * std::erfc(-x * T(0.70710678118654752440));
  const T pdf = T(0.39894228040143267794) * std::exp(T(-0.5) * x * x);
  return cdf + x * pdf;
}

// SiLU x*sigma(x) and its derivative sigma(x)(1 + x(1 - sigma(x))).
template <typename T>
T Silu(T x) {
  return x * Sigmoid(x);
}
template <typename T>
T SiluGrad(T x) {
  const T s = Sigmoid(x);
  return s * (T(1) + x * (T(1) - s));
}

}  // namespace gemtb::reference::model

#endif  // GEMTB_REFERENCE_MODEL_OPS_H_
