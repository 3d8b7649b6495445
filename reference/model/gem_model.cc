#include "reference/model/gem_model.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "model/description/gem_geometry.h"

namespace gemtb::reference::model {
namespace {

using gemtb::model::ModelConfig;

template <typename T>
void Zero(std::vector<T>& v, size_t n) {
  v.assign(n, T(0));
}
template <typename T>
void AddInto(const T* src, size_t n, T* dst) {
  for (size_t e = 0; e < n; ++e) dst[e] += src[e];
}

}  // namespace

template <typename T>
struct CrossSeqTape {
  int n = 0;               // tokens of S_j (n_s + len_j)
  std::vector<T> s_in;     // S_j as the PMA read it [n, d]
  AttnTape<T> pma;
  std::vector<T> pma_out;  // [k_p, d]
  std::vector<T> cat, sig, s_sum;  // [n_s + k_p + K_r, d]
};

template <typename T>
struct CrossTape {
  std::vector<T> x_in;                 // [n_x, d]
  std::vector<T> xs_pre, xs_sig, x_sum;  // [n_s, d]
  std::vector<CrossSeqTape<T>> seq;
};

template <typename T>
struct WukongTape {
  std::vector<T> z, a, bm, flat_hat, flat_rstd, h1, u1, g1, pre, hat2, rstd2;
};

template <typename T>
struct SeqLayerTape {
  std::vector<T> hat_a, rstd_a, h_a, hat_b, rstd_b, h_b, hat_c, rstd_c, h_c, u, g;
  AttnTape<T> a, b;
};

template <typename T>
struct LayerTape {
  CrossTape<T> cross;
  WukongTape<T> wukong;
  std::vector<SeqLayerTape<T>> seq;
};

template <typename T>
struct SampleTape {
  std::vector<T> dense_out, z0, x;        // x: the current X [n_x, d]
  std::vector<std::vector<T>> s;          // per j: the residual stream S_j [n_j, d]
  std::vector<LayerTape<T>> layers;
  CrossTape<T> final_cross;
  std::vector<T> hin;
  std::vector<std::vector<T>> head_u, head_a;  // per head layer: pre-activation, output
  std::vector<T> scratch;
};

template <>
const float* GemModel::Rope<float>() const {
  return rope_f_.data();
}
template <>
const double* GemModel::Rope<double>() const {
  return rope_d_.data();
}

absl::StatusOr<GemModel> GemModel::Create(const ModelConfig& c) {
  absl::StatusOr<gemtb::model::GemGeometry> geometry = gemtb::model::MakeGemGeometry(c);
  if (!geometry.ok()) return geometry.status();
  const gemtb::model::GemGeometry& g = *geometry;
  GemModel m;
  m.d_ = g.d;
  m.heads_ = g.heads;
  m.num_features_ = g.num_features;
  m.dense_m_ = g.dense_m;
  m.n_d_ = g.n_d;
  m.n_x_ = g.n_x;
  m.n_s_ = g.n_s;
  m.k_p_ = g.k_p;
  m.k_r_ = g.k_r;
  m.wk_k_ = g.wk_k;
  m.n_f_ = g.n_f;
  m.n_l_ = g.n_l;
  m.wk_h_ = g.wk_h;
  m.ffn_ = g.ffn;
  m.num_tasks_ = g.num_tasks;
  for (const gemtb::model::GemSequenceGeometry& s : g.seqs)
    m.seqs_.push_back(SeqInfo{s.lmax, s.window, s.block, s.self_post, s.rope});
  m.layout_ = g.layout;
  const int d = m.d_;
  const int J = g.num_sequences();
  const int n_z = g.n_z();
  const ParamLayout& L = m.layout_;
  m.dense_proj_ = Linear::Bind(L, "embed.dense", m.dense_m_, m.n_d_ * d);
  m.lce_in_ = TokenMix::Bind(L, "embed.lce_in", m.num_features_ + m.n_d_, m.n_x_, d);
  auto bind_cross = [&](const std::string& name) {
    Cross x;
    x.lce_s = TokenMix::Bind(L, name + ".lce_s", m.n_x_, m.n_s_, d);
    x.x_gate = Gate::Bind(L, name + ".x_gate", d);
    for (int j = 0; j < J; ++j) {
      const std::string sj = absl::StrCat(name, ".seq", j);
      x.seeds.push_back(L.Ref(sj + ".pma.seeds", {m.k_p_, d}));
      x.pma.push_back(AttnBlock::Bind(L, sj + ".pma", d, m.heads_));
      x.sum_gate.push_back(Gate::Bind(L, sj + ".sum_gate", d));
    }
    return x;
  };
  for (int l = 0; l < g.layers; ++l) {
    const std::string name = absl::StrCat("L", l + 1);
    Layer layer;
    layer.cross = bind_cross(name + ".cross");
    Wukong& w = layer.wukong;
    w.y = L.Ref(name + ".wukong.y", {n_z, m.wk_k_});
    w.ln_flat = LayerNorm::Bind(L, name + ".wukong.ln_flat", n_z * m.wk_k_);
    if (g.experts == 1) {
      w.mlp1.push_back(Linear::Bind(L, name + ".wukong.mlp1", n_z * m.wk_k_, m.wk_h_));
      w.mlp2.push_back(Linear::Bind(L, name + ".wukong.mlp2", m.wk_h_, m.n_f_ * d));
    } else {
      const int he = m.wk_h_ / g.experts;
      for (int e = 0; e < g.experts; ++e) {
        w.mlp1.push_back(Linear::Bind(L, absl::StrCat(name, ".wukong.mlp1.e", e), n_z * m.wk_k_, he));
        Linear second;
        second.in = he;
        second.out = m.n_f_ * d;
        second.w = L.Ref(absl::StrCat(name, ".wukong.mlp2.e", e, ".w"), {he, m.n_f_ * d});
        w.mlp2.push_back(second);  // no bias: the experts share mlp2_bias
      }
      w.mlp2_bias = L.Ref(name + ".wukong.mlp2.b", {m.n_f_ * d});
    }
    w.lcb = TokenMix::Bind(L, name + ".wukong.lcb", n_z, m.n_l_, d);
    w.res = TokenMix::Bind(L, name + ".wukong.lce_res", n_z, m.n_x_, d);
    w.ln_out = LayerNorm::Bind(L, name + ".wukong.ln_out", d);
    layer.do_a = g.DoA(l);
    layer.do_b = g.DoB(l);
    for (int j = 0; j < J; ++j) {
      const std::string sj = absl::StrCat(name, ".seq", j);
      SeqLayer s;
      s.ln_a = LayerNorm::Bind(L, sj + ".ln_a", d);
      s.attn_a = AttnBlock::Bind(L, sj + ".attn_a", d, m.heads_);
      s.ln_b = LayerNorm::Bind(L, sj + ".ln_b", d);
      s.attn_b = AttnBlock::Bind(L, sj + ".attn_b", d, m.heads_);
      s.ln_c = LayerNorm::Bind(L, sj + ".ln_c", d);
      s.ffn1 = Linear::Bind(L, sj + ".ffn1", d, m.ffn_);
      s.ffn2 = Linear::Bind(L, sj + ".ffn2", m.ffn_, d);
      layer.seq.push_back(s);
    }
    m.layers_.push_back(std::move(layer));
  }
  m.final_cross_ = bind_cross("final.cross");
  for (size_t i = 0; i + 1 < g.head_widths.size(); ++i)
    m.head_.push_back(Linear::Bind(L, absl::StrCat("head.mlp", i), g.head_widths[i], g.head_widths[i + 1]));
  m.rope_rows_ = g.rope_rows;
  m.rope_f_ = RopeTable<float>(g.rope_rows, g.dh());
  m.rope_d_ = RopeTable<double>(g.rope_rows, g.dh());
  return m;
}

template <typename T>
SampleTape<T>* GemModel::NewTape() {
  return new SampleTape<T>();
}
template <typename T>
void GemModel::DeleteTape(SampleTape<T>* tape) {
  delete tape;
}

namespace {

// Everything of GemModel's per-sample pass that needs the tape types; a friend-free helper that
// reads the model's public parts.
template <typename T>
class Pass {
 public:
  Pass(const GemModel& m, const ParamView<T>& p, SampleTape<T>& t) : m_(m), p_(p), t_(t) {}

