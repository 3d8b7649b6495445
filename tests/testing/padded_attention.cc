#include "tests/testing/padded_attention.h"

#include <array>
#include <cmath>
#include <limits>
#include <numbers>

namespace gemtb::testing {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double Sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

// RoPE on rows [T, heads, D] with table [T, D] (sin | cos); `transposed` applies R^T (backward).
std::vector<double> Rotate(const std::vector<double>& x, int64_t rows, int64_t heads, int64_t d,
                           const check::OwnedTensor<double>& table, bool transposed) {
  if (!table.present()) return x;
  std::vector<double> y(x.size());
  const int64_t half = d / 2;
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const double* in = &x[(t * heads + h) * d];
      double* out = &y[(t * heads + h) * d];
      for (int64_t m = 0; m < half; ++m) {
        const double sn = table.data[t * d + m];
        const double cs = table.data[t * d + half + m];
        const double a = in[2 * m];
        const double b = in[2 * m + 1];
        if (!transposed) {
          out[2 * m] = a * cs - b * sn;
          out[2 * m + 1] = b * cs + a * sn;
        } else {
          out[2 * m] = a * cs + b * sn;
          out[2 * m + 1] = b * cs - a * sn;
        }
      }
    }
  }
  return y;
}

// Everything padded: [B][H][maxLq][D] queries, [B][H][maxLk][D] keys/values per *query* head, the
// explicit mask [B][maxLq][maxLk] and the summed bias [B][H][maxLq][maxLk] (zero off the mask).
struct Padded {
  int64_t b_count, heads, kv_heads, group, dqk, dv, mlq, mlk, max_l;
  double pre, post;
  std::vector<check::SequencePair> pairs;
  std::vector<double> qr, kr, vr;  // rotated jagged inputs
  std::vector<double> qp, kp, vp;
  std::vector<char> mask;
  std::vector<double> beta;

  double& Q(int64_t b, int64_t h, int64_t i, int64_t d) {
    return qp[((b * heads + h) * mlq + i) * dqk + d];
  }
  double& K(int64_t b, int64_t h, int64_t j, int64_t d) {
    return kp[((b * heads + h) * mlk + j) * dqk + d];
  }
  double& V(int64_t b, int64_t h, int64_t j, int64_t d) {
    return vp[((b * heads + h) * mlk + j) * dv + d];
  }
  bool Valid(int64_t b, int64_t i, int64_t j) const { return mask[(b * mlq + i) * mlk + j] != 0; }
  double& Beta(int64_t b, int64_t h, int64_t i, int64_t j) {
    return beta[((b * heads + h) * mlq + i) * mlk + j];
  }
  bool align_bottom_right = true;
};

