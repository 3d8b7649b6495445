// GQA / broadcast / kv_index: shared rows behave exactly like materialised copies, and
// their gradients are the sums of the copies' gradients.
#include <algorithm>
#include <functional>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/attention_cases.h"
#include "tests/testing/oracle_harness.h"
#include "tests/testing/rapidcheck_runner.h"

namespace gemtb {
namespace {

using check::AttentionCase;
using check::CaseConfig;
using check::Pairing;

constexpr double kTolerance = 1e-12;

// Copies rows [begin, begin+n) of a [T, row] tensor to the end of `out`.
void AppendRows(const std::vector<double>& in, int64_t begin, int64_t n, int64_t row,
                std::vector<double>& out) {
  out.insert(out.end(), in.begin() + begin * row, in.begin() + (begin + n) * row);
}

// Adds rows of `copy` [T', row] to rows of `sum` [T, row] as the index map says.
void AddRows(const std::vector<double>& copy, int64_t copy_begin, int64_t sum_begin, int64_t n,
             int64_t row, std::vector<double>& sum) {
  for (int64_t t = 0; t < n * row; ++t) sum[sum_begin * row + t] += copy[copy_begin * row + t];
}

struct Materialised {
  AttentionCase c;
  // Folds the copy's gradients back onto the original's shared rows.
  std::function<void(const check::OracleRun&, std::vector<double>& dq, std::vector<double>& dk,
                     std::vector<double>& dv)>
      fold;
};

// GQA: every query head gets its own K/V head.
Materialised MaterialiseGqa(const AttentionCase& c) {
  Materialised m{c, nullptr};
  const int64_t h_count = c.heads();
  const int64_t hkv = c.kv_heads();
  const int64_t group = h_count / hkv;
  const int64_t tk = c.k.shape[0];
  auto expand = [&](const std::vector<double>& x, int64_t d) {
    std::vector<double> y(tk * h_count * d);
    for (int64_t t = 0; t < tk; ++t) {
      for (int64_t h = 0; h < h_count; ++h) {
        std::copy_n(x.begin() + (t * hkv + h / group) * d, d, y.begin() + (t * h_count + h) * d);
      }
    }
    return y;
  };
  m.c.k.data = expand(c.k.data, c.dqk());
  m.c.k.shape = {tk, h_count, c.dqk()};
  m.c.v.data = expand(c.v.data, c.dv());
  m.c.v.shape = {tk, h_count, c.dv()};
  m.fold = [=](const check::OracleRun& run, std::vector<double>& dq, std::vector<double>& dk,
               std::vector<double>& dv) {
    dq = run.bwd.dq;
    dk.assign(tk * hkv * c.dqk(), 0.0);
    dv.assign(tk * hkv * c.dv(), 0.0);
    for (int64_t t = 0; t < tk; ++t) {
      for (int64_t h = 0; h < h_count; ++h) {
        for (int64_t d = 0; d < c.dqk(); ++d) {
          dk[(t * hkv + h / group) * c.dqk() + d] += run.bwd.dk[(t * h_count + h) * c.dqk() + d];
        }
        for (int64_t d = 0; d < c.dv(); ++d) {
          dv[(t * hkv + h / group) * c.dv() + d] += run.bwd.dv[(t * h_count + h) * c.dv() + d];
        }
      }
    }
  };
  return m;
}

// kv_index: output sequence b gets its own copy of K/V sequence kv_index[b] (and its RoPE rows).
Materialised MaterialiseKvIndex(const AttentionCase& c) {
  Materialised m{c, nullptr};
  const auto pairs = check::PairSequences(c);
  const int64_t krow = c.kv_heads() * c.dqk();
  const int64_t vrow = c.kv_heads() * c.dv();
  m.c.k.data.clear();
  m.c.v.data.clear();
  m.c.rope_k.data.clear();
  m.c.rope_v.data.clear();
  m.c.kv_offsets.data = {0};
  for (const auto& s : pairs) {
    AppendRows(c.k.data, s.k_begin, s.lk, krow, m.c.k.data);
    AppendRows(c.v.data, s.k_begin, s.lk, vrow, m.c.v.data);
    if (c.rope_k.present()) AppendRows(c.rope_k.data, s.k_begin, s.lk, c.dqk(), m.c.rope_k.data);
    if (c.rope_v.present()) AppendRows(c.rope_v.data, s.k_begin, s.lk, c.dv(), m.c.rope_v.data);
    m.c.kv_offsets.data.push_back(m.c.kv_offsets.data.back() + s.lk);
  }
  const int64_t tk2 = m.c.kv_offsets.data.back();
  m.c.kv_offsets.shape = {static_cast<int64_t>(m.c.kv_offsets.data.size())};
  m.c.k.shape = {tk2, c.kv_heads(), c.dqk()};
  m.c.v.shape = {tk2, c.kv_heads(), c.dv()};
  if (c.rope_k.present()) m.c.rope_k.shape = {tk2, c.dqk()};
  if (c.rope_v.present()) m.c.rope_v.shape = {tk2, c.dv()};
  m.c.kv_index = {};
  m.fold = [=](const check::OracleRun& run, std::vector<double>& dq, std::vector<double>& dk,
               std::vector<double>& dv) {
    dq = run.bwd.dq;
    dk.assign(c.k.data.size(), 0.0);
    dv.assign(c.v.data.size(), 0.0);
    int64_t copy_begin = 0;
    for (const auto& s : pairs) {
      AddRows(run.bwd.dk, copy_begin, s.k_begin, s.lk, krow, dk);
      AddRows(run.bwd.dv, copy_begin, s.k_begin, s.lk, vrow, dv);
      copy_begin += s.lk;
    }
  };
  return m;
}

// broadcast_q: every output sequence gets its own copy of the one query sequence.
Materialised MaterialiseBroadcast(const AttentionCase& c) {
  Materialised m{c, nullptr};
  const auto pairs = check::PairSequences(c);
  const int64_t lq = c.q_offsets.data[1];
  const int64_t qrow = c.heads() * c.dqk();
  m.c.options.broadcast_q = false;
  m.c.q.data.clear();
  m.c.rope_q.data.clear();
  m.c.q_offsets.data = {0};
  for (size_t b = 0; b < pairs.size(); ++b) {
    AppendRows(c.q.data, 0, lq, qrow, m.c.q.data);
    if (c.rope_q.present()) AppendRows(c.rope_q.data, 0, lq, c.dqk(), m.c.rope_q.data);
    m.c.q_offsets.data.push_back(m.c.q_offsets.data.back() + lq);
  }
  const int64_t tq2 = m.c.q_offsets.data.back();
  m.c.q_offsets.shape = {static_cast<int64_t>(m.c.q_offsets.data.size())};
  m.c.q.shape = {tq2, c.heads(), c.dqk()};
  if (c.rope_q.present()) m.c.rope_q.shape = {tq2, c.dqk()};
  const int64_t b_count = static_cast<int64_t>(pairs.size());
  m.fold = [=](const check::OracleRun& run, std::vector<double>& dq, std::vector<double>& dk,
               std::vector<double>& dv) {
    dq.assign(c.q.data.size(), 0.0);
    for (int64_t b = 0; b < b_count; ++b) AddRows(run.bwd.dq, b * lq, 0, lq, qrow, dq);
    dk = run.bwd.dk;
    dv = run.bwd.dv;
  };
  return m;
}

void CheckEqualsMaterialised(const AttentionCase& c, const Materialised& m) {
  const std::vector<double> d_o = check::RandomCotangent(c, c.shape.value_seed + 7);
  const auto shared = check::RunOracle(c, d_o);
  const auto copies = check::RunOracle(m.c, d_o);
  testing::RcRequireOk(shared.status(), c);
  testing::RcRequireOk(copies.status(), m.c);
  testing::RcRequire(testing::AllClose("O", shared->fwd.o, copies->fwd.o, kTolerance), c);
  testing::RcRequire(testing::LseClose("LSE", shared->fwd.lse, copies->fwd.lse, kTolerance), c);
  std::vector<double> dq, dk, dv;
  m.fold(*copies, dq, dk, dv);
  testing::RcRequire(testing::AllClose("dQ", shared->bwd.dq, dq, kTolerance), c);
  testing::RcRequire(testing::AllClose("dK", shared->bwd.dk, dk, kTolerance), c);
  testing::RcRequire(testing::AllClose("dV", shared->bwd.dv, dv, kTolerance), c);
  // Bias tables are not shared differently by the copies: their gradients must agree as they are.
  testing::RcRequire(testing::AllClose("dBiasDense", shared->bwd.d_bias_dense,
                                       copies->bwd.d_bias_dense, kTolerance),
                     c);
  testing::RcRequire(
      testing::AllClose("dBiasRel", shared->bwd.d_bias_rel, copies->bwd.d_bias_rel, kTolerance), c);
}

TEST(Sharing, GroupedQueryHeadsEqualMaterialisedKvHeads) {
  CaseConfig config;
  config.max_heads = 6;
  testing::CheckProperty(300, [config] {
    const AttentionCase c = *testing::GenAttentionCase(config);
    RC_PRE(c.heads() > c.kv_heads());
    CheckEqualsMaterialised(c, MaterialiseGqa(c));
  });
}

TEST(Sharing, KvIndexEqualsMaterialisedKvSequences) {
  CaseConfig config;
  config.pairing = Pairing::kKvIndex;
  config.max_sequences = 4;
  testing::CheckProperty(300, [config] {
    const AttentionCase c = *testing::GenAttentionCase(config);
    CheckEqualsMaterialised(c, MaterialiseKvIndex(c));
  });
}

TEST(Sharing, BroadcastQueriesEqualMaterialisedQuerySequences) {
  CaseConfig config;
  config.pairing = Pairing::kBroadcast;
  config.max_sequences = 4;
  testing::CheckProperty(300, [config] {
    const AttentionCase c = *testing::GenAttentionCase(config);
    CheckEqualsMaterialised(c, MaterialiseBroadcast(c));
  });
}

TEST(Sharing, BroadcastWithKvIndexEqualsBothMaterialised) {
  CaseConfig config;
  config.pairing = Pairing::kBroadcast;
  config.max_sequences = 4;
  testing::CheckProperty(200, [config] {
    const AttentionCase c = *testing::GenAttentionCase(config);
    RC_PRE(c.kv_index.present());
    // Materialise K/V first (keeps broadcast_q, now without kv_index), then compare the
    // broadcast-without-index case against its own query copies.
    const Materialised kv = MaterialiseKvIndex(c);
    CheckEqualsMaterialised(c, kv);
    CheckEqualsMaterialised(kv.c, MaterialiseBroadcast(kv.c));
  });
}

}  // namespace
}  // namespace gemtb
