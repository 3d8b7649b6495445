// Backward pass of the oracle.
//
// Phase 1, one task per output sequence b (heads in increasing order inside): recompute S, form
// dS and dZ, and accumulate each reader's contributions into scratch that the task owns: dQ rows of
// b, the K/V-row gradients that reader (b, h) produces, b's plane of dDense, b's partial rel/time
// tables. Phase 2 reduces the shared rows (GQA, kv_index, broadcast_q, bias tables) over readers in
// increasing (b, h) order, so every sum has an order fixed by the shapes alone; then the transposed
// RoPE and the final roundings.
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "reference/attention/activation.h"
#include "reference/attention/attention.h"
#include "reference/attention/kernel_utils.h"
#include "reference/attention/prepared.h"
#include "reference/attention/rope.h"
#include "reference/attention/scores.h"
#include "reference/io/npy.h"

namespace gemtb::reference {
namespace {

struct Scratch {
  std::vector<double> dq;          // [TO, H, Dqk]: reader rows, summed over keys
  std::vector<double> dk, dv;      // [RK, H, D]: per reader (b, h), the rows of K/V it reads
  std::vector<int64_t> rk_begin;   // first scratch row of reader b
  std::vector<double> d_dense;     // [B, Hb, maxLq, maxLk], owned by b
  std::vector<std::vector<double>> d_rel, d_ts;  // per b: partial tables
};

template <bool kEmulate>
void BackwardSequence(const PreparedAttention& p, const AttentionInputs& in,
                      const AttentionOptions& o, const double* d_o,
                      const AttentionForwardResult& fwd, int64_t b, Scratch& sc) {
  const AttentionPlan& plan = p.plan;
  const Rounding<kEmulate> round{in.input_type};
  const BiasLocator bias{&plan, &o, in.ts.data.data()};
  const ScoreRow<kEmulate> scores{plan, in, bias, p.q, p.k, round};
  const OutputSequence& seq = plan.out[b];
  const bool softmax = o.act == Activation::kSoftmax;
  const double pre = round.Acc(plan.pre_scale);
  const double post = round.Acc(plan.post_scale);
  const int64_t shift = bias.Shift(seq);
  std::vector<double> s(static_cast<size_t>(seq.lk));
  // The table is [Hr, 2*maxL-1], or [Hr, 0] when maxL = 0 (as validated).
  if (plan.rel_heads) {
    sc.d_rel[b].assign(static_cast<size_t>(plan.rel_heads * std::max<int64_t>(2 * plan.max_l - 1, 0)), 0.0);
  }
  if (plan.ts_heads) sc.d_ts[b].assign(static_cast<size_t>(plan.ts_heads * kTimeBuckets), 0.0);

  for (int64_t h = 0; h < plan.heads; ++h) {
    const int64_t hk = h / (plan.heads / plan.kv_heads);
    for (int64_t i = 0; i < seq.lq; ++i) {
      const int64_t row = seq.out_begin + i;
      const KeyRange r = ValidKeys(o, i, seq.lq, seq.lk);
      const int64_t n = r.end - r.begin;
      if (n == 0) continue;  // an empty row contributes exactly 0
      scores(b, h, i, r, s.data());
      const double* do_i = d_o + (row * plan.heads + h) * plan.dv;
      const double* q_i = p.q + ((seq.q_begin + i) * plan.heads + h) * plan.dqk;
      double* dq_i = sc.dq.data() + (row * plan.heads + h) * plan.dqk;
      double d_i = 0.0;
      double lse = 0.0;
      if (softmax) {
        d_i = round.Acc(Dot(do_i, fwd.o.data() + (row * plan.heads + h) * plan.dv, plan.dv));
        lse = fwd.lse[h * plan.to + row];
      }
      for (int64_t t = 0; t < n; ++t) {
        const int64_t j = r.begin + t;
        const int64_t kv_row = seq.kv_begin + j;
        const double* v_j = p.v + (kv_row * plan.kv_heads + hk) * plan.dv;
        const double* k_j = p.k + (kv_row * plan.kv_heads + hk) * plan.dqk;
        const double dp = round.Acc(Dot(do_i, v_j, plan.dv));
        double ds;
        double prob;
        if (softmax) {
          const double p_hat = round.Acc(std::exp(round.Acc(s[t] - lse)));
          ds = round.Acc(p_hat * round.Acc(round.Acc(post * dp) - d_i));
          prob = round.Store(round.Acc(post * p_hat));
        } else {
          ds = round.Acc(round.Acc(post * round.Acc(ActivationDerivative(o.act, s[t]))) * dp);
          prob = round.Store(round.Acc(post * round.Acc(ActivationValue(o.act, s[t]))));
        }
        const double dz = round.Acc(pre * ds);
        // The matmul operand: dZ in the oracle; in emulate mode dS rounded to the input type, with
        // pre_scale applied to the fp32 matmul result (as a kernel does).
        const double ds_mm = kEmulate ? round.Store(ds) : dz;
        Axpy(ds_mm, k_j, dq_i, plan.dqk);
        const int64_t sr = sc.rk_begin[b] + j;
        Axpy(ds_mm, q_i, sc.dk.data() + (sr * plan.heads + h) * plan.dqk, plan.dqk);
        Axpy(prob, do_i, sc.dv.data() + (sr * plan.heads + h) * plan.dv, plan.dv);
        if (plan.dense_heads) sc.d_dense[bias.Dense(b, h, i, j)] += dz;
        if (plan.rel_heads) sc.d_rel[b][bias.Rel(h, i, j, shift)] += dz;
        if (plan.ts_heads) sc.d_ts[b][bias.Time(seq, h, i, j)] += dz;
      }
    }
  }
}

// Sums the per-b partial tables in increasing b.
std::vector<double> ReducePartials(const std::vector<std::vector<double>>& parts, size_t size) {
  std::vector<double> total(size, 0.0);
  for (const std::vector<double>& part : parts) {
    for (size_t e = 0; e < part.size(); ++e) total[e] += part[e];
  }
  return total;
}

template <bool kEmulate>
void RunBackward(const PreparedAttention& p, const AttentionInputs& in, const AttentionOptions& o,
                 const double* d_o, const AttentionForwardResult& fwd, AttentionBackwardResult& out) {
  const AttentionPlan& plan = p.plan;
  const Rounding<kEmulate> round{in.input_type};
  const int64_t num_out = static_cast<int64_t>(plan.out.size());
  Scratch sc;
  int64_t rk = 0;
  for (const OutputSequence& s : plan.out) {
    sc.rk_begin.push_back(rk);
    rk += s.lk;
  }
  sc.dq.assign(static_cast<size_t>(plan.to * plan.heads * plan.dqk), 0.0);
  sc.dk.assign(static_cast<size_t>(rk * plan.heads * plan.dqk), 0.0);
  sc.dv.assign(static_cast<size_t>(rk * plan.heads * plan.dv), 0.0);
  if (plan.dense_heads) sc.d_dense.assign(in.bias_dense.data.size(), 0.0);
  sc.d_rel.resize(num_out);
  sc.d_ts.resize(num_out);

  // Phase 1: heavy sequences first; each task owns everything it writes.
  std::vector<int64_t> order(num_out);
  for (int64_t b = 0; b < num_out; ++b) order[b] = b;
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
    return plan.out[x].lq * plan.out[x].lk > plan.out[y].lq * plan.out[y].lk;
  });
  tbb::parallel_for(
      tbb::blocked_range<size_t>(0, order.size(), 1),
      [&](const tbb::blocked_range<size_t>& range) {
        for (size_t t = range.begin(); t != range.end(); ++t) {
          BackwardSequence<kEmulate>(p, in, o, d_o, fwd, order[t], sc);
        }
      },
      tbb::simple_partitioner());