  void CrossForward(const GemModel::Cross& x, CrossTape<T>& ct, const SampleInput<T>* first) {
    const int d = m_.d_, n_s = m_.n_s_, k_p = m_.k_p_, k_r = m_.k_r_;
    const int n_sum = n_s + k_p + k_r;
    ct.x_in = t_.x;
    ct.xs_pre.resize(static_cast<size_t>(n_s) * d);
    ct.xs_sig.resize(ct.xs_pre.size());
    ct.x_sum.resize(ct.xs_pre.size());
    x.lce_s.Forward(p_, ct.x_in.data(), ct.xs_pre.data());
    x.x_gate.Forward(p_, ct.xs_pre.data(), n_s, ct.x_sum.data(), ct.xs_sig.data());
    const int J = m_.num_sequences();
    if (first) {
      // [proj] Layer 1 prepends its X_sum to every sequence as the n_s CLS tokens (X_sum(1)).
      t_.s.resize(J);
      for (int j = 0; j < J; ++j) {
        const int len = first->lengths[j];
        std::vector<T>& s = t_.s[j];
        s.resize(static_cast<size_t>(n_s + len) * d);
        std::copy(ct.x_sum.begin(), ct.x_sum.end(), s.begin());
        std::copy(first->events[j], first->events[j] + static_cast<size_t>(len) * d, s.begin() + static_cast<long>(n_s) * d);
      }
    }
    ct.seq.resize(J);
    for (int j = 0; j < J; ++j) {
      CrossSeqTape<T>& st = ct.seq[j];
      const std::vector<T>& s = t_.s[j];
      st.n = static_cast<int>(s.size() / d);
      st.s_in = s;
      GdpaShape shape = PmaShape(j, st.n);
      st.pma_out.resize(static_cast<size_t>(k_p) * d);
      x.pma[j].Forward(p_, shape, p_.W(x.seeds[j]), st.s_in.data(), static_cast<const T*>(nullptr), st.pma, st.pma_out.data());
      st.cat.assign(static_cast<size_t>(n_sum) * d, T(0));
      std::copy(s.begin(), s.begin() + static_cast<long>(n_s) * d, st.cat.begin());
      std::copy(st.pma_out.begin(), st.pma_out.end(), st.cat.begin() + static_cast<long>(n_s) * d);
      // REC_j: the last K_r event tokens, right-aligned, zero-padded in front.
      const int len = st.n - n_s;
      for (int r = 0; r < k_r; ++r) {
        const int e = len - k_r + r;
        if (e < 0) continue;
        std::copy(s.begin() + static_cast<long>(n_s + e) * d, s.begin() + static_cast<long>(n_s + e + 1) * d,
                  st.cat.begin() + static_cast<long>(n_s + k_p + r) * d);
      }
      st.sig.resize(st.cat.size());
      st.s_sum.resize(st.cat.size());
      x.sum_gate[j].Forward(p_, st.cat.data(), n_sum, st.s_sum.data(), st.sig.data());
    }
  }

