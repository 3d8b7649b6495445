#include "reference/attention/plan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/strings/str_cat.h"
#include "model/attention/jagged_checks.h"
#include "model/common/status_macros.h"

namespace gemtb::reference {
namespace {

using checks::CheckOffsets;
using checks::CheckRank;
using checks::ShapeString;

absl::Status Bad(const std::string& message) { return absl::InvalidArgumentError(message); }

template <typename T>
absl::Status CheckShape(const TensorView<T>& t, absl::string_view field,
                        const std::vector<int64_t>& want, absl::string_view layout) {
  GEMTB_RETURN_IF_ERROR(CheckRank(t, field, want.size(), layout));
  if (t.shape != want) {
    return Bad(absl::StrCat(field, ": shape ", ShapeString(t.shape), ", expected ",
                            ShapeString(want), " ", layout));
  }
  return absl::OkStatus();
}

absl::Status CheckScale(const std::optional<double>& s, absl::string_view field) {
  if (s && !std::isfinite(*s)) return Bad(absl::StrCat(field, "=", *s, ": must be finite"));
  return absl::OkStatus();
}

}  // namespace

int TimeBucket(const AttentionPlan& plan, int64_t ts_from, int64_t ts_to) {
  // |ts_from - ts_to| exactly, for any two int64 values: the true difference fits in uint64.
  const uint64_t mag = ts_from >= ts_to
                           ? static_cast<uint64_t>(ts_from) - static_cast<uint64_t>(ts_to)
                           : static_cast<uint64_t>(ts_to) - static_cast<uint64_t>(ts_from);
  const auto* first = plan.ts_thresholds.data();
  const auto* last = first + plan.ts_thresholds.size();
  return static_cast<int>(std::upper_bound(first, last, mag, [](uint64_t m, int64_t t) {
                            return m < static_cast<uint64_t>(t);
                          }) - first);
}

absl::StatusOr<AttentionPlan> MakePlan(const AttentionInputs& in, const AttentionOptions& o) {
  AttentionPlan p;
  GEMTB_RETURN_IF_ERROR(CheckRank(in.q, "q", 3, "[TQ,H,Dqk]"));
  GEMTB_RETURN_IF_ERROR(CheckRank(in.k, "k", 3, "[TK,Hkv,Dqk]"));
  GEMTB_RETURN_IF_ERROR(CheckRank(in.v, "v", 3, "[TK,Hkv,Dv]"));
  p.tq = in.q.shape[0];
  p.heads = in.q.shape[1];
  p.dqk = in.q.shape[2];
  p.tk = in.k.shape[0];
  p.kv_heads = in.k.shape[1];
  p.dv = in.v.shape[2];
  if (p.heads < 1) return Bad(absl::StrCat("q: H=", p.heads, " must be >= 1"));
  if (p.kv_heads < 1) return Bad(absl::StrCat("k: Hkv=", p.kv_heads, " must be >= 1"));
  if (p.dqk < 1) return Bad(absl::StrCat("q: Dqk=", p.dqk, " must be >= 1"));
  if (p.dv < 1) return Bad(absl::StrCat("v: Dv=", p.dv, " must be >= 1"));
  // Heads and head dims size the task list, scratch rows and outputs even when a tensor is empty
  // (q [0, 2^62, 2] has no values to bound H), so they are capped like the lengths below.
  constexpr int64_t kMaxHeadsOrDim = int64_t{1} << 16;
  for (const auto& [field, value] : {std::pair{"q: H", p.heads}, {"k: Hkv", p.kv_heads},
                                     {"q: Dqk", p.dqk}, {"v: Dv", p.dv}}) {
    if (value > kMaxHeadsOrDim) return Bad(absl::StrCat(field, "=", value, " exceeds 2^16"));
  }
  if (in.k.shape[2] != p.dqk) {
    return Bad(absl::StrCat("k: Dqk=", in.k.shape[2], " differs from q's Dqk=", p.dqk));
  }
  if (in.v.shape[0] != p.tk || in.v.shape[1] != p.kv_heads) {
    return Bad(absl::StrCat("v: shape ", ShapeString(in.v.shape), " disagrees with k's [TK,Hkv]=[",
                            p.tk, ", ", p.kv_heads, "]"));
  }
  if (p.heads % p.kv_heads != 0) {
    return Bad(absl::StrCat("k: H=", p.heads, " is not divisible by Hkv=", p.kv_heads));
  }
  GEMTB_RETURN_IF_ERROR(CheckScale(o.pre_scale, "pre_scale"));
  GEMTB_RETURN_IF_ERROR(CheckScale(o.post_scale, "post_scale"));
  if (o.window_left < -1) return Bad(absl::StrCat("window_left=", o.window_left, ": must be >= -1"));
  if (o.window_right < -1) return Bad(absl::StrCat("window_right=", o.window_right, ": must be >= -1"));
  if (o.mask == MaskKind::kBlock && o.block < 1) {
    return Bad(absl::StrCat("block=", o.block, ": must be >= 1"));
  }
  if (static_cast<int>(o.act) < 0 || static_cast<int>(o.act) >= kNumActivations) {
    return Bad(absl::StrCat("act=", static_cast<int>(o.act), ": unknown activation code"));
  }
  // 2^31 keeps every index derived from the maxima (2*maxL-1, dense bias planes) far from overflow;
  // the GPU kernels take int32 lengths anyway.
  constexpr int64_t kMaxLength = int64_t{1} << 31;
  if (in.max_lq < 0 || in.max_lq > kMaxLength) {
    return Bad(absl::StrCat("max_lq=", in.max_lq, ": must be in [0, 2^31]"));
  }
  if (in.max_lk < 0 || in.max_lk > kMaxLength) {
    return Bad(absl::StrCat("max_lk=", in.max_lk, ": must be in [0, 2^31]"));
  }
  p.max_lq = in.max_lq;
  p.max_lk = in.max_lk;
  p.max_l = std::max(p.max_lq, p.max_lk);

  absl::StatusOr<std::vector<int64_t>> lq = CheckOffsets(in.q_offsets, "q_offsets", p.tq, "TQ");
  if (!lq.ok()) return lq.status();
  absl::StatusOr<std::vector<int64_t>> lk = CheckOffsets(in.kv_offsets, "kv_offsets", p.tk, "TK");
  if (!lk.ok()) return lk.status();
  for (size_t b = 0; b < lq->size(); ++b) {
    if ((*lq)[b] > p.max_lq) {
      return Bad(absl::StrCat("max_lq=", p.max_lq, " < length ", (*lq)[b], " of q sequence ", b));
    }
  }
  for (size_t b = 0; b < lk->size(); ++b) {
    if ((*lk)[b] > p.max_lk) {
      return Bad(absl::StrCat("max_lk=", p.max_lk, " < length ", (*lk)[b], " of kv sequence ", b));
    }
  }
  const int64_t nq = static_cast<int64_t>(lq->size());
  const int64_t nkv = static_cast<int64_t>(lk->size());
  if (o.broadcast_q && nq != 1) {
    return Bad(absl::StrCat("q_offsets: broadcast_q needs exactly one q sequence, got ", nq));
  }

  // Pairing: ks(b) from kv_index when given, qs(b) = 0 under broadcast_q.
  std::vector<int64_t> ks;
  if (in.kv_index.present()) {
    GEMTB_RETURN_IF_ERROR(CheckRank(in.kv_index, "kv_index", 1, "[B]"));
    for (size_t b = 0; b < in.kv_index.data.size(); ++b) {
      const int64_t kb = in.kv_index.data[b];
      if (kb < 0 || kb >= nkv) {
        return Bad(absl::StrCat("kv_index[", b, "]=", kb, ": out of range [0, ", nkv, ")"));
      }
      ks.push_back(kb);
    }
  } else {
    for (int64_t b = 0; b < nkv; ++b) ks.push_back(b);
  }
  const int64_t num_out = static_cast<int64_t>(ks.size());
  if (!o.broadcast_q && nq != num_out) {
    return Bad(absl::StrCat("q_offsets: ", nq, " q sequences but ", num_out,
                            in.kv_index.present() ? " entries in kv_index" : " kv sequences"));
  }
  p.kv_readers.assign(nkv, {});
  int64_t out_row = 0;
  for (int64_t b = 0; b < num_out; ++b) {
    OutputSequence s;
    const int64_t qb = o.broadcast_q ? 0 : b;
    s.q_begin = in.q_offsets.data[qb];
    s.lq = (*lq)[qb];
    s.kv_seq = ks[b];
    s.kv_begin = in.kv_offsets.data[s.kv_seq];
    s.lk = (*lk)[s.kv_seq];
    s.out_begin = out_row;
    out_row += s.lq;
    p.out.push_back(s);
    p.kv_readers[s.kv_seq].push_back(b);
  }
  p.to = out_row;

  const bool softmax = o.act == Activation::kSoftmax;
  p.pre_scale = o.pre_scale.value_or(softmax ? 1.0 / std::sqrt(static_cast<double>(p.dqk)) : 1.0);
  p.post_scale = o.post_scale.value_or(1.0);

  // Biases.
  if (in.bias_dense.present()) {
    GEMTB_RETURN_IF_ERROR(CheckRank(in.bias_dense, "bias_dense", 4, "[B,Hb,maxLq,maxLk]"));
    const int64_t hb = in.bias_dense.shape[1];
    if (hb < 1 || p.heads % hb != 0) {
      return Bad(absl::StrCat("bias_dense: Hb=", hb, " must divide H=", p.heads));
    }
    GEMTB_RETURN_IF_ERROR(CheckShape(in.bias_dense, "bias_dense", {num_out, hb, p.max_lq, p.max_lk},
                                     "[B,Hb,maxLq,maxLk]"));
    p.dense_heads = hb;
  }
  if (in.bias_rel.present()) {
    GEMTB_RETURN_IF_ERROR(CheckRank(in.bias_rel, "bias_rel", 2, "[Hr,2*maxL-1]"));
    const int64_t hr = in.bias_rel.shape[0];
    if (hr != 1 && hr != p.heads) {
      return Bad(absl::StrCat("bias_rel: Hr=", hr, " must be 1 or H=", p.heads));
    }
    GEMTB_RETURN_IF_ERROR(CheckShape(in.bias_rel, "bias_rel", {hr, std::max<int64_t>(2 * p.max_l - 1, 0)},
                                     "[Hr,2*maxL-1]"));
    p.rel_heads = hr;
  }
  if (in.ts.present() != in.bias_ts.present()) {
    return Bad(in.ts.present() ? "bias_ts: missing; ts needs its table [Ht,129]"
                               : "ts: missing; bias_ts needs per-token timestamps ts [TQ]");
  }
  if (in.ts.present()) {
    if (o.broadcast_q || in.kv_index.present() || in.q_offsets.data != in.kv_offsets.data) {
      return Bad("ts: the time bias is defined for self-attention only (same q and kv offsets, "
                 "no broadcast_q, no kv_index)");
    }
    GEMTB_RETURN_IF_ERROR(CheckShape(in.ts, "ts", {p.tq}, "[TQ]"));
    GEMTB_RETURN_IF_ERROR(CheckRank(in.bias_ts, "bias_ts", 2, "[Ht,129]"));
    const int64_t ht = in.bias_ts.shape[0];
    if (ht != 1 && ht != p.heads) {
      return Bad(absl::StrCat("bias_ts: Ht=", ht, " must be 1 or H=", p.heads));
    }
    GEMTB_RETURN_IF_ERROR(CheckShape(in.bias_ts, "bias_ts", {ht, kTimeBuckets}, "[Ht,129]"));
    p.ts_heads = ht;
    for (int k = 1; k < kTimeBuckets; ++k) {
      p.ts_thresholds[k - 1] = static_cast<int64_t>(std::ceil(std::exp(0.301 * k)));
    }
  }
  // RoPE: interleaved pairs need an even head dim.
  if (in.rope_q.present() != in.rope_k.present()) {
    return Bad(in.rope_q.present() ? "rope_k: missing; rope_q needs rope_k"
                                   : "rope_q: missing; rope_k needs rope_q");
  }
  if (in.rope_v.present() && !in.rope_q.present()) {
    return Bad("rope_v: given without rope_q and rope_k");
  }
  if (in.rope_q.present()) {
    if (p.dqk % 2 != 0) return Bad(absl::StrCat("rope_q: RoPE needs an even Dqk, got ", p.dqk));
    GEMTB_RETURN_IF_ERROR(CheckShape(in.rope_q, "rope_q", {p.tq, p.dqk}, "[TQ,Dqk]"));
    GEMTB_RETURN_IF_ERROR(CheckShape(in.rope_k, "rope_k", {p.tk, p.dqk}, "[TK,Dqk]"));
    p.rope = true;
  }
  if (in.rope_v.present()) {
    if (p.dv % 2 != 0) return Bad(absl::StrCat("rope_v: RoPE needs an even Dv, got ", p.dv));
    GEMTB_RETURN_IF_ERROR(CheckShape(in.rope_v, "rope_v", {p.tk, p.dv}, "[TK,Dv]"));
    p.rope_v = true;
  }
  return p;
}

absl::Status ValidateAttention(const AttentionInputs& in, const AttentionOptions& options) {
  return MakePlan(in, options).status();
}

}  // namespace gemtb::reference
