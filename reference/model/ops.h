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
#include <cstring>

namespace gemtb::reference::model {

// Every kernel below works on four rows at a time where it can: each output element still sums its
// terms in the same order as the one-row loop (so the bits do not change), but a loaded weight row
// serves four outputs.

// y[n,out] = x[n,in] * w[in,out] (+ b[out] if b).
template <typename T>
void MatMul(const T* x, int n, int in, const T* w, int out, const T* b, T* y) {
  int t = 0;
  for (; t + 4 <= n; t += 4) {
    T* __restrict__ y0 = y + static_cast<size_t>(t) * out;
    T* __restrict__ y1 = y0 + out;
    T* __restrict__ y2 = y1 + out;
    T* __restrict__ y3 = y2 + out;
    for (int o = 0; o < out; ++o) y0[o] = y1[o] = y2[o] = y3[o] = b ? b[o] : T(0);
    const T* x0 = x + static_cast<size_t>(t) * in;
    for (int i = 0; i < in; ++i) {
      const T a0 = x0[i], a1 = x0[in + i], a2 = x0[2 * in + i], a3 = x0[3 * in + i];
      const T* __restrict__ wr = w + static_cast<size_t>(i) * out;
      for (int o = 0; o < out; ++o) {
        const T wv = wr[o];
        y0[o] += a0 * wv;
        y1[o] += a1 * wv;
        y2[o] += a2 * wv;
        y3[o] += a3 * wv;
      }
    }
  }
  for (; t < n; ++t) {
    T* __restrict__ yr = y + static_cast<size_t>(t) * out;
    for (int o = 0; o < out; ++o) yr[o] = b ? b[o] : T(0);
    const T* xr = x + static_cast<size_t>(t) * in;
    for (int i = 0; i < in; ++i) {
      const T a = xr[i];
      const T* __restrict__ wr = w + static_cast<size_t>(i) * out;
      for (int o = 0; o < out; ++o) yr[o] += a * wr[o];
    }
  }
}

// dx[n,in] += dy[n,out] * w[in,out]^T, through a transposed copy so the inner loop is a saxpy.
template <typename T>
void MatMulBackwardInput(const T* dy, int n, int out, const T* w, int in, T* dx, T* scratch_wt) {
  for (int i = 0; i < in; ++i)
    for (int o = 0; o < out; ++o) scratch_wt[static_cast<size_t>(o) * in + i] = w[static_cast<size_t>(i) * out + o];
  int t = 0;
  for (; t + 4 <= n; t += 4) {
    T* __restrict__ d0 = dx + static_cast<size_t>(t) * in;
    T* __restrict__ d1 = d0 + in;
    T* __restrict__ d2 = d1 + in;
    T* __restrict__ d3 = d2 + in;
    const T* g0 = dy + static_cast<size_t>(t) * out;
    for (int o = 0; o < out; ++o) {
      const T a0 = g0[o], a1 = g0[out + o], a2 = g0[2 * out + o], a3 = g0[3 * out + o];
      const T* __restrict__ wr = scratch_wt + static_cast<size_t>(o) * in;
      for (int i = 0; i < in; ++i) {
        const T wv = wr[i];
        d0[i] += a0 * wv;
        d1[i] += a1 * wv;
        d2[i] += a2 * wv;
        d3[i] += a3 * wv;
      }
    }
  }
  for (; t < n; ++t) {
    T* __restrict__ dxr = dx + static_cast<size_t>(t) * in;
    const T* dyr = dy + static_cast<size_t>(t) * out;
    for (int o = 0; o < out; ++o) {
      const T g = dyr[o];
      const T* __restrict__ wr = scratch_wt + static_cast<size_t>(o) * in;
      for (int i = 0; i < in; ++i) dxr[i] += g * wr[i];
    }
  }
}

// dx[n,in] += dy[n,out] * w[in,out]^T from wt = w^T [out,in] made beforehand (the same bits as above).
template <typename T>
void MatMulBackwardInputPretransposed(const T* dy, int n, int out, const T* wt, int in, T* dx) {
  for (int t = 0; t < n; ++t) {
    T* __restrict__ dxr = dx + static_cast<size_t>(t) * in;
    const T* dyr = dy + static_cast<size_t>(t) * out;
    for (int o = 0; o < out; ++o) {
      const T g = dyr[o];
      const T* __restrict__ wr = wt + static_cast<size_t>(o) * in;
      for (int i = 0; i < in; ++i) dxr[i] += g * wr[i];
    }
  }
}

// dw[in,out] += x[n,in]^T * dy[n,out]; db[out] += sum_t dy[t] (if db). Tokens in increasing order.
template <typename T>
void MatMulBackwardWeight(const T* x, const T* dy, int n, int in, int out, T* dw, T* db) {
  int t = 0;
  for (; t + 4 <= n; t += 4) {
    const T* x0 = x + static_cast<size_t>(t) * in;
    const T* __restrict__ g0 = dy + static_cast<size_t>(t) * out;
    const T* __restrict__ g1 = g0 + out;
    const T* __restrict__ g2 = g1 + out;
    const T* __restrict__ g3 = g2 + out;
    for (int i = 0; i < in; ++i) {
      const T a0 = x0[i], a1 = x0[in + i], a2 = x0[2 * in + i], a3 = x0[3 * in + i];
      T* __restrict__ dwr = dw + static_cast<size_t>(i) * out;
      for (int o = 0; o < out; ++o) {
        T v = dwr[o];
        v += a0 * g0[o];
        v += a1 * g1[o];
        v += a2 * g2[o];
        v += a3 * g3[o];
        dwr[o] = v;
      }
    }
    if (db)
      for (int o = 0; o < out; ++o) {
        T v = db[o];
        v += g0[o];
        v += g1[o];
        v += g2[o];
        v += g3[o];
        db[o] = v;
      }
  }
  for (; t < n; ++t) {
    const T* xr = x + static_cast<size_t>(t) * in;
    const T* __restrict__ dyr = dy + static_cast<size_t>(t) * out;
    for (int i = 0; i < in; ++i) {
      const T a = xr[i];
      T* __restrict__ dwr = dw + static_cast<size_t>(i) * out;
      for (int o = 0; o < out; ++o) dwr[o] += a * dyr[o];
    }
    if (db)
      for (int o = 0; o < out; ++o) db[o] += dyr[o];
  }
}

// ---- float fast path: register-tiled, the same bits as the loops above ---------------------------
//
// The training run spends most of its time in the three kernels above at float. Their saxpy form
// reloads and restores the four output rows for every input index; here a tile of R rows x 8
// columns stays in SSE registers (GCC vector extensions, separate multiply and add: the pinned ISA
// has no FMA and contraction is off) while the input index runs. Every output element still starts
// from the same value (bias, zero or its old value) and adds its products in increasing index order,
// one rounding each, so the bits equal the generic loops' (golden training vectors check this).
namespace ops_detail {

typedef float V4 __attribute__((vector_size(16)));
inline V4 Load4(const float* p) {
  V4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void Store4(float* p, V4 v) { std::memcpy(p, &v, sizeof(v)); }
inline V4 Splat4(float a) { return V4{a, a, a, a}; }

// For r < R, c < m: y[r*ldy + c] = start + sum_{k ascending} x[r*rs + k*ks] * w[k*m + c], where start is
// bias[c] (bias non-null), y's old value (accumulate) or 0.
// Columns from c0 on.
template <int R>
inline void TileRows(const float* x, ptrdiff_t rs, ptrdiff_t ks, int kn, const float* w, int m, float* y,
                     ptrdiff_t ldy, const float* bias, bool accumulate, int c0 = 0) {
  int c = c0;
  for (; c + 8 <= m; c += 8) {
    V4 acc[R][2];
    for (int r = 0; r < R; ++r)
      for (int h = 0; h < 2; ++h)
        acc[r][h] = bias ? Load4(bias + c + 4 * h) : accumulate ? Load4(y + r * ldy + c + 4 * h) : Splat4(0.0f);
    for (int k = 0; k < kn; ++k) {
      const V4 w0 = Load4(w + static_cast<ptrdiff_t>(k) * m + c), w1 = Load4(w + static_cast<ptrdiff_t>(k) * m + c + 4);
      for (int r = 0; r < R; ++r) {
        const V4 a = Splat4(x[r * rs + k * ks]);
        acc[r][0] += a * w0;
        acc[r][1] += a * w1;
      }
    }
    for (int r = 0; r < R; ++r)
      for (int h = 0; h < 2; ++h) Store4(y + r * ldy + c + 4 * h, acc[r][h]);
  }
  for (; c + 4 <= m; c += 4) {
    V4 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = bias ? Load4(bias + c) : accumulate ? Load4(y + r * ldy + c) : Splat4(0.0f);
    for (int k = 0; k < kn; ++k) {
      const V4 w0 = Load4(w + static_cast<ptrdiff_t>(k) * m + c);
      for (int r = 0; r < R; ++r) acc[r] += Splat4(x[r * rs + k * ks]) * w0;
    }
    for (int r = 0; r < R; ++r) Store4(y + r * ldy + c, acc[r]);
  }
  for (; c < m; ++c)
    for (int r = 0; r < R; ++r) {
      float v = bias ? bias[c] : accumulate ? y[r * ldy + c] : 0.0f;
      for (int k = 0; k < kn; ++k) v += x[r * rs + k * ks] * w[static_cast<ptrdiff_t>(k) * m + c];
      y[r * ldy + c] = v;
    }
}

// One row, 32 columns at a time: a single-token layer (the head, Wukong's MLP) streams a large w once per
// column tile, so the tile is as wide as the registers allow (each fetched cache line is used whole).
inline void OneRowWide(const float* x, ptrdiff_t ks, int kn, const float* w, int m, float* y, const float* bias,
                       bool accumulate) {
  int c = 0;
  for (; c + 32 <= m; c += 32) {
    V4 acc[8];
    for (int h = 0; h < 8; ++h) acc[h] = bias ? Load4(bias + c + 4 * h) : accumulate ? Load4(y + c + 4 * h) : Splat4(0.0f);
    for (int k = 0; k < kn; ++k) {
      const V4 a = Splat4(x[k * ks]);
      const float* wr = w + static_cast<ptrdiff_t>(k) * m + c;
      for (int h = 0; h < 8; ++h) acc[h] += a * Load4(wr + 4 * h);
    }
    for (int h = 0; h < 8; ++h) Store4(y + c + 4 * h, acc[h]);
  }
  TileRows<1>(x, 0, ks, kn, w, m, y, 0, bias, accumulate, c);
}

// All n rows: y[t, :] from x rows t*rs (element k at k*ks), in tiles of 4 rows and then single rows.
inline void Gemm(const float* x, ptrdiff_t rs, ptrdiff_t ks, int n, int kn, const float* w, int m, float* y,
                 const float* bias, bool accumulate) {
  int t = 0;
  for (; t + 4 <= n; t += 4) TileRows<4>(x + t * rs, rs, ks, kn, w, m, y + static_cast<ptrdiff_t>(t) * m, m, bias, accumulate);
  for (; t < n; ++t) OneRowWide(x + t * rs, ks, kn, w, m, y + static_cast<ptrdiff_t>(t) * m, bias, accumulate);
}

}  // namespace ops_detail

template <>
inline void MatMul<float>(const float* x, int n, int in, const float* w, int out, const float* b, float* y) {
  ops_detail::Gemm(x, in, 1, n, in, w, out, y, b, false);
}

template <>
inline void MatMulBackwardInput<float>(const float* dy, int n, int out, const float* w, int in, float* dx,
                                       float* scratch_wt) {
  for (int i = 0; i < in; ++i)
    for (int o = 0; o < out; ++o) scratch_wt[static_cast<size_t>(o) * in + i] = w[static_cast<size_t>(i) * out + o];
  ops_detail::Gemm(dy, out, 1, n, out, scratch_wt, in, dx, nullptr, true);
}

template <>
inline void MatMulBackwardInputPretransposed<float>(const float* dy, int n, int out, const float* wt, int in, float* dx) {
  ops_detail::Gemm(dy, out, 1, n, out, wt, in, dx, nullptr, true);
}

template <>
inline void MatMulBackwardWeight<float>(const float* x, const float* dy, int n, int in, int out, float* dw, float* db) {
  // dw[i, :] += sum_t x[t, i] dy[t, :]: rows i of x^T (stride 1 between rows, `in` between tokens).
  ops_detail::Gemm(x, 1, in, in, n, dy, out, dw, nullptr, true);
  if (db)
    for (int t = 0; t < n; ++t)
      for (int o = 0; o < out; ++o) db[o] += dy[static_cast<size_t>(t) * out + o];
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
