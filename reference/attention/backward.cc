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
#include "reference/attention/row_kernels.h"
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

// Query rows per block of the backward: fewer than the forward's (its scratch per row is four rows
// of keys), at most kRowBlock (what ScoreRow::Block takes).
constexpr int kBackwardRows = 8;
static_assert(kBackwardRows <= kRowBlock);

template <bool kEmulate>
void BackwardSequence(const PreparedAttention& p, const AttentionInputs& in,
                      const AttentionOptions& o, const double* d_o,
                      const AttentionForwardResult& fwd, int64_t b, Scratch& sc) {
  const AttentionPlan& plan = p.plan;
  const Rounding<kEmulate> round{in.input_type};
  const BiasLocator bias{&plan, &o, in.ts.data.data()};
  const OutputSequence& seq = plan.out[b];
  const bool softmax = o.act == Activation::kSoftmax;
  const double pre = round.Acc(plan.pre_scale);
  const double post = round.Acc(plan.post_scale);
  const int64_t shift = bias.Shift(seq);
  // Per row of a block: scores and dO.V by key offset t; dS (the matmul operand) and P by key j.
  std::vector<double> scratch(static_cast<size_t>(4 * kBackwardRows * seq.lk));
  double* s_rows[kBackwardRows];
  double* dp_rows[kBackwardRows];
  double* ds_rows[kBackwardRows];
  double* prob_rows[kBackwardRows];
  for (int c = 0; c < kBackwardRows; ++c) {
    s_rows[c] = scratch.data() + (4 * c) * seq.lk;
    dp_rows[c] = s_rows[c] + seq.lk;
    ds_rows[c] = dp_rows[c] + seq.lk;
    prob_rows[c] = ds_rows[c] + seq.lk;
  }
  std::vector<double> p_row(static_cast<size_t>(seq.lk));
  const RowKernels& kernels = Kernels();
  // The table is [Hr, 2*maxL-1], or [Hr, 0] when maxL = 0 (as validated).
  if (plan.rel_heads) {
    sc.d_rel[b].assign(static_cast<size_t>(plan.rel_heads * std::max<int64_t>(2 * plan.max_l - 1, 0)), 0.0);
  }
  if (plan.ts_heads) sc.d_ts[b].assign(static_cast<size_t>(plan.ts_heads * kTimeBuckets), 0.0);

  for (int64_t h = 0; h < plan.heads; ++h) {
    const int64_t hk = h / (plan.heads / plan.kv_heads);
    const int64_t k_stride = plan.kv_heads * plan.dqk;
    const int64_t v_stride = plan.kv_heads * plan.dv;
    const RowPanel q_panel{RowsAt(p.q, (seq.q_begin * plan.heads + h) * plan.dqk), plan.heads * plan.dqk};
    const RowPanel k_panel{RowsAt(p.k, (seq.kv_begin * plan.kv_heads + hk) * plan.dqk), k_stride};
    const ScoreRow<kEmulate> scores{plan, in, bias, round, b, h, q_panel, k_panel};
    // Rows go in blocks of kBackwardRows (as in the forward). Every destination gets its terms in the
    // order of the scalar loop (keys in increasing order for dQ_i; rows i in increasing order for a
    // K/V row and for the bias gradients), so blocking changes no sum's order.
    for (int64_t i0 = 0; i0 < seq.lq; i0 += kBackwardRows) {
      const int count = static_cast<int>(std::min<int64_t>(kBackwardRows, seq.lq - i0));
      KeyRange r[kBackwardRows];
      bool shared = true;
      KeyRange all = ValidKeys(o, i0, seq.lq, seq.lk);  // the keys any row of the block reads
      for (int c = 0; c < count; ++c) {
        r[c] = ValidKeys(o, i0 + c, seq.lq, seq.lk);
        shared = shared && r[c].begin == r[0].begin && r[c].end == r[0].end;
        if (r[c].end > r[c].begin) {
          all = all.end > all.begin ? KeyRange{std::min(all.begin, r[c].begin), std::max(all.end, r[c].end)} : r[c];
        }
      }
      const double* do_rows[kBackwardRows];
      const double* q_rows[kBackwardRows];
      double* dq_rows[kBackwardRows];
      for (int c = 0; c < count; ++c) {
        const int64_t row = seq.out_begin + i0 + c;
        do_rows[c] = d_o + (row * plan.heads + h) * plan.dv;
        q_rows[c] = p.q + ((seq.q_begin + i0 + c) * plan.heads + h) * plan.dqk;
        dq_rows[c] = sc.dq.data() + (row * plan.heads + h) * plan.dqk;
      }
      if (shared) {
        scores.Block(i0, count, r[0], s_rows);
        if (r[0].end > r[0].begin) {
          kernels.dot_rows_multi(do_rows, count, p.v + ((seq.kv_begin + r[0].begin) * plan.kv_heads + hk) * plan.dv,
                                 v_stride, r[0].end - r[0].begin, plan.dv, dp_rows);
        }
      } else {
        for (int c = 0; c < count; ++c) {
          const int64_t n = r[c].end - r[c].begin;
          if (n == 0) continue;
          scores(i0 + c, r[c], s_rows[c]);
          kernels.dot_rows(do_rows[c], p.v + ((seq.kv_begin + r[c].begin) * plan.kv_heads + hk) * plan.dv, v_stride,
                           n, plan.dv, dp_rows[c]);
        }
      }
      for (int c = 0; c < count; ++c) {
        const int64_t i = i0 + c;
        const int64_t row = seq.out_begin + i;
        const int64_t n = r[c].end - r[c].begin;
        if (n == 0) continue;  // an empty row contributes exactly 0
        double d_i = 0.0;
        double lse = 0.0;
        if (softmax) {
          d_i = round.Acc(Dot(do_rows[c], fwd.o.data() + (row * plan.heads + h) * plan.dv, plan.dv));
          lse = fwd.lse[h * plan.to + row];
        }
        const double* s_c = s_rows[c];
        // The oracle's P row at once (the row kernel's exp); emulate mode rounds before and after each.
        if (softmax && !kEmulate) kernels.exp_rows(s_c, lse, n, p_row.data());
        for (int64_t t = 0; t < n; ++t) {
          const int64_t j = r[c].begin + t;
          const double dp_t = round.Acc(dp_rows[c][t]);
          double ds;
          double prob;
          if (softmax) {
            const double p_hat = kEmulate ? round.Acc(SoftmaxExp(round.Acc(s_c[t] - lse))) : p_row[t];
            ds = round.Acc(p_hat * round.Acc(round.Acc(post * dp_t) - d_i));
            prob = round.Store(round.Acc(post * p_hat));
          } else {
            ds = round.Acc(round.Acc(post * round.Acc(ActivationDerivative(o.act, s_c[t]))) * dp_t);
            prob = round.Store(round.Acc(post * round.Acc(ActivationValue(o.act, s_c[t]))));
          }
          const double dz = round.Acc(pre * ds);
          // The matmul operand: dZ in the oracle; in emulate mode dS rounded to the input type, with
          // pre_scale applied to the fp32 matmul result (as a kernel does). Stored by key j.
          ds_rows[c][j] = kEmulate ? round.Store(ds) : dz;
          prob_rows[c][j] = prob;
          if (plan.dense_heads) sc.d_dense[bias.Dense(b, h, i, j)] += dz;
          if (plan.rel_heads) sc.d_rel[b][bias.Rel(h, i, j, shift)] += dz;
          if (plan.ts_heads) sc.d_ts[b][bias.Time(seq, h, i, j)] += dz;
        }
      }
      // dQ_i += dS_ij K_j over the keys of row i, in increasing j.
      const auto first_k = [&](KeyRange range) {
        return p.k + ((seq.kv_begin + range.begin) * plan.kv_heads + hk) * plan.dqk;
      };
      if (shared && r[0].end > r[0].begin) {
        const double* coef[kBackwardRows];
        for (int c = 0; c < count; ++c) coef[c] = ds_rows[c] + r[0].begin;
        kernels.axpy_rows_multi(coef, count, first_k(r[0]), k_stride, r[0].end - r[0].begin, plan.dqk, dq_rows);
      } else if (!shared) {
        for (int c = 0; c < count; ++c) {
          const int64_t n = r[c].end - r[c].begin;
          if (n > 0) kernels.axpy_rows(ds_rows[c] + r[c].begin, first_k(r[c]), k_stride, n, plan.dqk, dq_rows[c]);
        }
      }
      // dK_j += dS_ij Q_i and dV_j += P_ij dO_i over the rows i of the block that read key j, in increasing i.
      for (int64_t j = all.begin; j < all.end; ++j) {
        double dk_coef[kBackwardRows], dv_coef[kBackwardRows];
        const double* q_of[kBackwardRows];
        const double* do_of[kBackwardRows];
        int readers = 0;
        for (int c = 0; c < count; ++c) {
          if (j < r[c].begin || j >= r[c].end) continue;
          dk_coef[readers] = ds_rows[c][j];
          dv_coef[readers] = prob_rows[c][j];
          q_of[readers] = q_rows[c];
          do_of[readers] = do_rows[c];
          ++readers;
        }
        if (readers == 0) continue;
        const int64_t sr = sc.rk_begin[b] + j;
        kernels.axpy_multi(dk_coef, q_of, readers, sc.dk.data() + (sr * plan.heads + h) * plan.dqk, plan.dqk);
        kernels.axpy_multi(dv_coef, do_of, readers, sc.dv.data() + (sr * plan.heads + h) * plan.dv, plan.dv);
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
