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

template <bool kEmulate>
struct ScoreRow {
  const AttentionPlan& plan;
  const AttentionInputs& in;
  BiasLocator bias;
  const double* q;  // rotated Q (or the input)
  const double* k;  // rotated K (or the input)
  Rounding<kEmulate> round;

  // s[j - r.begin] for the keys of `r`.
  void operator()(int64_t b, int64_t h, int64_t i, KeyRange r, double* s) const {
    const OutputSequence& seq = plan.out[b];
    const int64_t hk = h / (plan.heads / plan.kv_heads);
    const int64_t shift = bias.Shift(seq);
    const double* qi = q + ((seq.q_begin + i) * plan.heads + h) * plan.dqk;
    const double pre = round.Acc(plan.pre_scale);
    const bool has_bias = plan.dense_heads || plan.rel_heads || plan.ts_heads;
    for (int64_t j = r.begin; j < r.end; ++j) {
      const double* kj = k + ((seq.kv_begin + j) * plan.kv_heads + hk) * plan.dqk;
      double z = round.Acc(Dot(qi, kj, plan.dqk));
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