  const double pre = round.Acc(plan.pre_scale);
  // In emulate mode pre_scale multiplies the fp32 result of the dQ/dK matmuls.
  auto finish_qk = [&](double acc) { return kEmulate ? round.Acc(pre * round.Acc(acc)) : acc; };

  // Phase 2a: dQ. Under broadcast_q every output sequence reads the one Q sequence: sum over b.
  out.dq.assign(in.q.data.size(), 0.0);
  const int64_t q_row_width = plan.heads * plan.dqk;
  tbb::parallel_for(int64_t{0}, plan.tq, [&](int64_t q_row) {
    double* dst = out.dq.data() + q_row * q_row_width;
    if (o.broadcast_q) {
      for (int64_t b = 0; b < num_out; ++b) {
        const double* src = sc.dq.data() + (plan.out[b].out_begin + q_row) * q_row_width;
        for (int64_t e = 0; e < q_row_width; ++e) dst[e] += src[e];
      }
    } else {
      const double* src = sc.dq.data() + q_row * q_row_width;
      std::copy(src, src + q_row_width, dst);
    }
    for (int64_t e = 0; e < q_row_width; ++e) dst[e] = finish_qk(dst[e]);
  });

  // Phase 2b: dK and dV per K/V row and KV head: readers b in increasing order, then their query
  // heads h of the group in increasing order.
  out.dk.assign(in.k.data.size(), 0.0);
  out.dv.assign(in.v.data.size(), 0.0);
  const int64_t group = plan.heads / plan.kv_heads;
  const int64_t num_kv = static_cast<int64_t>(plan.kv_readers.size());
  tbb::parallel_for(int64_t{0}, num_kv, [&](int64_t kb) {
    const int64_t kv_begin = in.kv_offsets.data[kb];
    const int64_t lk = in.kv_offsets.data[kb + 1] - kv_begin;
    for (int64_t j = 0; j < lk; ++j) {
      for (int64_t hk = 0; hk < plan.kv_heads; ++hk) {
        double* dk = out.dk.data() + ((kv_begin + j) * plan.kv_heads + hk) * plan.dqk;
        double* dv = out.dv.data() + ((kv_begin + j) * plan.kv_heads + hk) * plan.dv;
        for (int64_t b : plan.kv_readers[kb]) {
          const int64_t sr = sc.rk_begin[b] + j;
          for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
            const double* sk = sc.dk.data() + (sr * plan.heads + h) * plan.dqk;
            const double* sv = sc.dv.data() + (sr * plan.heads + h) * plan.dv;
            for (int64_t d = 0; d < plan.dqk; ++d) dk[d] += sk[d];
            for (int64_t d = 0; d < plan.dv; ++d) dv[d] += sv[d];
          }
        }
        for (int64_t d = 0; d < plan.dqk; ++d) dk[d] = finish_qk(dk[d]);
        for (int64_t d = 0; d < plan.dv; ++d) dv[d] = round.Acc(dv[d]);
      }
    }
  });

  // Phase 2c: the transposed rotation, then one rounding to the storage type.
  if (plan.rope) {
    RopeBackwardInPlace(absl::MakeSpan(out.dq), plan.tq, plan.heads, plan.dqk, in.rope_q.data, kEmulate);
    RopeBackwardInPlace(absl::MakeSpan(out.dk), plan.tk, plan.kv_heads, plan.dqk, in.rope_k.data, kEmulate);
  }
  if (plan.rope_v) {
    RopeBackwardInPlace(absl::MakeSpan(out.dv), plan.tk, plan.kv_heads, plan.dv, in.rope_v.data, kEmulate);
  }
  for (std::vector<double>* g : {&out.dq, &out.dk, &out.dv}) {
    for (double& x : *g) x = round.Store(x);
  }
  out.dq_shape = in.q.shape;
  out.dk_shape = in.k.shape;
  out.dv_shape = in.v.shape;

  // Bias gradients: fp32 tensors, accumulated exactly in fp64 and rounded once in emulate mode.
  if (plan.dense_heads) {
    out.d_bias_dense = std::move(sc.d_dense);
    for (double& x : out.d_bias_dense) x = round.Acc(x);
    out.d_bias_dense_shape = in.bias_dense.shape;
  }
  if (plan.rel_heads) {
    out.d_bias_rel = ReducePartials(sc.d_rel, in.bias_rel.data.size());
    for (double& x : out.d_bias_rel) x = round.Acc(x);
    out.d_bias_rel_shape = in.bias_rel.shape;
  }
  if (plan.ts_heads) {
    out.d_bias_ts = ReducePartials(sc.d_ts, in.bias_ts.data.size());
    for (double& x : out.d_bias_ts) x = round.Acc(x);
    out.d_bias_ts_shape = in.bias_ts.shape;
  }
}

}  // namespace

