// pointwise activations, their derivatives, and the kink rule (left derivatives:
// relu'(0) = 0, leaky'(0) = 0.01, hardswish'(-3) = 0, hardswish'(3) = 1.5), checked through the
// oracle with scores that are exactly the kink (the kink rule).
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/attention_cases.h"
#include "tests/testing/oracle_harness.h"
#include "tests/testing/padded_attention.h"

namespace gemtb {
namespace {

using check::AttentionCase;

// One query, one key, Dqk = 2, Dv = 1, pre = post = 1: q = (s, 0), k = (1, 0), v = 1, so
// S = s exactly, O = act(s), and with dO = 1: dQ = (act'(s), 0), dV = act(s).
struct ScalarRun {
  double o, dq0, dq1, dk0, dv;
};

ScalarRun RunScalar(Activation act, double s) {
  check::CaseShape shape;
  shape.q_lengths = {1};
  shape.kv_lengths = {1};
  shape.dqk = 2;
  shape.dv = 1;
  shape.options.act = act;
  shape.options.pre_scale = 1.0;
  shape.options.post_scale = 1.0;
  AttentionCase c = check::BuildCase(shape);
  c.q.data = {s, 0.0};
  c.k.data = {1.0, 0.0};
  c.v.data = {1.0};
  const std::vector<double> d_o = {1.0};
  const auto run = check::RunOracle(c, d_o);
  EXPECT_TRUE(run.ok()) << run.status();
  if (!run.ok()) return {NAN, NAN, NAN, NAN, NAN};
  return {run->fwd.o[0], run->bwd.dq[0], run->bwd.dq[1], run->bwd.dk[0], run->bwd.dv[0]};
}

TEST(Activation, KinksTakeTheLeftDerivative) {
  struct Kink {
    Activation act;
    double at;
    double derivative;
  };
  for (const Kink& k :
       {Kink{Activation::kRelu, 0.0, 0.0}, Kink{Activation::kRelu, -0.0, 0.0},
        Kink{Activation::kLeakyRelu, 0.0, 0.01}, Kink{Activation::kReluSquare, 0.0, 0.0},
        Kink{Activation::kHardswish, -3.0, 0.0}, Kink{Activation::kHardswish, 3.0, 1.5}}) {
    const ScalarRun r = RunScalar(k.act, k.at);
    EXPECT_EQ(r.dq0, k.derivative) << ActivationName(k.act) << "'(" << k.at << ")";
    EXPECT_EQ(r.dq1, 0.0) << ActivationName(k.act);
    EXPECT_EQ(r.dk0, k.derivative * k.at) << ActivationName(k.act);
    EXPECT_EQ(r.o, testing::ActValue(k.act, k.at)) << ActivationName(k.act);
  }
}

// Orthogonal q and k make every score exactly zero: relu passes no gradient to Q or K at all,
// leaky_relu passes 0.01 of it.
AttentionCase OrthogonalCase(Activation act, uint64_t seed) {
  check::CaseShape shape;
  shape.q_lengths = {3, 2};
  shape.kv_lengths = {4, 1};
  shape.heads = 2;
  shape.kv_heads = 1;
  shape.dqk = 4;
  shape.dv = 3;
  shape.options.act = act;
  shape.options.pre_scale = 0.75;
  shape.options.post_scale = 1.25;
  shape.value_seed = seed;
  AttentionCase c = check::BuildCase(shape);
  for (size_t r = 0; r < c.q.data.size() / 4; ++r) c.q.data[4 * r + 2] = c.q.data[4 * r + 3] = 0;
  for (size_t r = 0; r < c.k.data.size() / 4; ++r) c.k.data[4 * r] = c.k.data[4 * r + 1] = 0;
  return c;
}

TEST(Activation, ExactlyZeroScoresGiveZeroReluGradient) {
  const AttentionCase c = OrthogonalCase(Activation::kRelu, 1);
  for (double s : testing::ValidScores(c)) ASSERT_EQ(s, 0.0);
  const std::vector<double> d_o = check::RandomCotangent(c, 2);
  const auto run = check::RunOracle(c, d_o);
  ASSERT_TRUE(run.ok()) << run.status();
  for (double x : run->fwd.o) EXPECT_EQ(x, 0.0);
  for (double x : run->bwd.dq) EXPECT_EQ(x, 0.0);
  for (double x : run->bwd.dk) EXPECT_EQ(x, 0.0);
  for (double x : run->bwd.dv) EXPECT_EQ(x, 0.0);
}

TEST(Activation, ExactlyZeroScoresGiveLeakySlopeGradient) {
  const AttentionCase c = OrthogonalCase(Activation::kLeakyRelu, 3);
  const std::vector<double> d_o = check::RandomCotangent(c, 4);
  const auto run = check::RunOracle(c, d_o);
  ASSERT_TRUE(run.ok()) << run.status();
  // dS = post·0.01·dP, dZ = pre·dS; dQ_i = Σ_j dZ_ij k_j, dK_j = Σ_i dZ_ij q_i.
  const testing::PaddedResult want = testing::PaddedAttention(c, d_o);
  EXPECT_TRUE(testing::AllClose("dQ", run->bwd.dq, want.dq, 1e-14));
  EXPECT_TRUE(testing::AllClose("dK", run->bwd.dk, want.dk, 1e-14));
  double max_dq = 0;
  for (double x : run->bwd.dq) max_dq = std::max(max_dq, std::fabs(x));
  EXPECT_GT(max_dq, 0.0) << "leaky_relu'(0) must be 0.01, not 0";
  // Spot-check one entry by hand: sequence 1 has one query (row 3) and one key (row 4).
  const int64_t dv = c.dv();
  for (int64_t h = 0; h < 2; ++h) {
    double dp = 0;
    for (int64_t e = 0; e < dv; ++e) dp += d_o[(3 * 2 + h) * dv + e] * c.v.data[4 * dv + e];
    for (int64_t d = 2; d < 4; ++d) {
      const double want_dq = 0.75 * 1.25 * 0.01 * dp * c.k.data[4 * 4 + d];
      EXPECT_NEAR(run->bwd.dq[(3 * 2 + h) * 4 + d], want_dq, 1e-15 * (1 + std::fabs(want_dq)));
    }
  }
}

// O = act(x) and dQ = act'(x) on a grid that includes large |x| (overflow-safe sigmoid, erfc).
TEST(Activation, PointwiseValuesAndDerivativesFollowTheirFormulas) {
  std::vector<double> grid = {-800, -40, -12.5, -3.5, -2.7, -1, -0.25, 0.125,
                              0.5,  1,   2.5,   3.25, 9,    40, 800};
  for (int a = 1; a < kNumActivations; ++a) {
    const auto act = static_cast<Activation>(a);
    for (double x : grid) {
      const ScalarRun r = RunScalar(act, x);
      const double f = testing::ActValue(act, x);
      const double df = testing::ActDerivative(act, x);
      EXPECT_NEAR(r.o, f, 1e-14 * std::fabs(f) + 1e-300) << ActivationName(act) << "(" << x << ")";
      EXPECT_NEAR(r.dq0, df, 1e-13 * std::fabs(df) + 1e-300)
          << ActivationName(act) << "'(" << x << ")";
      EXPECT_FALSE(std::isnan(r.o) || std::isnan(r.dq0)) << ActivationName(act) << " at " << x;
    }
  }
}

// erf-GELU and tanh-GELU are different functions (up to ~4.7e-4 apart near x = -2.7): the oracle
// must not swap them.
TEST(Activation, GeluAndGeluTanhAreDistinct) {
  const ScalarRun erf_form = RunScalar(Activation::kGelu, -2.7);
  const ScalarRun tanh_form = RunScalar(Activation::kGeluTanh, -2.7);
  EXPECT_GT(std::fabs(erf_form.o - tanh_form.o), 1e-4);
  EXPECT_NEAR(erf_form.o, 0.5 * -2.7 * std::erfc(2.7 / std::sqrt(2.0)), 1e-16);
}

}  // namespace
}  // namespace gemtb
