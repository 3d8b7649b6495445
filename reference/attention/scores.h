// Scores S_ij = pre_scale * (q_i . k_j + bias_ij) of one (output sequence, head) block,
// shared by the forward and the backward so both see the same bits; and where each bias term of a
// pair lives, which the backward scatters dZ to.
#ifndef GEMTB_REFERENCE_ATTENTION_SCORES_H_
#define GEMTB_REFERENCE_ATTENTION_SCORES_H_

#include <algorithm>
#include <cstdint>

#include "reference/attention/attention.h"
#include "reference/attention/kernel_utils.h"
#include "reference/attention/plan.h"
#include "reference/attention/row_kernels.h"

namespace gemtb::reference {

struct BiasLocator {
  const AttentionPlan* plan;
  const AttentionOptions* options;
  const int64_t* ts;  // per-token timestamps or nullptr

  int64_t Shift(const OutputSequence& s) const { return AlignmentShift(options->align, s.lq, s.lk); }

  int64_t Dense(int64_t b, int64_t h, int64_t i, int64_t j) const {
    const int64_t hb = h / (plan->heads / plan->dense_heads);
    return ((b * plan->dense_heads + hb) * plan->max_lq + i) * plan->max_lk + j;
  }
  int64_t Rel(int64_t h, int64_t i, int64_t j, int64_t shift) const {
    const int64_t hr = plan->rel_heads == 1 ? 0 : h;
    return hr * (2 * plan->max_l - 1) + plan->max_l - 1 + j - (i + shift);
  }
  int64_t Time(const OutputSequence& s, int64_t h, int64_t i, int64_t j) const {
    const int64_t ht = plan->ts_heads == 1 ? 0 : h;
    const int64_t from = ts[s.q_begin + std::min(i + 1, s.lq - 1)];
    return ht * kTimeBuckets + TimeBucket(*plan, from, ts[s.q_begin + j]);
  }
};

// Query rows handled together by the forward (they share each load of K and V); the backward takes
// fewer at a time.
inline constexpr int kRowBlock = 32;

// Rows of one (sequence, head) as the inner loops read them: row i at first + i * stride.
struct RowPanel {
  const double* first = nullptr;
  int64_t stride = 0;
  const double* Row(int64_t i) const { return first + i * stride; }
};

// base + offset, or null where base is null (an empty tensor has no rows to point into, and pointer
// arithmetic on null is undefined even when nothing is read).
inline const double* RowsAt(const double* base, int64_t offset) { return base ? base + offset : nullptr; }

// `rows` rows of `dim` values, row i at first + i * stride, copied next to each other into `dst`.
// In the inputs the rows of one head lie kv_heads * dim apart (4 KiB for four heads of 128 doubles),
// so a head's rows fall into a fraction of the cache sets and evict each other before they are
// reused; copied, they do not. The copy is exact, so it changes no result.
inline RowPanel PackRows(const double* first, int64_t stride, int64_t rows, int64_t dim, double* dst) {
  for (int64_t i = 0; i < rows; ++i) std::copy_n(first + i * stride, dim, dst + i * dim);
  return {dst, dim};
}

// The scores of output sequence b, head h, whose query rows and keys are q and k.
template <bool kEmulate>
struct ScoreRow {
  const AttentionPlan& plan;
  const AttentionInputs& in;
  BiasLocator bias;
  Rounding<kEmulate> round;
  int64_t b, h;
  RowPanel q;  // query row i of the sequence
  RowPanel k;  // key j of the sequence

  // s[j - r.begin] for the keys of `r`.
  void operator()(int64_t i, KeyRange r, double* s) const {
    if (r.end <= r.begin) return;
    // q_i . k_j for every key first (each a Dot), then the per-key terms.
    Kernels().dot_rows(q.Row(i), k.Row(r.begin), k.stride, r.end - r.begin, plan.dqk, s);
    Finish(i, r, s);
  }

  // The same for rows i0 .. i0 + count - 1 (count <= kRowBlock) that share the key range `r`: s[c]
  // holds row i0 + c. Each dot product is the one operator() computes.
  void Block(int64_t i0, int count, KeyRange r, double* const* s) const {
    if (r.end <= r.begin) return;
    const double* rows[kRowBlock];
    for (int c = 0; c < count; ++c) rows[c] = q.Row(i0 + c);
    Kernels().dot_rows_multi(rows, count, k.Row(r.begin), k.stride, r.end - r.begin, plan.dqk, s);
    for (int c = 0; c < count; ++c) Finish(i0 + c, r, s[c]);
  }

 private:
  // From the dot products in s to the scores: bias terms, then pre_scale.
  void Finish(int64_t i, KeyRange r, double* s) const {
    const OutputSequence& seq = plan.out[b];
    const int64_t shift = bias.Shift(seq);
    const double pre = round.Acc(plan.pre_scale);
    const bool has_bias = plan.dense_heads || plan.rel_heads || plan.ts_heads;
    for (int64_t j = r.begin; j < r.end; ++j) {
      double z = round.Acc(s[j - r.begin]);
      if (has_bias) {
        // beta = dense + rel + time (the present terms, in this order), then Z = q.k + beta.
        double beta = 0.0;
        if (plan.dense_heads) beta = round.Acc(in.bias_dense.data[bias.Dense(b, h, i, j)]);
        if (plan.rel_heads) beta = round.Acc(beta + round.Acc(in.bias_rel.data[bias.Rel(h, i, j, shift)]));
        if (plan.ts_heads) beta = round.Acc(beta + round.Acc(in.bias_ts.data[bias.Time(seq, h, i, j)]));
        z = round.Acc(z + beta);
      }
      s[j - r.begin] = round.Acc(pre * z);
    }
  }
};

}  // namespace gemtb::reference

#endif  // GEMTB_REFERENCE_ATTENTION_SCORES_H_