absl::StatusOr<AttentionBackwardResult> AttentionBackward(const AttentionInputs& in,
                                                          const AttentionOptions& options,
                                                          const TensorView<double>& d_o,
                                                          const AttentionForwardResult& forward,
                                                          const ExecutionOptions& exec) {
  absl::StatusOr<PreparedAttention> prepared = Prepare(in, options, exec.precision);
  if (!prepared.ok()) return prepared.status();
  const AttentionPlan& plan = prepared->plan;
  const std::vector<int64_t> o_shape = {plan.to, plan.heads, plan.dv};
  if (d_o.shape != o_shape || static_cast<int64_t>(d_o.data.size()) != plan.to * plan.heads * plan.dv) {
    return absl::InvalidArgumentError(absl::StrCat("d_o: shape ", io::ShapeString(d_o.shape),
                                                   ", expected O's shape ", io::ShapeString(o_shape)));
  }
  if (forward.o.size() != d_o.data.size()) {
    return absl::InvalidArgumentError("forward: O does not match this call; run AttentionForward first");
  }
  if (options.act == Activation::kSoftmax &&
      forward.lse.size() != static_cast<size_t>(plan.heads * plan.to)) {
    return absl::InvalidArgumentError("forward: softmax backward needs the forward's LSE [H,TO]");
  }
  AttentionBackwardResult out;
  RunWithThreads(exec.threads, [&] {
    if (exec.precision == Precision::kEmulate) {
      RunBackward<true>(*prepared, in, options, d_o.data.data(), forward, out);
    } else {
      RunBackward<false>(*prepared, in, options, d_o.data.data(), forward, out);
    }
  });
  return out;
}

}  // namespace gemtb::reference
