// Identity: identity with pre = post = 1 and no mask is plain (QKᵀ)V, and its gradients
// are the plain matrix products dQ = (dO Vᵀ) K, dK = (dO Vᵀ)ᵀ Q, dV = (QKᵀ)ᵀ dO.
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/attention_cases.h"
#include "tests/testing/oracle_harness.h"
#include "tests/testing/rapidcheck_runner.h"

namespace gemtb {
namespace {

using check::AttentionCase;
using check::CaseConfig;

CaseConfig IdentityConfig() {
  CaseConfig config;
  config.acts = {Activation::kIdentity};
  config.masks = {MaskKind::kNone};
  config.dense_bias = false;
  config.rel_bias = false;
  config.time_bias = false;
  config.rope = false;
  config.custom_scales = false;
  config.max_length = 8;
  return config;
}

struct Plain {
  std::vector<double> o, dq, dk, dv;
};

// Straight from the matrix formulas, one output sequence and query head at a time.
Plain PlainProducts(const AttentionCase& c, const std::vector<double>& d_o) {
  const int64_t h_count = c.heads();
  const int64_t group = h_count / c.kv_heads();
  const int64_t dqk = c.dqk();
  const int64_t dv = c.dv();
  Plain r;
  r.o.assign(check::OutputRows(c) * h_count * dv, 0.0);
  r.dq.assign(c.q.data.size(), 0.0);
  r.dk.assign(c.k.data.size(), 0.0);
  r.dv.assign(c.v.data.size(), 0.0);
  auto q = [&](int64_t t, int64_t h, int64_t d) { return c.q.data[(t * h_count + h) * dqk + d]; };
  auto k = [&](int64_t t, int64_t h, int64_t d) {
    return c.k.data[(t * c.kv_heads() + h) * dqk + d];
  };
  auto v = [&](int64_t t, int64_t h, int64_t d) {
    return c.v.data[(t * c.kv_heads() + h) * dv + d];
  };
  for (const auto& s : check::PairSequences(c)) {
    for (int64_t h = 0; h < h_count; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < s.lq; ++i) {
        const int64_t orow = (s.o_begin + i) * h_count + h;
        for (int64_t j = 0; j < s.lk; ++j) {
          double score = 0;  // q_i . k_j
          for (int64_t d = 0; d < dqk; ++d)
            score += q(s.q_begin + i, h, d) * k(s.k_begin + j, hk, d);
          double dp = 0;  // dO_i . v_j
          for (int64_t e = 0; e < dv; ++e) {
            r.o[orow * dv + e] += score * v(s.k_begin + j, hk, e);
            dp += d_o[orow * dv + e] * v(s.k_begin + j, hk, e);
            r.dv[((s.k_begin + j) * c.kv_heads() + hk) * dv + e] += score * d_o[orow * dv + e];
          }
          for (int64_t d = 0; d < dqk; ++d) {
            r.dq[((s.q_begin + i) * h_count + h) * dqk + d] += dp * k(s.k_begin + j, hk, d);
            r.dk[((s.k_begin + j) * c.kv_heads() + hk) * dqk + d] += dp * q(s.q_begin + i, h, d);
          }
        }
      }
    }
  }
  return r;
}

TEST(Identity, IdentityWithUnitScalesIsPlainQKTransposeV) {
  testing::CheckProperty(300, [] {
    AttentionCase c = *testing::GenAttentionCase(IdentityConfig());
    if (*rc::gen::arbitrary<bool>()) {  // explicit 1 and the default must agree
      c.options.pre_scale = 1.0;
      c.options.post_scale = 1.0;
    }
    const std::vector<double> d_o = check::RandomCotangent(c, c.shape.value_seed + 5);
    const auto run = check::RunOracle(c, d_o);
    testing::RcRequireOk(run.status(), c);
    const Plain want = PlainProducts(c, d_o);
    testing::RcRequire(testing::AllClose("O", run->fwd.o, want.o, 1e-12), c);
    RC_ASSERT(run->fwd.lse.empty());  // pointwise acts have no LSE
    testing::RcRequire(testing::AllClose("dQ", run->bwd.dq, want.dq, 1e-12), c);
    testing::RcRequire(testing::AllClose("dK", run->bwd.dk, want.dk, 1e-12), c);
    testing::RcRequire(testing::AllClose("dV", run->bwd.dv, want.dv, 1e-12), c);
  });
}

}  // namespace
}  // namespace gemtb