  // dx_sum [n_s, d] and ds_sum[j] [n_sum, d] in; ds[j] (+=) and dx (+=) out. `first`: also routes
  // the CLS gradient into dx_sum and writes the event gradients to grad->events.
  void CrossBackward(const GemModel::Cross& x, const CrossTape<T>& ct, std::vector<T>& dx_sum,
                     const std::vector<std::vector<T>>& ds_sum, std::vector<std::vector<T>>& ds, std::vector<T>& dx,
                     SampleInputGrad<T>* first) {
    const int d = m_.d_, n_s = m_.n_s_, k_p = m_.k_p_, k_r = m_.k_r_;
    const int n_sum = n_s + k_p + k_r;
    const int J = m_.num_sequences();
    for (int j = 0; j < J; ++j) {
      const CrossSeqTape<T>& st = ct.seq[j];
      std::vector<T> dcat(static_cast<size_t>(n_sum) * d, T(0));
      x.sum_gate[j].Backward(p_, st.cat.data(), st.sig.data(), ds_sum[j].data(), n_sum, dcat.data(), t_.scratch);
      std::vector<T>& dsj = ds[j];
      AddInto(dcat.data(), static_cast<size_t>(n_s) * d, dsj.data());
      const int len = st.n - n_s;
      for (int r = 0; r < k_r; ++r) {
        const int e = len - k_r + r;
        if (e < 0) continue;
        AddInto(dcat.data() + static_cast<size_t>(n_s + k_p + r) * d, d, dsj.data() + static_cast<size_t>(n_s + e) * d);
      }
      x.pma[j].Backward(p_, PmaShape(j, st.n), p_.W(x.seeds[j]), st.s_in.data(), static_cast<const T*>(nullptr), st.pma,
                        dcat.data() + static_cast<size_t>(n_s) * d, p_.G(x.seeds[j]), dsj.data(), t_.scratch);
    }
    if (first) {
      for (int j = 0; j < J; ++j) {
        AddInto(ds[j].data(), static_cast<size_t>(n_s) * d, dx_sum.data());
        first->events[j].assign(ds[j].begin() + static_cast<long>(n_s) * d, ds[j].end());
      }
    }
    std::vector<T> dxs_pre(static_cast<size_t>(n_s) * d, T(0));
    x.x_gate.Backward(p_, ct.xs_pre.data(), ct.xs_sig.data(), dx_sum.data(), n_s, dxs_pre.data(), t_.scratch);
    x.lce_s.Backward(p_, ct.x_in.data(), dxs_pre.data(), dx.data());
  }

