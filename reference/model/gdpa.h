// GDPA on one sample (jagged attention with act = SiLU, pre_scale 1, post_scale c) and
// interleaved RoPE, forward and backward, templated on the scalar.
//
// Why not call reference/attention directly: the model runs thousands of tiny per-sample attentions
// per step (2 heads x 16 dims, <= 130 tokens) in float, and the oracle's API converts every tensor
// to fp64 vectors and validates it per call. This small version is checked against the oracle
// (fp64, tolerance 1e-12) in tests/training/gdpa_test.cc.
//
// Layout as the oracle's: q [Lq, H*Dh], k and v [Lk, H*Dh], element (t, h, i) at (t*H + h)*Dh + i.
#ifndef GEMTB_REFERENCE_MODEL_GDPA_H_
#define GEMTB_REFERENCE_MODEL_GDPA_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "model/attention/rope_table.h"
#include "reference/model/ops.h"

namespace gemtb::reference::model {

struct GdpaShape {
  int lq = 0, lk = 0, heads = 0, dh = 0;
  int window = -1;  // keep |i - j| <= window (window(w,w), top_left); -1 = none
  int block = 0;    // keep i / block == j / block (block(n)); 0 = none
  double post_scale = 1.0;

  bool Keep(int i, int j) const {
    if (block > 0) return i / block == j / block;
    return window < 0 || (j >= i - window && j <= i + window);
  }
  // The kept keys of query i form one range [*lo, *hi) for every mask here.
  void KeyRange(int i, int* lo, int* hi) const {
    if (block > 0) {
      *lo = std::min(lk, i / block * block);
      *hi = std::min(lk, (i / block + 1) * block);
    } else if (window >= 0) {
      *lo = std::max(0, i - window);
      *hi = std::max(*lo, std::min(lk, i + window + 1));
    } else {
      *lo = 0;
      *hi = lk;
    }
  }
};

namespace gdpa_detail {
// Head h of x [L, H*dh] transposed to [dh, L], so that dot products against every key run as saxpys
// over keys; each dot product still sums over i = 0..dh-1 in order (the same bits as a plain loop).
template <typename T>
void TransposeHead(const T* x, int len, int heads, int dh, int h, std::vector<T>& out) {
  out.resize(static_cast<size_t>(dh) * len);
  for (int t = 0; t < len; ++t)
    for (int c = 0; c < dh; ++c) out[static_cast<size_t>(c) * len + t] = x[(static_cast<size_t>(t) * heads + h) * dh + c];
}
// z[j - lo] = q . k_j for j in [lo, hi), from kt [dh, L].
template <typename T>
void Scores(const T* q, const T* kt, int len, int dh, int lo, int hi, T* z) {
  const int n = hi - lo;
  for (int j = 0; j < n; ++j) z[j] = T(0);
  for (int c = 0; c < dh; ++c) {
    const T a = q[c];
    const T* __restrict__ kr = kt + static_cast<size_t>(c) * len + lo;
    for (int j = 0; j < n; ++j) z[j] += a * kr[j];
  }
}
}  // namespace gdpa_detail

namespace gdpa_detail {
// The bodies below take the head dim as a template argument when it is a common size (kDh > 0), so
// that a query's output / gradient row lives in registers across the keys; kDh = 0 reads s.dh.
// Either way each element adds its terms in increasing key order (the same bits).
template <int kDh, typename T>
void ForwardImpl(const GdpaShape& s, const T* q, const T* k, const T* v, T* o) {
  const int dh = kDh > 0 ? kDh : s.dh;
  const int w = s.heads * dh;
  const T post = static_cast<T>(s.post_scale);
  for (size_t e = 0; e < static_cast<size_t>(s.lq) * w; ++e) o[e] = T(0);
  std::vector<T> kt, z(static_cast<size_t>(s.lk)), acc(static_cast<size_t>(dh));
  for (int h = 0; h < s.heads; ++h) {
    TransposeHead(k, s.lk, s.heads, dh, h, kt);
    for (int i = 0; i < s.lq; ++i) {
      int lo = 0, hi = 0;
      s.KeyRange(i, &lo, &hi);
      const T* qi = q + static_cast<size_t>(i) * w + h * dh;
      T* oi = o + static_cast<size_t>(i) * w + h * dh;
      Scores(qi, kt.data(), s.lk, dh, lo, hi, z.data());
      T local[kDh > 0 ? kDh : 1];
      T* __restrict__ a = kDh > 0 ? local : acc.data();
      for (int c = 0; c < dh; ++c) a[c] = oi[c];
      for (int j = lo; j < hi; ++j) {
        const T pij = post * Silu(z[j - lo]);
        const T* __restrict__ vj = v + static_cast<size_t>(j) * w + h * dh;
        for (int c = 0; c < dh; ++c) a[c] += pij * vj[c];
      }
      for (int c = 0; c < dh; ++c) oi[c] = a[c];
    }
  }
}

template <int kDh, typename T>
void BackwardImpl(const GdpaShape& s, const T* q, const T* k, const T* v, const T* do_, T* dq, T* dk, T* dv) {
  const int dh = kDh > 0 ? kDh : s.dh;
  const int w = s.heads * dh;
  const T post = static_cast<T>(s.post_scale);
  std::vector<T> kt, vt, z(static_cast<size_t>(s.lk)), dp(static_cast<size_t>(s.lk)), acc(static_cast<size_t>(dh));
  for (int h = 0; h < s.heads; ++h) {
    TransposeHead(k, s.lk, s.heads, dh, h, kt);
    TransposeHead(v, s.lk, s.heads, dh, h, vt);
    for (int i = 0; i < s.lq; ++i) {
      int lo = 0, hi = 0;
      s.KeyRange(i, &lo, &hi);
      const T* __restrict__ qi = q + static_cast<size_t>(i) * w + h * dh;
      const T* __restrict__ doi = do_ + static_cast<size_t>(i) * w + h * dh;
      T* dqi = dq + static_cast<size_t>(i) * w + h * dh;
      Scores(qi, kt.data(), s.lk, dh, lo, hi, z.data());
      Scores(doi, vt.data(), s.lk, dh, lo, hi, dp.data());
      T local[kDh > 0 ? kDh : 1];
      T* __restrict__ a = kDh > 0 ? local : acc.data();
      for (int c = 0; c < dh; ++c) a[c] = dqi[c];
      for (int j = lo; j < hi; ++j) {
        const size_t kj_at = static_cast<size_t>(j) * w + h * dh;
        const T* __restrict__ kj = k + kj_at;
        const T zj = z[j - lo];
        // Silu(zj) and SiluGrad(zj) written out around one sigmoid (the same expressions, the same bits).
        const T sg = Sigmoid(zj);
        const T pij = post * (zj * sg);
        const T dz = post * (sg * (T(1) + zj * (T(1) - sg))) * dp[j - lo];
        T* __restrict__ dkj = dk + kj_at;
        T* __restrict__ dvj = dv + kj_at;
        for (int c = 0; c < dh; ++c) {
          a[c] += dz * kj[c];
          dkj[c] += dz * qi[c];
          dvj[c] += pij * doi[c];
        }
      }
      for (int c = 0; c < dh; ++c) dqi[c] = a[c];
    }
  }
}
}  // namespace gdpa_detail

// o [lq, H*dh] = sum_j post * silu(q_i . k_j) v_j over kept keys.
template <typename T>
void GdpaForward(const GdpaShape& s, const T* q, const T* k, const T* v, T* o) {
  if (s.dh == 16) return gdpa_detail::ForwardImpl<16>(s, q, k, v, o);
  gdpa_detail::ForwardImpl<0>(s, q, k, v, o);
}

// dq, dk, dv += gradients for upstream do_ (scores recomputed). dq, dk and dv must not overlap each
// other or the inputs.
template <typename T>
void GdpaBackward(const GdpaShape& s, const T* q, const T* k, const T* v, const T* do_, T* dq, T* dk, T* dv) {
  if (s.dh == 16) return gdpa_detail::BackwardImpl<16>(s, q, k, v, do_, dq, dk, dv);
  gdpa_detail::BackwardImpl<0>(s, q, k, v, do_, dq, dk, dv);
}

// The RoPE table (model/attention/rope_table.h).
using gemtb::model::RopeTable;

// In place on x [n, H*dh]: token t rotated by table row t (same for all heads).
template <typename T>
void RopeForward(const T* table, int n, int heads, int dh, T* x) {
  const int half = dh / 2;
  for (int t = 0; t < n; ++t) {
    const T* row = table + static_cast<size_t>(t) * dh;
    for (int h = 0; h < heads; ++h) {
      T* xr = x + (static_cast<size_t>(t) * heads + h) * dh;
      for (int m = 0; m < half; ++m) {
        const T sn = row[m], cs = row[half + m];
        const T a = xr[2 * m], b = xr[2 * m + 1];
        xr[2 * m] = a * cs - b * sn;
        xr[2 * m + 1] = b * cs + a * sn;
      }
    }
  }
}
// In place on the gradient: the transposed rotation.
template <typename T>
void RopeBackward(const T* table, int n, int heads, int dh, T* dx) {
  const int half = dh / 2;
  for (int t = 0; t < n; ++t) {
    const T* row = table + static_cast<size_t>(t) * dh;
    for (int h = 0; h < heads; ++h) {
      T* xr = dx + (static_cast<size_t>(t) * heads + h) * dh;
      for (int m = 0; m < half; ++m) {
        const T sn = row[m], cs = row[half + m];
        const T a = xr[2 * m], b = xr[2 * m + 1];
        xr[2 * m] = a * cs + b * sn;
        xr[2 * m + 1] = b * cs - a * sn;
      }
    }
  }
}

}  // namespace gemtb::reference::model

#endif  // GEMTB_REFERENCE_MODEL_GDPA_H_
