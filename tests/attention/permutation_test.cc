// Permutation: without a mask, rel/time bias or RoPE, attention is a set function of the
// keys (permuting keys with their V rows and dense-bias columns leaves O unchanged) and is
// equivariant in the queries (permuting queries, with their dense-bias rows, permutes O and LSE).
#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/attention_cases.h"
#include "tests/testing/oracle_harness.h"
#include "tests/testing/rapidcheck_runner.h"

namespace gemtb {
namespace {

using check::AttentionCase;
using check::CaseConfig;

constexpr double kTolerance = 1e-12;

CaseConfig PermutableConfig() {
  CaseConfig config;
  config.masks = {MaskKind::kNone};
  config.rel_bias = false;
  config.time_bias = false;
  config.rope = false;
  config.max_length = 8;
  return config;
}

// perm[t] = the row that moves to row t, within each sequence of `offsets`.
std::vector<int64_t> RandomPermutationWithinSequences(const std::vector<int64_t>& offsets,
                                                      std::mt19937_64& rng) {
  std::vector<int64_t> perm(offsets.back());
  std::iota(perm.begin(), perm.end(), 0);
  for (size_t s = 0; s + 1 < offsets.size(); ++s) {
    std::shuffle(perm.begin() + offsets[s], perm.begin() + offsets[s + 1], rng);
  }
  return perm;
}

// out row t = in row perm[t], for a [T, row] tensor.
std::vector<double> PermuteRows(const std::vector<double>& in, const std::vector<int64_t>& perm,
                                size_t row) {
  std::vector<double> out(in.size());
  for (size_t t = 0; t < perm.size(); ++t) {
    std::copy_n(in.begin() + perm[t] * row, row, out.begin() + t * row);
  }
  return out;
}

TEST(Permutation, PermutingKeysLeavesOutputUnchanged) {
  testing::CheckProperty(400, [] {
    const AttentionCase c = *testing::GenAttentionCase(PermutableConfig());
    std::mt19937_64 rng(c.shape.value_seed + 17);
    const std::vector<int64_t> perm = RandomPermutationWithinSequences(c.kv_offsets.data, rng);
    AttentionCase p = c;
    p.k.data = PermuteRows(c.k.data, perm, c.kv_heads() * c.dqk());
    p.v.data = PermuteRows(c.v.data, perm, c.kv_heads() * c.dv());
    const auto pairs = check::PairSequences(c);
    if (c.bias_dense.present()) {  // column j of output sequence b belongs to key k_begin + j
      const int64_t hb = c.bias_dense.shape[1];
      for (size_t b = 0; b < pairs.size(); ++b) {
        for (int64_t h = 0; h < hb; ++h) {
          for (int64_t i = 0; i < pairs[b].lq; ++i) {
            const int64_t row = ((static_cast<int64_t>(b) * hb + h) * c.max_lq + i) * c.max_lk;
            for (int64_t j = 0; j < pairs[b].lk; ++j) {
              const int64_t from = perm[pairs[b].k_begin + j] - pairs[b].k_begin;
              p.bias_dense.data[row + j] = c.bias_dense.data[row + from];
            }
          }
        }
      }
    }
    const std::vector<double> d_o = check::RandomCotangent(c, rng());
    const auto a = check::RunOracle(c, d_o);
    const auto b = check::RunOracle(p, d_o);
    testing::RcRequireOk(a.status(), c);
    testing::RcRequireOk(b.status(), p);
    testing::RcRequire(testing::AllClose("O", b->fwd.o, a->fwd.o, kTolerance), c);
    testing::RcRequire(testing::LseClose("LSE", b->fwd.lse, a->fwd.lse, kTolerance), c);
    // The gradients follow the keys: dQ unchanged, dK and dV permuted like K and V.
    testing::RcRequire(testing::AllClose("dQ", b->bwd.dq, a->bwd.dq, kTolerance), c);
    testing::RcRequire(
        testing::AllClose("dK", b->bwd.dk, PermuteRows(a->bwd.dk, perm, c.kv_heads() * c.dqk()),
                          kTolerance),
        c);
    testing::RcRequire(
        testing::AllClose("dV", b->bwd.dv, PermuteRows(a->bwd.dv, perm, c.kv_heads() * c.dv()),
                          kTolerance),
        c);
  });
}

TEST(Permutation, PermutingQueriesPermutesOutputs) {
  testing::CheckProperty(400, [] {
    const AttentionCase c = *testing::GenAttentionCase(PermutableConfig());
    std::mt19937_64 rng(c.shape.value_seed + 29);
    const std::vector<int64_t> perm = RandomPermutationWithinSequences(c.q_offsets.data, rng);
    AttentionCase p = c;
    p.q.data = PermuteRows(c.q.data, perm, c.heads() * c.dqk());
    const auto pairs = check::PairSequences(c);
    // Output row o_begin + i of sequence b reads query q_begin + i; after the permutation it reads
    // q_begin + (perm[q_begin + i] - q_begin).
    const int64_t to = check::OutputRows(c);
    std::vector<int64_t> out_perm(to);
    for (const auto& s : pairs) {
      for (int64_t i = 0; i < s.lq; ++i) {
        out_perm[s.o_begin + i] = s.o_begin + perm[s.q_begin + i] - s.q_begin;
      }
    }
    if (c.bias_dense.present()) {
      const int64_t hb = c.bias_dense.shape[1];
      for (size_t b = 0; b < pairs.size(); ++b) {
        for (int64_t h = 0; h < hb; ++h) {
          const int64_t base = (static_cast<int64_t>(b) * hb + h) * c.max_lq * c.max_lk;
          for (int64_t i = 0; i < pairs[b].lq; ++i) {
            const int64_t from = perm[pairs[b].q_begin + i] - pairs[b].q_begin;
            std::copy_n(c.bias_dense.data.begin() + base + from * c.max_lk, c.max_lk,
                        p.bias_dense.data.begin() + base + i * c.max_lk);
          }
        }
      }
    }
    const std::vector<double> d_o = check::RandomCotangent(c, rng());
    const std::vector<double> d_o_permuted = PermuteRows(d_o, out_perm, c.heads() * c.dv());
    const auto a = check::RunOracle(c, d_o);
    const auto b = check::RunOracle(p, d_o_permuted);
    testing::RcRequireOk(a.status(), c);
    testing::RcRequireOk(b.status(), p);
    testing::RcRequire(
        testing::AllClose("O", b->fwd.o, PermuteRows(a->fwd.o, out_perm, c.heads() * c.dv()),
                          kTolerance),
        c);
    if (!a->fwd.lse.empty()) {  // LSE [H, TO]: permute each head's row
      std::vector<double> lse(a->fwd.lse.size());
      for (int64_t h = 0; h < c.heads(); ++h) {
        for (int64_t t = 0; t < to; ++t) lse[h * to + t] = a->fwd.lse[h * to + out_perm[t]];
      }
      testing::RcRequire(testing::LseClose("LSE", b->fwd.lse, lse, kTolerance), c);
    }
    testing::RcRequire(
        testing::AllClose("dQ", b->bwd.dq, PermuteRows(a->bwd.dq, perm, c.heads() * c.dqk()),
                          kTolerance),
        c);
    testing::RcRequire(testing::AllClose("dK", b->bwd.dk, a->bwd.dk, kTolerance), c);
    testing::RcRequire(testing::AllClose("dV", b->bwd.dv, a->bwd.dv, kTolerance), c);
  });
}

}  // namespace
}  // namespace gemtb
