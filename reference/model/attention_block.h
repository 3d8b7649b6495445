// One attention use of the reference model: projections, QK-norm, optional RoPE, GDPA (SiLU) and
// the output projection. Used three ways: PMA (learned seeds over the sequence), the
// sequence's cross-attention to X_sum (a), and windowed/block self-attention with RoPE (b).
#ifndef GEMTB_REFERENCE_MODEL_ATTENTION_BLOCK_H_
#define GEMTB_REFERENCE_MODEL_ATTENTION_BLOCK_H_

#include <string>
#include <vector>

#include "reference/model/gdpa.h"
#include "reference/model/layers.h"

namespace gemtb::reference::model {

template <typename T>
struct AttnTape {
  std::vector<T> q, k, v;        // projections [L, d]
  std::vector<T> qn, kn;         // QK-normed, before RoPE
  std::vector<T> qr, kr;         // after RoPE (what GDPA reads)
  std::vector<T> q_inv, k_inv;   // per (token, head) 1/rms
  std::vector<T> o;              // GDPA output [Lq, d]
};

struct AttnBlock {
  Linear wq, wk, wv, wo;
  int heads = 0, dh = 0;

  static AttnBlock Bind(const ParamLayout& layout, const std::string& name, int d, int heads) {
    const gemtb::model::AttentionSlices s = gemtb::model::AttentionAt(layout, name, d);
    auto linear = [](const gemtb::model::LinearSlices& l) {
      Linear x;
      x.w = l.w, x.b = l.b, x.in = l.in, x.out = l.out;
      return x;
    };
    AttnBlock a;
    a.wq = linear(s.wq);
    a.wk = linear(s.wk);
    a.wv = linear(s.wv);
    a.wo = linear(s.wo);
    a.heads = heads;
    a.dh = d / heads;
    return a;
  }
  int d() const { return heads * dh; }

  // y [lq, d] = Wo GDPA(rope(norm(xq Wq)), rope(norm(xkv Wk)), xkv Wv) + bo. `rope` (a RopeTable of
  // at least max(lq, lk) rows) may be null; shape.lq/lk/heads/dh must match.
  template <typename T>
  void Forward(const ParamView<T>& p, const GdpaShape& shape, const T* xq, const T* xkv, const T* rope,
               AttnTape<T>& t, T* y) const {
    const size_t nq = static_cast<size_t>(shape.lq) * d(), nk = static_cast<size_t>(shape.lk) * d();
    t.q.resize(nq), t.qn.resize(nq), t.o.resize(nq), t.q_inv.resize(static_cast<size_t>(shape.lq) * heads);
    t.k.resize(nk), t.v.resize(nk), t.kn.resize(nk), t.k_inv.resize(static_cast<size_t>(shape.lk) * heads);
    wq.Forward(p, xq, shape.lq, t.q.data());
    wk.Forward(p, xkv, shape.lk, t.k.data());
    wv.Forward(p, xkv, shape.lk, t.v.data());
    HeadRmsNormForward(t.q.data(), shape.lq, heads, dh, t.qn.data(), t.q_inv.data());
    HeadRmsNormForward(t.k.data(), shape.lk, heads, dh, t.kn.data(), t.k_inv.data());
    t.qr = t.qn;
    t.kr = t.kn;
    if (rope) {
      RopeForward(rope, shape.lq, heads, dh, t.qr.data());
      RopeForward(rope, shape.lk, heads, dh, t.kr.data());
    }
    GdpaForward(shape, t.qr.data(), t.kr.data(), t.v.data(), t.o.data());
    wo.Forward(p, t.o.data(), shape.lq, y);
  }

  // dxq, dxkv += input gradients for dy [lq, d] (dxkv may alias nothing else; either may be null).
  template <typename T>
  void Backward(const ParamView<T>& p, const GdpaShape& shape, const T* xq, const T* xkv, const T* rope,
                const AttnTape<T>& t, const T* dy, T* dxq, T* dxkv, std::vector<T>& scratch) const {
    const size_t nq = static_cast<size_t>(shape.lq) * d(), nk = static_cast<size_t>(shape.lk) * d();
    std::vector<T> d_o(nq, T(0));
    wo.Backward(p, t.o.data(), dy, shape.lq, d_o.data(), scratch);
    std::vector<T> dqr(nq, T(0)), dkr(nk, T(0)), dv(nk, T(0));
    GdpaBackward(shape, t.qr.data(), t.kr.data(), t.v.data(), d_o.data(), dqr.data(), dkr.data(), dv.data());
    if (rope) {
      RopeBackward(rope, shape.lq, heads, dh, dqr.data());
      RopeBackward(rope, shape.lk, heads, dh, dkr.data());
    }
    std::vector<T> dq(nq, T(0)), dk(nk, T(0));
    HeadRmsNormBackward(t.qn.data(), t.q_inv.data(), dqr.data(), shape.lq, heads, dh, dq.data());
    HeadRmsNormBackward(t.kn.data(), t.k_inv.data(), dkr.data(), shape.lk, heads, dh, dk.data());
    wq.Backward(p, xq, dq.data(), shape.lq, dxq, scratch);
    wk.Backward(p, xkv, dk.data(), shape.lk, dxkv, scratch);
    wv.Backward(p, xkv, dv.data(), shape.lk, dxkv, scratch);
  }
};

}  // namespace gemtb::reference::model

#endif  // GEMTB_REFERENCE_MODEL_ATTENTION_BLOCK_H_