  void WukongForward(const GemModel::Wukong& w, const CrossTape<T>& ct, WukongTape<T>& wt) {
    const int d = m_.d_, n_x = m_.n_x_, k = m_.wk_k_;
    const int J = m_.num_sequences();
    const int n_sum = m_.n_s_ + m_.k_p_ + m_.k_r_;
    const int n_z = n_x + J * n_sum;
    wt.z = t_.x;
    for (int j = 0; j < J; ++j) wt.z.insert(wt.z.end(), ct.seq[j].s_sum.begin(), ct.seq[j].s_sum.end());
    // FMB = MLP(LN(flatten(Z (Z^T Y)))).
    Zero(wt.a, static_cast<size_t>(d) * k);
    MatMulBackwardWeight(wt.z.data(), p_.W(w.y), n_z, d, k, wt.a.data(), static_cast<T*>(nullptr));
    wt.bm.resize(static_cast<size_t>(n_z) * k);
    MatMul(wt.z.data(), n_z, d, wt.a.data(), k, static_cast<const T*>(nullptr), wt.bm.data());
    wt.flat_hat.resize(wt.bm.size());
    wt.flat_rstd.resize(1);
    wt.h1.resize(wt.bm.size());
    w.ln_flat.Forward(p_, wt.bm.data(), 1, wt.h1.data(), wt.flat_hat.data(), wt.flat_rstd.data());
    // Expert e's hidden units at [e H/E, (e + 1) H/E) of u1 and g1.
    wt.u1.resize(m_.wk_h_);
    wt.g1.resize(m_.wk_h_);
    for (size_t e = 0; e < w.mlp1.size(); ++e) w.mlp1[e].Forward(p_, wt.h1.data(), 1, wt.u1.data() + e * w.mlp1[e].out);
    GeluForward(wt.u1.data(), wt.u1.size(), wt.g1.data());
    wt.pre.resize(static_cast<size_t>(n_x) * d);
    if (w.mlp2.size() == 1) {
      w.mlp2[0].Forward(p_, wt.g1.data(), 1, wt.pre.data());
    } else {
      // ((b + y_0) + y_1) + ...: the shared bias, then each expert's output in expert order.
      const size_t nf = static_cast<size_t>(m_.n_f_) * d;
      std::copy(p_.W(w.mlp2_bias), p_.W(w.mlp2_bias) + nf, wt.pre.begin());
      std::vector<T> y(nf);
      for (size_t e = 0; e < w.mlp2.size(); ++e) {
        w.mlp2[e].Forward(p_, wt.g1.data() + e * w.mlp2[e].in, 1, y.data());
        AddInto(y.data(), nf, wt.pre.data());
      }
    }
    // LCB = W_L Z, then + LCE_res(Z).
    w.lcb.Forward(p_, wt.z.data(), wt.pre.data() + static_cast<size_t>(m_.n_f_) * d);
    std::vector<T> res(static_cast<size_t>(n_x) * d);
    w.res.Forward(p_, wt.z.data(), res.data());
    AddInto(res.data(), res.size(), wt.pre.data());
    wt.hat2.resize(wt.pre.size());
    wt.rstd2.resize(n_x);
    t_.x.resize(wt.pre.size());
    w.ln_out.Forward(p_, wt.pre.data(), n_x, t_.x.data(), wt.hat2.data(), wt.rstd2.data());
  }

