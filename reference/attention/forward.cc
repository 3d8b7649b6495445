// Forward pass of the oracle. One oneTBB task per (output sequence, head)
// owns its O rows and LSE entries; every sum inside runs in a fixed order.
#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "reference/attention/activation.h"
#include "reference/attention/attention.h"
#include "reference/attention/kernel_utils.h"
#include "reference/attention/prepared.h"
#include "reference/attention/row_kernels.h"
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

// sum[c] = p[c][0] + p[c][1] + ... + p[c][n[c] - 1], added in that order, for c < count: four rows
// at a time, so that four chains of dependent additions overlap.
void SumRows(double* const* p, const int64_t* n, int count, double* sum) {
  int c = 0;
  for (; c + 4 <= count; c += 4) {
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    const int64_t common = std::min(std::min(n[c], n[c + 1]), std::min(n[c + 2], n[c + 3]));
    for (int64_t t = 0; t < common; ++t) {
      s0 += p[c][t];
      s1 += p[c + 1][t];
      s2 += p[c + 2][t];
      s3 += p[c + 3][t];
    }
    double* const partial[4] = {&s0, &s1, &s2, &s3};
    for (int e = 0; e < 4; ++e) {
      for (int64_t t = common; t < n[c + e]; ++t) *partial[e] += p[c + e][t];
      sum[c + e] = *partial[e];
    }
  }
  for (; c < count; ++c) {
    double s = 0.0;
    for (int64_t t = 0; t < n[c]; ++t) s += p[c][t];
    sum[c] = s;
  }
}

// Working memory of one thread, kept across its tasks so that a task touches no fresh pages.
struct ForwardScratch {
  std::vector<double> panels;        // the task's Q, K and V rows (PackRows)
  std::vector<double> s, prob, acc;  // per row of a block: scores, probabilities, P.V

  // Room for n doubles in v, starting on a 64-byte boundary: a 64-byte vector load that straddles two
  // cache lines costs two (malloc returns 16-byte alignment).
  static double* Reserve(std::vector<double>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n + kAlign) v.resize(static_cast<size_t>(n + kAlign));
    return RoundUp(v.data());
  }
  static double* RoundUp(double* p) {
    const uintptr_t mask = kAlign * sizeof(double) - 1;
    return reinterpret_cast<double*>((reinterpret_cast<uintptr_t>(p) + mask) & ~mask);
  }
  static int64_t RoundUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
  static constexpr int64_t kAlign = 8;  // doubles in 64 bytes
};