Padded Pad(const check::AttentionCase& c, const MaskOverride& mask_override) {
  Padded p;
  p.heads = c.heads();
  p.kv_heads = c.kv_heads();
  p.group = p.heads / p.kv_heads;
  p.dqk = c.dqk();
  p.dv = c.dv();
  p.mlq = c.max_lq;
  p.mlk = c.max_lk;
  p.max_l = c.max_l();
  p.pre = check::PreScale(c);
  p.post = check::PostScale(c);
  p.pairs = check::PairSequences(c);
  p.b_count = static_cast<int64_t>(p.pairs.size());
  p.align_bottom_right = c.options.align == Alignment::kBottomRight;
  const int64_t tq = c.q.shape[0];
  const int64_t tk = c.k.shape[0];
  p.qr = Rotate(c.q.data, tq, p.heads, p.dqk, c.rope_q, false);
  p.kr = Rotate(c.k.data, tk, p.kv_heads, p.dqk, c.rope_k, false);
  p.vr = Rotate(c.v.data, tk, p.kv_heads, p.dv, c.rope_v, false);

  p.qp.assign(p.b_count * p.heads * p.mlq * p.dqk, 0.0);
  p.kp.assign(p.b_count * p.heads * p.mlk * p.dqk, 0.0);
  p.vp.assign(p.b_count * p.heads * p.mlk * p.dv, 0.0);
  p.mask.assign(p.b_count * p.mlq * p.mlk, 0);
  p.beta.assign(p.b_count * p.heads * p.mlq * p.mlk, 0.0);

  for (int64_t b = 0; b < p.b_count; ++b) {
    const check::SequencePair& s = p.pairs[b];
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t hk = h / p.group;
      for (int64_t i = 0; i < s.lq; ++i) {
        for (int64_t d = 0; d < p.dqk; ++d) {
          p.Q(b, h, i, d) = p.qr[((s.q_begin + i) * p.heads + h) * p.dqk + d];
        }
      }
      for (int64_t j = 0; j < s.lk; ++j) {
        for (int64_t d = 0; d < p.dqk; ++d) {
          p.K(b, h, j, d) = p.kr[((s.k_begin + j) * p.kv_heads + hk) * p.dqk + d];
        }
        for (int64_t d = 0; d < p.dv; ++d) {
          p.V(b, h, j, d) = p.vr[((s.k_begin + j) * p.kv_heads + hk) * p.dv + d];
        }
      }
    }
    for (int64_t i = 0; i < s.lq; ++i) {
      for (int64_t j = 0; j < s.lk; ++j) {
        const bool valid =
            mask_override ? mask_override(b, i, j) : check::PairIsValid(c.options, i, j, s.lq, s.lk);
        p.mask[(b * p.mlq + i) * p.mlk + j] = valid ? 1 : 0;
      }
    }
  }

  // Bias on valid pairs only (dense entries elsewhere may be NaN and are never read).
  for (int64_t b = 0; b < p.b_count; ++b) {
    const check::SequencePair& s = p.pairs[b];
    const int64_t shift = p.align_bottom_right ? s.lk - s.lq : 0;
    for (int64_t h = 0; h < p.heads; ++h) {
      for (int64_t i = 0; i < s.lq; ++i) {
        for (int64_t j = 0; j < s.lk; ++j) {
          if (!p.Valid(b, i, j)) continue;
          double sum = 0;
          if (c.bias_dense.present()) {
            const int64_t hb_count = c.bias_dense.shape[1];
            const int64_t hb = h / (p.heads / hb_count);
            sum += c.bias_dense.data[((b * hb_count + hb) * p.mlq + i) * p.mlk + j];
          }
          if (c.bias_rel.present()) {
            const int64_t hr = c.bias_rel.shape[0] == 1 ? 0 : h;
            const int64_t col = p.max_l - 1 + j - (i + shift);
            sum += c.bias_rel.data[hr * (2 * p.max_l - 1) + col];
          }
          if (c.bias_ts.present()) {
            const int64_t ht = c.bias_ts.shape[0] == 1 ? 0 : h;
            const int64_t next = i + 1 < s.lq - 1 ? i + 1 : s.lq - 1;
            const int64_t delta = c.ts.data[s.q_begin + next] - c.ts.data[s.k_begin + j];
            sum += c.bias_ts.data[ht * 129 + check::TimeBucket(delta)];
          }
          p.Beta(b, h, i, j) = sum;
        }
      }
    }
  }
  return p;
}

// S = pre * (Q K^T + beta) over the whole padded [maxLq, maxLk] block of (b, h).
std::vector<double> Scores(Padded& p, int64_t b, int64_t h) {
  std::vector<double> s(p.mlq * p.mlk);
  for (int64_t i = 0; i < p.mlq; ++i) {
    for (int64_t j = 0; j < p.mlk; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < p.dqk; ++d) dot += p.Q(b, h, i, d) * p.K(b, h, j, d);
      s[i * p.mlk + j] = p.pre * (dot + p.Beta(b, h, i, j));
    }
  }
  return s;
}

}  // namespace

double ActValue(Activation act, double x) {
  constexpr double c = 0.7978845608028654;  // sqrt(2/pi)
  constexpr double a = 0.044715;
  switch (act) {
    case Activation::kSoftmax:
      return std::numeric_limits<double>::quiet_NaN();
    case Activation::kIdentity:
      return x;
    case Activation::kGelu:
      return 0.5 * x * std::erfc(-x / std::numbers::sqrt2);
    case Activation::kGeluTanh:
      return 0.5 * x * (1 + std::tanh(c * (x + a * x * x * x)));
    case Activation::kSilu:
      return x * Sigmoid(x);
    case Activation::kRelu:
      return x > 0 ? x : 0.0;
    case Activation::kReluSquare:
      return x > 0 ? x * x : 0.0;
    case Activation::kLeakyRelu:
      return x > 0 ? x : 0.01 * x;
    case Activation::kHardswish: {
      const double r = x + 3 < 0 ? 0.0 : (x + 3 > 6 ? 6.0 : x + 3);
      return x * r / 6;
    }
  }
  return std::numeric_limits<double>::quiet_NaN();
}