  // dout [n_x, d] in; dx (=, for the layer's input X) and ds_sum[j] (=) out.
  void WukongBackward(const GemModel::Wukong& w, const WukongTape<T>& wt, const std::vector<T>& dout,
                      std::vector<T>& dx, std::vector<std::vector<T>>& ds_sum) {
    const int d = m_.d_, n_x = m_.n_x_, k = m_.wk_k_;
    const int J = m_.num_sequences();
    const int n_sum = m_.n_s_ + m_.k_p_ + m_.k_r_;
    const int n_z = n_x + J * n_sum;
    std::vector<T> dpre(static_cast<size_t>(n_x) * d, T(0));
    w.ln_out.Backward(p_, wt.hat2.data(), wt.rstd2.data(), dout.data(), n_x, dpre.data());
    std::vector<T> dz(static_cast<size_t>(n_z) * d, T(0));
    w.res.Backward(p_, wt.z.data(), dpre.data(), dz.data());
    w.lcb.Backward(p_, wt.z.data(), dpre.data() + static_cast<size_t>(m_.n_f_) * d, dz.data());
    std::vector<T> dg1(m_.wk_h_, T(0)), du1(m_.wk_h_, T(0)), dh1(wt.bm.size(), T(0)), dbm(wt.bm.size(), T(0));
    if (w.mlp2.size() > 1) {
      // The shared bias takes the first n_F d rows' gradient once.
      AddInto(dpre.data(), static_cast<size_t>(m_.n_f_) * d, p_.G(w.mlp2_bias));
    }
    for (size_t e = 0; e < w.mlp2.size(); ++e) {
      w.mlp2[e].Backward(p_, wt.g1.data() + e * w.mlp2[e].in, dpre.data(), 1, dg1.data() + e * w.mlp2[e].in,
                         t_.scratch);
    }
    GeluBackward(wt.u1.data(), dg1.data(), du1.size(), du1.data());
    // dh1 = sum_e du1_e W1_e^T, added in expert order.
    for (size_t e = 0; e < w.mlp1.size(); ++e) {
      w.mlp1[e].Backward(p_, wt.h1.data(), du1.data() + e * w.mlp1[e].out, 1, dh1.data(), t_.scratch);
    }
    w.ln_flat.Backward(p_, wt.flat_hat.data(), wt.flat_rstd.data(), dh1.data(), 1, dbm.data());
    // bm = z a: dz += dbm a^T, da = z^T dbm.
    std::vector<T> da(static_cast<size_t>(d) * k, T(0));
    t_.scratch.resize(static_cast<size_t>(d) * k);
    MatMulBackwardInput(dbm.data(), n_z, k, wt.a.data(), d, dz.data(), t_.scratch.data());
    MatMulBackwardWeight(wt.z.data(), dbm.data(), n_z, d, k, da.data(), static_cast<T*>(nullptr));
    // a = z^T Y: dz += Y da^T, dY += z da.
    MatMulBackwardInput(p_.W(w.y), n_z, k, da.data(), d, dz.data(), t_.scratch.data());
    std::vector<T> dy(static_cast<size_t>(n_z) * k);
    MatMul(wt.z.data(), n_z, d, da.data(), k, static_cast<const T*>(nullptr), dy.data());
    AddInto(dy.data(), dy.size(), p_.G(w.y));
    dx.assign(dz.begin(), dz.begin() + static_cast<long>(n_x) * d);
    ds_sum.resize(J);
    for (int j = 0; j < J; ++j)
      ds_sum[j].assign(dz.begin() + static_cast<long>(n_x + j * n_sum) * d, dz.begin() + static_cast<long>(n_x + (j + 1) * n_sum) * d);
  }

