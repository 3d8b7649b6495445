// Forward pass of the oracle. One oneTBB task per (output sequence, head)
// owns its O rows and LSE entries; every sum inside runs in a fixed order.
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "reference/attention/activation.h"
#include "reference/attention/attention.h"
#include "reference/attention/kernel_utils.h"
#include "reference/attention/prepared.h"
#include "reference/attention/scores.h"

namespace gemtb::reference {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Tasks (b, h) ordered heaviest first, so the last tasks to start are short ones.
std::vector<std::pair<int64_t, int64_t>> HeavyFirstTasks(const AttentionPlan& plan) {
  std::vector<std::pair<int64_t, int64_t>> tasks;
  for (int64_t b = 0; b < static_cast<int64_t>(plan.out.size()); ++b) {
    for (int64_t h = 0; h < plan.heads; ++h) tasks.emplace_back(b, h);
  }
  std::stable_sort(tasks.begin(), tasks.end(), [&](const auto& x, const auto& y) {
    const OutputSequence& a = plan.out[x.first];
    const OutputSequence& c = plan.out[y.first];
    return a.lq * std::max<int64_t>(a.lk, 1) > c.lq * std::max<int64_t>(c.lk, 1);
  });
  return tasks;
}

template <bool kEmulate>
void ForwardBlock(const PreparedAttention& p, const AttentionInputs& in, const AttentionOptions& o,
                  int64_t b, int64_t h, AttentionForwardResult& out) {
  const AttentionPlan& plan = p.plan;
  const Rounding<kEmulate> round{in.input_type};
  const ScoreRow<kEmulate> scores{plan, in, BiasLocator{&plan, &o, in.ts.data.data()}, p.q, p.k, round};
  const OutputSequence& seq = plan.out[b];
  if (seq.lq == 0) return;  // nothing to write; Dv (maybe backed by no data) must not size scratch
  const int64_t hk = h / (plan.heads / plan.kv_heads);
  const bool softmax = o.act == Activation::kSoftmax;
  const double post = round.Acc(plan.post_scale);
  std::vector<double> s(static_cast<size_t>(seq.lk));
  std::vector<double> prob(static_cast<size_t>(seq.lk));
  std::vector<double> acc(static_cast<size_t>(plan.dv));

  for (int64_t i = 0; i < seq.lq; ++i) {
    const int64_t row = seq.out_begin + i;
    double* o_row = out.o.data() + (row * plan.heads + h) * plan.dv;
    const KeyRange r = ValidKeys(o, i, seq.lq, seq.lk);
    const int64_t n = r.end - r.begin;
    scores(b, h, i, r, s.data());
    std::fill(acc.begin(), acc.end(), 0.0);
    double row_sum = 1.0;  // softmax normaliser (emulate mode divides at the end)
    double lse = kNegInf;
    if (softmax) {
      if (n > 0) {
        double m = s[0];
        for (int64_t t = 1; t < n; ++t) m = std::max(m, s[t]);
        double l = 0.0;
        for (int64_t t = 0; t < n; ++t) {
          prob[t] = round.Acc(std::exp(round.Acc(s[t] - m)));
          l = round.Acc(l + prob[t]);
        }
        if constexpr (kEmulate) {
          // FlashAttention order: unnormalised P rounded to the input type for PV, divide at the end.
          for (int64_t t = 0; t < n; ++t) prob[t] = round.Store(prob[t]);
          row_sum = l;
        } else {
          for (int64_t t = 0; t < n; ++t) prob[t] = post * (prob[t] / l);
        }
        lse = round.Acc(m + round.Acc(std::log(l)));
      }
    } else {
      for (int64_t t = 0; t < n; ++t) {
        prob[t] = round.Store(round.Acc(post * round.Acc(ActivationValue(o.act, s[t]))));
      }
    }
    for (int64_t t = 0; t < n; ++t) {
      const double* vj = p.v + ((seq.kv_begin + r.begin + t) * plan.kv_heads + hk) * plan.dv;
      Axpy(prob[t], vj, acc.data(), plan.dv);
    }
    for (int64_t d = 0; d < plan.dv; ++d) {
      double value = round.Acc(acc[d]);
      if constexpr (kEmulate) {
        if (softmax) value = n > 0 ? round.Acc(round.Acc(value / row_sum) * post) : 0.0;
      }
      o_row[d] = round.Store(value);
    }
    if (softmax) out.lse[h * plan.to + row] = lse;
  }
}

template <bool kEmulate>
void RunForward(const PreparedAttention& p, const AttentionInputs& in, const AttentionOptions& o,
                AttentionForwardResult& out) {
  const std::vector<std::pair<int64_t, int64_t>> tasks = HeavyFirstTasks(p.plan);
  tbb::parallel_for(
      tbb::blocked_range<size_t>(0, tasks.size(), 1),
      [&](const tbb::blocked_range<size_t>& range) {
        for (size_t t = range.begin(); t != range.end(); ++t) {
          ForwardBlock<kEmulate>(p, in, o, tasks[t].first, tasks[t].second, out);
        }
      },
      tbb::simple_partitioner());
}

}  // namespace

absl::StatusOr<AttentionForwardResult> AttentionForward(const AttentionInputs& in,
                                                        const AttentionOptions& options,
                                                        const ExecutionOptions& exec) {
  absl::StatusOr<PreparedAttention> prepared = Prepare(in, options, exec.precision);
  if (!prepared.ok()) return prepared.status();
  const AttentionPlan& plan = prepared->plan;
  AttentionForwardResult out;
  out.o_shape = {plan.to, plan.heads, plan.dv};
  out.o.assign(static_cast<size_t>(plan.to * plan.heads * plan.dv), 0.0);
  if (options.act == Activation::kSoftmax) {
    out.lse_shape = {plan.heads, plan.to};
    out.lse.assign(static_cast<size_t>(plan.heads * plan.to), kNegInf);
  }
  RunWithThreads(exec.threads, [&] {
    if (exec.precision == Precision::kEmulate) {
      RunForward<true>(*prepared, in, options, out);
    } else {
      RunForward<false>(*prepared, in, options, out);
    }
  });
  return out;
}

absl::StatusOr<double> AttentionForwardFlops(const AttentionInputs& in, const AttentionOptions& options) {
  absl::StatusOr<AttentionPlan> plan = MakePlan(in, options);
  if (!plan.ok()) return plan.status();
  double pairs = 0;
  for (const OutputSequence& s : plan->out) {
    for (int64_t i = 0; i < s.lq; ++i) {
      const KeyRange r = ValidKeys(options, i, s.lq, s.lk);
      pairs += static_cast<double>(r.end - r.begin);
    }
  }
  return 2.0 * static_cast<double>(plan->heads * (plan->dqk + plan->dv)) * pairs;
}

}  // namespace gemtb::reference