template <bool kEmulate>
void ForwardBlock(const PreparedAttention& p, const AttentionInputs& in, const AttentionOptions& o,
                  int64_t b, int64_t h, ForwardScratch& scratch, AttentionForwardResult& out) {
  const AttentionPlan& plan = p.plan;
  const Rounding<kEmulate> round{in.input_type};
  const OutputSequence& seq = plan.out[b];
  if (seq.lq == 0) return;  // nothing to write; Dv (maybe backed by no data) must not size scratch
  const int64_t hk = h / (plan.heads / plan.kv_heads);
  // This head's Q, K and V rows, each contiguous (PackRows says why).
  const int64_t q_size = ForwardScratch::RoundUp(seq.lq * plan.dqk);
  const int64_t k_size = ForwardScratch::RoundUp(seq.lk * plan.dqk);
  double* panels = ForwardScratch::Reserve(scratch.panels, q_size + k_size + seq.lk * plan.dv);
  const int64_t q_stride = plan.heads * plan.dqk, k_stride = plan.kv_heads * plan.dqk;
  const int64_t v_stride = plan.kv_heads * plan.dv;
  const RowPanel q =
      PackRows(RowsAt(p.q, (seq.q_begin * plan.heads + h) * plan.dqk), q_stride, seq.lq, plan.dqk, panels);
  const RowPanel k = PackRows(RowsAt(p.k, (seq.kv_begin * plan.kv_heads + hk) * plan.dqk), k_stride, seq.lk,
                              plan.dqk, panels + q_size);
  const RowPanel v = PackRows(RowsAt(p.v, (seq.kv_begin * plan.kv_heads + hk) * plan.dv), v_stride, seq.lk, plan.dv,
                              panels + q_size + k_size);
  const ScoreRow<kEmulate> scores{plan, in, BiasLocator{&plan, &o, in.ts.data.data()}, round, b, h, q, k};
  const bool softmax = o.act == Activation::kSoftmax;
  const double post = round.Acc(plan.post_scale);
  const RowKernels& kernels = Kernels();
  // Rows go in blocks of kRowBlock; a block whose rows share their key range computes Q.K and P.V
  // for all of them at once (every value as a row alone would get it).
  const int64_t lk_size = ForwardScratch::RoundUp(seq.lk);
  const int64_t dv_size = ForwardScratch::RoundUp(plan.dv);
  double* s = ForwardScratch::Reserve(scratch.s, kRowBlock * lk_size);
  double* prob = ForwardScratch::Reserve(scratch.prob, kRowBlock * lk_size);
  double* acc = ForwardScratch::Reserve(scratch.acc, kRowBlock * dv_size);
  double* s_rows[kRowBlock];
  double* prob_rows[kRowBlock];
  double* acc_rows[kRowBlock];
  for (int c = 0; c < kRowBlock; ++c) {
    s_rows[c] = s + c * lk_size;
    prob_rows[c] = prob + c * lk_size;
    acc_rows[c] = acc + c * dv_size;
  }

  for (int64_t i0 = 0; i0 < seq.lq; i0 += kRowBlock) {
    const int count = static_cast<int>(std::min<int64_t>(kRowBlock, seq.lq - i0));
    KeyRange r[kRowBlock];
    bool shared = true;
    for (int c = 0; c < count; ++c) {
      r[c] = ValidKeys(o, i0 + c, seq.lq, seq.lk);
      shared = shared && r[c].begin == r[0].begin && r[c].end == r[0].end;
    }
    if (shared) {
      scores.Block(i0, count, r[0], s_rows);
    } else {
      for (int c = 0; c < count; ++c) scores(i0 + c, r[c], s_rows[c]);
    }
    double row_sum[kRowBlock];  // softmax normaliser (emulate mode divides at the end)
    double row_max[kRowBlock];
    double lse[kRowBlock];
    int64_t n[kRowBlock];
    for (int c = 0; c < count; ++c) {
      n[c] = r[c].end - r[c].begin;
      const double* sc = s_rows[c];
      double* pc = prob_rows[c];
      std::fill(acc_rows[c], acc_rows[c] + plan.dv, 0.0);
      row_sum[c] = 0.0;
      lse[c] = kNegInf;
      if (!softmax) {
        for (int64_t t = 0; t < n[c]; ++t) {
          pc[t] = round.Store(round.Acc(post * round.Acc(ActivationValue(o.act, sc[t]))));
        }
      } else if (n[c] > 0) {
        row_max[c] = RowMax(sc, n[c]);
        if constexpr (kEmulate) {
          for (int64_t t = 0; t < n[c]; ++t) {
            pc[t] = round.Acc(SoftmaxExp(round.Acc(sc[t] - row_max[c])));
            row_sum[c] = round.Acc(row_sum[c] + pc[t]);
          }
        } else {
          kernels.exp_rows(sc, row_max[c], n[c], pc);
        }
      }
    }
    if (softmax) {
      if constexpr (!kEmulate) SumRows(prob_rows, n, count, row_sum);
      for (int c = 0; c < count; ++c) {
        if (n[c] == 0) continue;
        double* pc = prob_rows[c];
        const double l = row_sum[c];
        if constexpr (kEmulate) {
          // FlashAttention order: unnormalised P rounded to the input type for PV, divide at the end.
          for (int64_t t = 0; t < n[c]; ++t) pc[t] = round.Store(pc[t]);
        } else if (post == 1.0) {  // post * x is x, bit for bit
          for (int64_t t = 0; t < n[c]; ++t) pc[t] = pc[t] / l;
        } else {
          for (int64_t t = 0; t < n[c]; ++t) pc[t] = post * (pc[t] / l);
        }
        lse[c] = round.Acc(row_max[c] + round.Acc(std::log(l)));
      }
    }
    if (shared && r[0].end > r[0].begin) {
      kernels.axpy_rows_multi(prob_rows, count, v.Row(r[0].begin), v.stride, r[0].end - r[0].begin, plan.dv, acc_rows);
    } else if (!shared) {
      for (int c = 0; c < count; ++c) {
        if (n[c] > 0) kernels.axpy_rows(prob_rows[c], v.Row(r[c].begin), v.stride, n[c], plan.dv, acc_rows[c]);
      }
    }
    for (int c = 0; c < count; ++c) {
      const int64_t row = seq.out_begin + i0 + c;
      double* o_row = out.o.data() + (row * plan.heads + h) * plan.dv;
      for (int64_t d = 0; d < plan.dv; ++d) {
        double value = round.Acc(acc_rows[c][d]);
        if constexpr (kEmulate) {
          if (softmax) value = n[c] > 0 ? round.Acc(round.Acc(value / row_sum[c]) * post) : 0.0;
        }
        o_row[d] = round.Store(value);
      }
      if (softmax) out.lse[h * plan.to + row] = lse[c];
    }
  }
}

template <bool kEmulate>
void RunForward(const PreparedAttention& p, const AttentionInputs& in, const AttentionOptions& o,
                AttentionForwardResult& out) {
  const std::vector<std::pair<int64_t, int64_t>> tasks = HeavyFirstTasks(p.plan);
  tbb::enumerable_thread_specific<ForwardScratch> scratch;
  tbb::parallel_for(
      tbb::blocked_range<size_t>(0, tasks.size(), 1),
      [&](const tbb::blocked_range<size_t>& range) {
        for (size_t t = range.begin(); t != range.end(); ++t) {
          ForwardBlock<kEmulate>(p, in, o, tasks[t].first, tasks[t].second, scratch.local(), out);
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