  void SeqForward(const GemModel::Layer& layer, int j, const std::vector<T>& x_sum, SeqLayerTape<T>& st) {
    const GemModel::SeqLayer& sl = layer.seq[j];
    const int d = m_.d_;
    std::vector<T>& s = t_.s[j];
    const int n = static_cast<int>(s.size() / d);
    const size_t nd = s.size();
    std::vector<T> y(nd);
    if (layer.do_a) {
      st.hat_a.resize(nd), st.rstd_a.resize(n), st.h_a.resize(nd);
      sl.ln_a.Forward(p_, s.data(), n, st.h_a.data(), st.hat_a.data(), st.rstd_a.data());
      sl.attn_a.Forward(p_, CrossAttnShape(n), st.h_a.data(), x_sum.data(), static_cast<const T*>(nullptr), st.a, y.data());
      AddInto(y.data(), nd, s.data());
    }
    if (layer.do_b) {
      st.hat_b.resize(nd), st.rstd_b.resize(n), st.h_b.resize(nd);
      sl.ln_b.Forward(p_, s.data(), n, st.h_b.data(), st.hat_b.data(), st.rstd_b.data());
      sl.attn_b.Forward(p_, SelfShape(j, n), st.h_b.data(), st.h_b.data(), SelfRope(j), st.b, y.data());
      AddInto(y.data(), nd, s.data());
    }
    st.hat_c.resize(nd), st.rstd_c.resize(n), st.h_c.resize(nd);
    sl.ln_c.Forward(p_, s.data(), n, st.h_c.data(), st.hat_c.data(), st.rstd_c.data());
    const size_t nf = static_cast<size_t>(n) * m_.ffn_;
    st.u.resize(nf), st.g.resize(nf);
    sl.ffn1.Forward(p_, st.h_c.data(), n, st.u.data());
    GeluForward(st.u.data(), nf, st.g.data());
    sl.ffn2.Forward(p_, st.g.data(), n, y.data());
    AddInto(y.data(), nd, s.data());
  }

  // ds (the gradient of S_j after the block) becomes the gradient before it; dx_sum += (a)'s K/V part.
  void SeqBackward(const GemModel::Layer& layer, int j, const std::vector<T>& x_sum, const SeqLayerTape<T>& st,
                   std::vector<T>& ds, std::vector<T>& dx_sum) {
    const GemModel::SeqLayer& sl = layer.seq[j];
    const int d = m_.d_;
    const int n = static_cast<int>(ds.size() / d);
    const size_t nd = ds.size();
    const size_t nf = static_cast<size_t>(n) * m_.ffn_;
    std::vector<T> dg(nf, T(0)), du(nf, T(0)), dh(nd, T(0));
    sl.ffn2.Backward(p_, st.g.data(), ds.data(), n, dg.data(), t_.scratch);
    GeluBackward(st.u.data(), dg.data(), nf, du.data());
    sl.ffn1.Backward(p_, st.h_c.data(), du.data(), n, dh.data(), t_.scratch);
    sl.ln_c.Backward(p_, st.hat_c.data(), st.rstd_c.data(), dh.data(), n, ds.data());
    if (layer.do_b) {
      dh.assign(nd, T(0));
      sl.attn_b.Backward(p_, SelfShape(j, n), st.h_b.data(), st.h_b.data(), SelfRope(j), st.b, ds.data(), dh.data(),
                         dh.data(), t_.scratch);
      sl.ln_b.Backward(p_, st.hat_b.data(), st.rstd_b.data(), dh.data(), n, ds.data());
    }
    if (layer.do_a) {
      dh.assign(nd, T(0));
      sl.attn_a.Backward(p_, CrossAttnShape(n), st.h_a.data(), x_sum.data(), static_cast<const T*>(nullptr), st.a,
                         ds.data(), dh.data(), dx_sum.data(), t_.scratch);
      sl.ln_a.Backward(p_, st.hat_a.data(), st.rstd_a.data(), dh.data(), n, ds.data());
    }
  }