double ActDerivative(Activation act, double x) {
  constexpr double c = 0.7978845608028654;
  constexpr double a = 0.044715;
  switch (act) {
    case Activation::kSoftmax:
      return std::numeric_limits<double>::quiet_NaN();
    case Activation::kIdentity:
      return 1.0;
    case Activation::kGelu: {
      const double cdf = 0.5 * std::erfc(-x / std::numbers::sqrt2);
      const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2 * std::numbers::pi);
      return cdf + x * pdf;
    }
    case Activation::kGeluTanh: {
      const double t = std::tanh(c * (x + a * x * x * x));
      return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * (c + 3 * a * c * x * x);
    }
    case Activation::kSilu: {
      const double s = Sigmoid(x);
      return s * (1 + x * (1 - s));
    }
    case Activation::kRelu:
      return x > 0 ? 1.0 : 0.0;
    case Activation::kReluSquare:
      return x > 0 ? 2 * x : 0.0;
    case Activation::kLeakyRelu:
      return x > 0 ? 1.0 : 0.01;
    case Activation::kHardswish:
      if (x <= -3) return 0.0;
      if (x <= 3) return x / 3 + 0.5;
      return 1.0;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

static PaddedResult Run(const check::AttentionCase& c, absl::Span<const double> d_o, bool backward,
                        const MaskOverride& mask_override) {
  Padded p = Pad(c, mask_override);
  const int64_t to = check::OutputRows(c);
  const int64_t mlq = p.mlq;
  const int64_t mlk = p.mlk;
  const bool softmax = c.options.act == Activation::kSoftmax;

  PaddedResult r;
  r.o.assign(to * p.heads * p.dv, 0.0);
  if (softmax) r.lse.assign(p.heads * to, kNegInf);
  std::vector<double> dqr, dkr, dvr;
  if (backward) {
    dqr.assign(c.q.data.size(), 0.0);
    dkr.assign(c.k.data.size(), 0.0);
    dvr.assign(c.v.data.size(), 0.0);
    if (c.bias_dense.present()) r.d_bias_dense.assign(c.bias_dense.data.size(), 0.0);
    if (c.bias_rel.present()) r.d_bias_rel.assign(c.bias_rel.data.size(), 0.0);
    if (c.bias_ts.present()) r.d_bias_ts.assign(c.bias_ts.data.size(), 0.0);
  }

  for (int64_t b = 0; b < p.b_count; ++b) {
    const check::SequencePair& s = p.pairs[b];
    const int64_t shift = p.align_bottom_right ? s.lk - s.lq : 0;
    for (int64_t h = 0; h < p.heads; ++h) {
      const std::vector<double> sc = Scores(p, b, h);
      std::vector<double> phat(mlq * mlk, 0.0);  // softmax: normalised; pointwise: act(S)
      std::vector<double> prob(mlq * mlk, 0.0);  // P = post * phat on valid pairs, 0 elsewhere
      std::vector<double> lse(mlq, kNegInf);
      for (int64_t i = 0; i < mlq; ++i) {
        if (softmax) {
          double m = kNegInf;
          for (int64_t j = 0; j < mlk; ++j) {
            if (p.Valid(b, i, j) && sc[i * mlk + j] > m) m = sc[i * mlk + j];
          }
          if (m == kNegInf) continue;  // empty row
          double sum = 0;
          for (int64_t j = 0; j < mlk; ++j) {
            if (p.Valid(b, i, j)) sum += std::exp(sc[i * mlk + j] - m);
          }
          for (int64_t j = 0; j < mlk; ++j) {
            if (!p.Valid(b, i, j)) continue;
            phat[i * mlk + j] = std::exp(sc[i * mlk + j] - m) / sum;
            prob[i * mlk + j] = p.post * phat[i * mlk + j];
          }
          lse[i] = m + std::log(sum);
        } else {
          for (int64_t j = 0; j < mlk; ++j) {
            if (!p.Valid(b, i, j)) continue;
            phat[i * mlk + j] = ActValue(c.options.act, sc[i * mlk + j]);
            prob[i * mlk + j] = p.post * phat[i * mlk + j];
          }
        }
      }
      // O = P V, padded, then unpadded.
      std::vector<double> op(mlq * p.dv, 0.0);
      for (int64_t i = 0; i < mlq; ++i) {
        for (int64_t e = 0; e < p.dv; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < mlk; ++j) acc += prob[i * mlk + j] * p.V(b, h, j, e);
          op[i * p.dv + e] = acc;
        }
      }
      for (int64_t i = 0; i < s.lq; ++i) {
        for (int64_t e = 0; e < p.dv; ++e) {
          r.o[((s.o_begin + i) * p.heads + h) * p.dv + e] = op[i * p.dv + e];
        }
        if (softmax) r.lse[h * to + s.o_begin + i] = lse[i];
      }
      if (!backward) continue;

      std::vector<double> dop(mlq * p.dv, 0.0);
      for (int64_t i = 0; i < s.lq; ++i) {
        for (int64_t e = 0; e < p.dv; ++e) {
          dop[i * p.dv + e] = d_o[((s.o_begin + i) * p.heads + h) * p.dv + e];
        }
      }
      // dV = P^T dO; dP = dO V^T.
      const int64_t hk = h / p.group;
      for (int64_t j = 0; j < s.lk; ++j) {
        for (int64_t e = 0; e < p.dv; ++e) {
          double acc = 0;
          for (int64_t i = 0; i < mlq; ++i) acc += prob[i * mlk + j] * dop[i * p.dv + e];
          dvr[((s.k_begin + j) * p.kv_heads + hk) * p.dv + e] += acc;
        }
      }
      std::vector<double> dz(mlq * mlk, 0.0);
      for (int64_t i = 0; i < mlq; ++i) {
        double row_d = 0;  // D_i = dO_i . O_i (O includes post)
        if (softmax) {
          for (int64_t e = 0; e < p.dv; ++e) row_d += dop[i * p.dv + e] * op[i * p.dv + e];
        }
        for (int64_t j = 0; j < mlk; ++j) {
          if (!p.Valid(b, i, j)) continue;
          double dp = 0;
          for (int64_t e = 0; e < p.dv; ++e) dp += dop[i * p.dv + e] * p.V(b, h, j, e);
          const double ds = softmax ? phat[i * mlk + j] * (p.post * dp - row_d)
                                    : p.post * ActDerivative(c.options.act, sc[i * mlk + j]) * dp;
          dz[i * mlk + j] = p.pre * ds;
        }
      }
      // dQ = dZ K, dK = dZ^T Q, scattered to the (shared) jagged rows.
      for (int64_t i = 0; i < s.lq; ++i) {
        for (int64_t d = 0; d < p.dqk; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < mlk; ++j) acc += dz[i * mlk + j] * p.K(b, h, j, d);
          dqr[((s.q_begin + i) * p.heads + h) * p.dqk + d] += acc;
        }
      }
      for (int64_t j = 0; j < s.lk; ++j) {
        for (int64_t d = 0; d < p.dqk; ++d) {
          double acc = 0;
          for (int64_t i = 0; i < mlq; ++i) acc += dz[i * mlk + j] * p.Q(b, h, i, d);
          dkr[((s.k_begin + j) * p.kv_heads + hk) * p.dqk + d] += acc;
        }
      }
      for (int64_t i = 0; i < s.lq; ++i) {
        for (int64_t j = 0; j < s.lk; ++j) {
          if (!p.Valid(b, i, j)) continue;
          const double g = dz[i * mlk + j];
          if (c.bias_dense.present()) {
            const int64_t hb_count = c.bias_dense.shape[1];
            const int64_t hb = h / (p.heads / hb_count);
            r.d_bias_dense[((b * hb_count + hb) * mlq + i) * mlk + j] += g;
          }
          if (c.bias_rel.present()) {
            const int64_t hr = c.bias_rel.shape[0] == 1 ? 0 : h;
            r.d_bias_rel[hr * (2 * p.max_l - 1) + p.max_l - 1 + j - (i + shift)] += g;
          }
          if (c.bias_ts.present()) {
            const int64_t ht = c.bias_ts.shape[0] == 1 ? 0 : h;
            const int64_t next = i + 1 < s.lq - 1 ? i + 1 : s.lq - 1;
            const int64_t delta = c.ts.data[s.q_begin + next] - c.ts.data[s.k_begin + j];
            r.d_bias_ts[ht * 129 + check::TimeBucket(delta)] += g;
          }
        }
      }
    }
  }
  if (backward) {
    r.dq = Rotate(dqr, c.q.shape[0], p.heads, p.dqk, c.rope_q, true);
    r.dk = Rotate(dkr, c.k.shape[0], p.kv_heads, p.dqk, c.rope_k, true);
    r.dv = Rotate(dvr, c.v.shape[0], p.kv_heads, p.dv, c.rope_v, true);
  }
  return r;
}

