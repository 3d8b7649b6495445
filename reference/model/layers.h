// The reference model's layers, forward and backward side by side: Linear, LayerNorm,
// Gate, LCE (token-axis mixing), parameter-free per-head RMSNorm (QK-norm) and GELU. Each layer
// holds only the slices of the flat parameter array it owns (bound by name, model/description/gem_geometry.h); activations are caller-owned buffers.
// Backward accumulates into parameter and input gradients with +=.
#ifndef GEMTB_REFERENCE_MODEL_LAYERS_H_
#define GEMTB_REFERENCE_MODEL_LAYERS_H_

#include <cmath>
#include <string>
#include <vector>

#include "model/description/layer_params.h"
#include "reference/model/ops.h"
#include "reference/model/params.h"

namespace gemtb::reference::model {

// y[n,out] = x[n,in] W[in,out] + b.
struct Linear {
  ParamRef w, b;
  int in = 0, out = 0;

  static Linear Bind(const ParamLayout& layout, const std::string& name, int in, int out) {
    const gemtb::model::LinearSlices s = gemtb::model::LinearAt(layout, name, in, out);
    Linear l;
    l.in = in;
    l.out = out;
    l.w = s.w;
    l.b = s.b;
    return l;
  }
  template <typename T>
  void Forward(const ParamView<T>& p, const T* x, int n, T* y) const {
    MatMul(x, n, in, p.W(w), out, b.size ? p.W(b) : nullptr, y);
  }
  // dx may be null (input needs no gradient).
  template <typename T>
  void Backward(const ParamView<T>& p, const T* x, const T* dy, int n, T* dx, std::vector<T>& scratch) const {
    MatMulBackwardWeight(x, dy, n, in, out, p.G(w), b.size ? p.G(b) : nullptr);
    if (dx && p.wt) {
      MatMulBackwardInputPretransposed(dy, n, out, p.WT(w), in, dx);
    } else if (dx) {
      scratch.resize(static_cast<size_t>(in) * out);
      MatMulBackwardInput(dy, n, out, p.W(w), in, dx, scratch.data());
    }
  }
};

// Per row of `width`: y = (x - mean) * rstd * gamma + beta, biased variance, eps 1e-5.
struct LayerNorm {
  ParamRef gamma, beta;
  int width = 0;

  static LayerNorm Bind(const ParamLayout& layout, const std::string& name, int width) {
    const gemtb::model::LayerNormSlices s = gemtb::model::LayerNormAt(layout, name, width);
    LayerNorm l;
    l.width = width;
    l.gamma = s.gamma;
    l.beta = s.beta;
    return l;
  }
  // xhat [n,width] and rstd [n] are saved for backward.
  template <typename T>
  void Forward(const ParamView<T>& p, const T* x, int n, T* y, T* xhat, T* rstd) const {
    const T* g = p.W(gamma);
    const T* bt = p.W(beta);
    for (int t = 0; t < n; ++t) {
      const T* xr = x + static_cast<size_t>(t) * width;
      T mean = 0;
      for (int i = 0; i < width; ++i) mean += xr[i];
      mean /= T(width);
      T var = 0;
      for (int i = 0; i < width; ++i) var += (xr[i] - mean) * (xr[i] - mean);
      var /= T(width);
      const T r = T(1) / std::sqrt(var + T(1e-5));
      rstd[t] = r;
      T* hr = xhat + static_cast<size_t>(t) * width;
      T* yr = y + static_cast<size_t>(t) * width;
      for (int i = 0; i < width; ++i) {
        hr[i] = (xr[i] - mean) * r;
        yr[i] = hr[i] * g[i] + bt[i];
      }
    }
  }
  template <typename T>
  void Backward(const ParamView<T>& p, const T* xhat, const T* rstd, const T* dy, int n, T* dx) const {
    const T* g = p.W(gamma);
    T* dg = p.G(gamma);
    T* db = p.G(beta);
    for (int t = 0; t < n; ++t) {
      const T* hr = xhat + static_cast<size_t>(t) * width;
      const T* dyr = dy + static_cast<size_t>(t) * width;
      T sum = 0, sum_h = 0;
      for (int i = 0; i < width; ++i) {
        const T dh = dyr[i] * g[i];
        sum += dh;
        sum_h += dh * hr[i];
        dg[i] += dyr[i] * hr[i];
        db[i] += dyr[i];
      }
      sum /= T(width);
      sum_h /= T(width);
      T* dxr = dx + static_cast<size_t>(t) * width;
      for (int i = 0; i < width; ++i) dxr[i] += rstd[t] * (dyr[i] * g[i] - sum - hr[i] * sum_h);
    }
  }
};

// Gate(Z) = Z * sigmoid(Z W_g + b_g).
struct Gate {
  Linear lin;