  GdpaShape PmaShape(int j, int n) const {
    GdpaShape s;
    s.lq = m_.k_p_, s.lk = n, s.heads = m_.heads_, s.dh = m_.d_ / m_.heads_;
    s.post_scale = 1.0 / static_cast<double>(m_.seqs_[j].lmax);  // SiLU scale 1/Lmax_j
    return s;
  }
  GdpaShape CrossAttnShape(int n) const {
    GdpaShape s;
    s.lq = n, s.lk = m_.n_s_, s.heads = m_.heads_, s.dh = m_.d_ / m_.heads_;
    s.post_scale = 1.0 / static_cast<double>(m_.n_s_);  // variant (a): scale 1/n_s
    return s;
  }
  GdpaShape SelfShape(int j, int n) const {
    const GemModel::SeqInfo& info = m_.seqs_[j];
    GdpaShape s;
    s.lq = n, s.lk = n, s.heads = m_.heads_, s.dh = m_.d_ / m_.heads_;
    s.window = info.window;
    s.block = info.block;
    s.post_scale = info.self_post;
    return s;
  }
  const T* SelfRope(int j) const { return m_.seqs_[j].rope ? m_.template Rope<T>() : nullptr; }

 private:
  const GemModel& m_;
  const ParamView<T>& p_;
  SampleTape<T>& t_;
};

}  // namespace

template <typename T>
void GemModel::Forward(const ParamView<T>& p, const SampleInput<T>& in, SampleTape<T>& t, T* logits) const {
  Pass<T> pass(*this, p, t);
  const int d = d_, F = num_features_;
  t.dense_out.resize(static_cast<size_t>(n_d_) * d);
  dense_proj_.Forward(p, in.dense, 1, t.dense_out.data());
  t.z0.assign(in.pooled, in.pooled + static_cast<size_t>(F) * d);
  t.z0.insert(t.z0.end(), t.dense_out.begin(), t.dense_out.end());
  t.x.resize(static_cast<size_t>(n_x_) * d);
  lce_in_.Forward(p, t.z0.data(), t.x.data());
  t.layers.resize(layers_.size());
  const int J = num_sequences();
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& layer = layers_[l];
    LayerTape<T>& lt = t.layers[l];
    pass.CrossForward(layer.cross, lt.cross, l == 0 ? &in : nullptr);
    pass.WukongForward(layer.wukong, lt.cross, lt.wukong);  // writes t.x = X'
    lt.seq.resize(J);
    for (int j = 0; j < J; ++j) pass.SeqForward(layer, j, lt.cross.x_sum, lt.seq[j]);
  }
  pass.CrossForward(final_cross_, t.final_cross, layers_.empty() ? &in : nullptr);
  t.hin = t.final_cross.x_sum;
  for (int j = 0; j < J; ++j) t.hin.insert(t.hin.end(), t.final_cross.seq[j].s_sum.begin(), t.final_cross.seq[j].s_sum.end());
  t.head_u.resize(head_.size());
  t.head_a.resize(head_.size());
  const T* a = t.hin.data();
  for (size_t i = 0; i < head_.size(); ++i) {
    t.head_u[i].resize(head_[i].out);
    head_[i].Forward(p, a, 1, t.head_u[i].data());
    if (i + 1 < head_.size()) {
      t.head_a[i].resize(head_[i].out);
      GeluForward(t.head_u[i].data(), t.head_u[i].size(), t.head_a[i].data());
      a = t.head_a[i].data();
    }
  }
  std::copy(t.head_u.back().begin(), t.head_u.back().end(), logits);
}