PaddedResult PaddedAttention(const check::AttentionCase& c, absl::Span<const double> d_o,
                             const MaskOverride& mask) {
  return Run(c, d_o, /*backward=*/true, mask);
}

PaddedResult PaddedAttentionForward(const check::AttentionCase& c, const MaskOverride& mask) {
  return Run(c, {}, /*backward=*/false, mask);
}

std::vector<double> ValidScores(const check::AttentionCase& c) {
  Padded p = Pad(c, nullptr);
  std::vector<double> out;
  for (int64_t b = 0; b < p.b_count; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const std::vector<double> sc = Scores(p, b, h);
      for (int64_t i = 0; i < p.mlq; ++i) {
        for (int64_t j = 0; j < p.mlk; ++j) {
          if (p.Valid(b, i, j)) out.push_back(sc[i * p.mlk + j]);
        }
      }
    }
  }
  return out;
}

int64_t CountValidPairs(const check::AttentionCase& c) {
  int64_t n = 0;
  for (const check::SequencePair& s : check::PairSequences(c)) {
    for (int64_t i = 0; i < s.lq; ++i) {
      for (int64_t j = 0; j < s.lk; ++j) n += check::PairIsValid(c.options, i, j, s.lq, s.lk) ? 1 : 0;
    }
  }
  return n;
}

}  // namespace gemtb::testing