  static Gate Bind(const ParamLayout& layout, const std::string& name, int d) {
    return Gate{Linear::Bind(layout, name, d, d)};
  }
  // sig [n,d] is saved for backward.
  template <typename T>
  void Forward(const ParamView<T>& p, const T* z, int n, T* y, T* sig) const {
    lin.Forward(p, z, n, sig);
    const size_t count = static_cast<size_t>(n) * lin.out;
    for (size_t e = 0; e < count; ++e) {
      sig[e] = Sigmoid(sig[e]);
      y[e] = z[e] * sig[e];
    }
  }
  template <typename T>
  void Backward(const ParamView<T>& p, const T* z, const T* sig, const T* dy, int n, T* dz, std::vector<T>& scratch) const {
    const size_t count = static_cast<size_t>(n) * lin.out;
    std::vector<T> da(count);
    for (size_t e = 0; e < count; ++e) {
      da[e] = dy[e] * z[e] * sig[e] * (T(1) - sig[e]);
      dz[e] += dy[e] * sig[e];
    }
    lin.Backward(p, z, da.data(), n, dz, scratch);
  }
};

// LCE: learned mixing along the token axis, y[n_out,d] = M[n_out,n_in] x[n_in,d] (no bias).
struct TokenMix {
  ParamRef m;
  int n_in = 0, n_out = 0, d = 0;

  static TokenMix Bind(const ParamLayout& layout, const std::string& name, int n_in, int n_out, int d) {
    TokenMix l;
    l.n_in = n_in;
    l.n_out = n_out;
    l.d = d;
    l.m = gemtb::model::TokenMixAt(layout, name, n_in, n_out).m;
    return l;
  }
  template <typename T>
  void Forward(const ParamView<T>& p, const T* x, T* y) const {
    MatMul(p.W(m), n_out, n_in, x, d, static_cast<const T*>(nullptr), y);
  }
  template <typename T>
  void Backward(const ParamView<T>& p, const T* x, const T* dy, T* dx) const {
    const T* mw = p.W(m);
    T* dm = p.G(m);
    for (int o = 0; o < n_out; ++o) {
      const T* dyr = dy + static_cast<size_t>(o) * d;
      for (int i = 0; i < n_in; ++i) {
        const T* xr = x + static_cast<size_t>(i) * d;
        T s = 0;
        for (int c = 0; c < d; ++c) s += dyr[c] * xr[c];
        dm[static_cast<size_t>(o) * n_in + i] += s;
        const T a = mw[static_cast<size_t>(o) * n_in + i];
        T* dxr = dx + static_cast<size_t>(i) * d;
        for (int c = 0; c < d; ++c) dxr[c] += a * dyr[c];
      }
    }
  }
};

// QK-norm: parameter-free RMSNorm of each head's vector (eps 1e-6), x [n, heads*dh] in place into y.
// rms_inv [n*heads] is saved for backward.
template <typename T>
void HeadRmsNormForward(const T* x, int n, int heads, int dh, T* y, T* rms_inv) {
  for (int r = 0; r < n * heads; ++r) {
    const T* xr = x + static_cast<size_t>(r) * dh;
    T ss = 0;
    for (int i = 0; i < dh; ++i) ss += xr[i] * xr[i];
    const T inv = T(1) / std::sqrt(ss / T(dh) + T(1e-6));
    rms_inv[r] = inv;
    T* yr = y + static_cast<size_t>(r) * dh;
    for (int i = 0; i < dh; ++i) yr[i] = xr[i] * inv;
  }
}
// dx += inv * (dy - y * mean(dy * y)).
template <typename T>
void HeadRmsNormBackward(const T* y, const T* rms_inv, const T* dy, int n, int heads, int dh, T* dx) {
  for (int r = 0; r < n * heads; ++r) {
    const T* yr = y + static_cast<size_t>(r) * dh;
    const T* dyr = dy + static_cast<size_t>(r) * dh;
    T s = 0;
    for (int i = 0; i < dh; ++i) s += dyr[i] * yr[i];
    s /= T(dh);
    T* dxr = dx + static_cast<size_t>(r) * dh;
    for (int i = 0; i < dh; ++i) dxr[i] += rms_inv[r] * (dyr[i] - yr[i] * s);
  }
}

template <typename T>
void GeluForward(const T* x, size_t count, T* y) {
  for (size_t e = 0; e < count; ++e) y[e] = Gelu(x[e]);
}
template <typename T>
void GeluBackward(const T* x, const T* dy, size_t count, T* dx) {
  for (size_t e = 0; e < count; ++e) dx[e] += dy[e] * GeluGrad(x[e]);
}

}  // namespace gemtb::reference::model

#endif  // GEMTB_REFERENCE_MODEL_LAYERS_H_