template <typename T>
void GemModel::Backward(const ParamView<T>& p, const SampleInput<T>& in, SampleTape<T>& t, const T* dlogits,
                        SampleInputGrad<T>& grad) const {
  Pass<T> pass(*this, p, t);
  const int d = d_, F = num_features_, J = num_sequences();
  const int n_sum = n_s_ + k_p_ + k_r_;
  // Head.
  std::vector<T> da(dlogits, dlogits + num_tasks_);
  for (size_t i = head_.size(); i-- > 0;) {
    std::vector<T> du = da;
    if (i + 1 < head_.size()) {
      du.assign(da.size(), T(0));
      GeluBackward(t.head_u[i].data(), da.data(), da.size(), du.data());
    }
    std::vector<T> dprev(head_[i].in, T(0));
    head_[i].Backward(p, i == 0 ? t.hin.data() : t.head_a[i - 1].data(), du.data(), 1, dprev.data(), t.scratch);
    da = std::move(dprev);
  }
  std::vector<T> dx_sum(da.begin(), da.begin() + static_cast<long>(n_s_) * d);
  std::vector<std::vector<T>> ds_sum(J);
  for (int j = 0; j < J; ++j)
    ds_sum[j].assign(da.begin() + static_cast<long>(n_s_ + j * n_sum) * d, da.begin() + static_cast<long>(n_s_ + (j + 1) * n_sum) * d);
  std::vector<std::vector<T>> ds(J);
  for (int j = 0; j < J; ++j) ds[j].assign(t.s[j].size(), T(0));
  std::vector<T> dx(static_cast<size_t>(n_x_) * d, T(0));
  grad.events.resize(J);
  pass.CrossBackward(final_cross_, t.final_cross, dx_sum, ds_sum, ds, dx, layers_.empty() ? &grad : nullptr);
  for (size_t l = layers_.size(); l-- > 0;) {
    const Layer& layer = layers_[l];
    const LayerTape<T>& lt = t.layers[l];
    dx_sum.assign(static_cast<size_t>(n_s_) * d, T(0));
    for (int j = J; j-- > 0;) pass.SeqBackward(layer, j, lt.cross.x_sum, lt.seq[j], ds[j], dx_sum);
    std::vector<T> dx_in;
    pass.WukongBackward(layer.wukong, lt.wukong, dx, dx_in, ds_sum);
    dx = std::move(dx_in);
    pass.CrossBackward(layer.cross, lt.cross, dx_sum, ds_sum, ds, dx, l == 0 ? &grad : nullptr);
  }
  std::vector<T> dz0(static_cast<size_t>(F + n_d_) * d, T(0));
  lce_in_.Backward(p, t.z0.data(), dx.data(), dz0.data());
  grad.pooled.assign(dz0.begin(), dz0.begin() + static_cast<long>(F) * d);
  dense_proj_.Backward(p, in.dense, dz0.data() + static_cast<size_t>(F) * d, 1, static_cast<T*>(nullptr), t.scratch);
}

template SampleTape<float>* GemModel::NewTape<float>();
template SampleTape<double>* GemModel::NewTape<double>();
template void GemModel::DeleteTape<float>(SampleTape<float>*);
template void GemModel::DeleteTape<double>(SampleTape<double>*);
template void GemModel::Forward<float>(const ParamView<float>&, const SampleInput<float>&, SampleTape<float>&, float*) const;
template void GemModel::Forward<double>(const ParamView<double>&, const SampleInput<double>&, SampleTape<double>&,
                                        double*) const;
template void GemModel::Backward<float>(const ParamView<float>&, const SampleInput<float>&, SampleTape<float>&,
                                        const float*, SampleInputGrad<float>&) const;
template void GemModel::Backward<double>(const ParamView<double>&, const SampleInput<double>&, SampleTape<double>&,
                                         const double*, SampleInputGrad<double>&) const;

}  // namespace gemtb::reference::model
