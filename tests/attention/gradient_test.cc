// Gradients: the oracle's backward equals fp64 central finite differences of the scalar
// loss L = Σ O∘W (W random) for every act × mask, for the dense, relative and time bias tables and
// through RoPE; relative error ≤ 1e-6, on small shapes whose scores stay ≥ 1e-3 from every kink.
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/attention_cases.h"
#include "tools/check/criteria.h"
#include "tests/testing/oracle_harness.h"
#include "tests/testing/padded_attention.h"
#include "tests/testing/rapidcheck_runner.h"

namespace gemtb {
namespace {

using check::AttentionCase;
using check::CaseConfig;
using check::OwnedTensor;

constexpr double kRelTolerance = 1e-6;
constexpr double kKinkMargin = 1e-3;
// Gradients below this magnitude are compared absolutely (rel err = err / max(|grad|max, floor)).
constexpr double kScaleFloor = 1e-3;

CaseConfig SmallConfig() {
  CaseConfig config;
  config.max_sequences = 3;
  config.max_length = 5;
  config.max_heads = 2;
  config.max_dim = 4;
  return config;
}

bool NearKink(const AttentionCase& c) {
  std::vector<double> kinks;
  switch (c.options.act) {
    case Activation::kRelu:
    case Activation::kReluSquare:
    case Activation::kLeakyRelu:
      kinks = {0.0};
      break;
    case Activation::kHardswish:
      kinks = {-3.0, 3.0};
      break;
    default:
      return false;
  }
  for (double s : testing::ValidScores(c)) {
    for (double k : kinks) {
      if (std::fabs(s - k) < kKinkMargin) return true;
    }
  }
  return false;
}

// L = Σ O∘W by the oracle's forward (one thread: thousands of tiny calls).
double Loss(const AttentionCase& c, const std::vector<double>& w) {
  const auto fwd = reference::AttentionForward(c.View(), c.options, {.threads = 1});
  if (!fwd.ok()) return std::nan("");
  double loss = 0;
  for (size_t i = 0; i < w.size(); ++i) loss += fwd->o[i] * w[i];
  return loss;
}

// Compares `analytic` (d L / d tensor) with central differences over every finite entry of the
// tensor; entries holding NaN (dense bias outside valid pairs) must have an exactly-zero gradient.
::testing::AssertionResult MatchesFiniteDifferences(const AttentionCase& c,
                                                    OwnedTensor<double> AttentionCase::*member,
                                                    const std::string& name,
                                                    const std::vector<double>& analytic,
                                                    const std::vector<double>& w) {
  const std::vector<double>& x = (c.*member).data;
  if (analytic.size() != x.size()) {
    return ::testing::AssertionFailure()
           << name << ": gradient has " << analytic.size() << " entries, tensor " << x.size();
  }
  AttentionCase work = c;
  std::vector<double>& xw = (work.*member).data;
  std::vector<double> numeric(x.size(), 0.0);
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      if (analytic[i] != 0) {
        return ::testing::AssertionFailure()
               << name << "[" << i << "] = " << analytic[i] << " where the pair is not valid";
      }
      continue;
    }
    const double h = 1e-6 * std::max(1.0, std::fabs(x[i]));
    const double plus = x[i] + h;
    const double minus = x[i] - h;
    xw[i] = plus;
    const double l_plus = Loss(work, w);
    xw[i] = minus;
    const double l_minus = Loss(work, w);
    xw[i] = x[i];
    numeric[i] = (l_plus - l_minus) / (plus - minus);
  }
  const double err = check::MaxAbsDiff(numeric, analytic);
  const double scale = std::max(check::MaxAbs(analytic), kScaleFloor);
  const double rel = err / scale;
  if (rel <= kRelTolerance) return ::testing::AssertionSuccess();
  size_t worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::fabs(numeric[i] - analytic[i]) > std::fabs(numeric[worst] - analytic[worst]))
      worst = i;
  }
  return ::testing::AssertionFailure()
         << name << ": rel err " << rel << " > " << kRelTolerance << " (worst [" << worst
         << "]: analytic " << analytic[worst] << ", finite difference " << numeric[worst] << ")";
}

// Checks every gradient the case has; returns the first failure.
::testing::AssertionResult GradientsMatchFiniteDifferences(const AttentionCase& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<double> w(check::OutputRows(c) * c.heads() * c.dv());
  for (double& x : w) x = normal(rng);
  const auto run = check::RunOracle(c, w, {.threads = 1});
  if (!run.ok()) return ::testing::AssertionFailure() << run.status();
  const auto& g = run->bwd;
  if (auto r = MatchesFiniteDifferences(c, &AttentionCase::q, "dQ", g.dq, w); !r) return r;
  if (auto r = MatchesFiniteDifferences(c, &AttentionCase::k, "dK", g.dk, w); !r) return r;
  if (auto r = MatchesFiniteDifferences(c, &AttentionCase::v, "dV", g.dv, w); !r) return r;
  if (c.bias_dense.present()) {
    if (auto r = MatchesFiniteDifferences(c, &AttentionCase::bias_dense, "dBiasDense",
                                          g.d_bias_dense, w);
        !r) {
      return r;
    }
  }
  if (c.bias_rel.present()) {
    if (auto r = MatchesFiniteDifferences(c, &AttentionCase::bias_rel, "dBiasRel", g.d_bias_rel, w);
        !r) {
      return r;
    }
  }
  if (c.bias_ts.present()) {
    if (auto r = MatchesFiniteDifferences(c, &AttentionCase::bias_ts, "dBiasTs", g.d_bias_ts, w);
        !r) {
      return r;
    }
  }
  return ::testing::AssertionSuccess();
}

// Draws a case that has at least one valid pair, stays away from kinks and satisfies `want`.
AttentionCase DrawCheckableCase(std::mt19937_64& rng, const CaseConfig& config,
                                const std::function<bool(const AttentionCase&)>& want) {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    AttentionCase c = check::RandomAttentionCase(rng, config);
    if (testing::CountValidPairs(c) == 0 || NearKink(c) || !want(c)) continue;
    return c;
  }
  ADD_FAILURE() << "no checkable case in 1000 draws";
  return check::RandomAttentionCase(rng, config);
}

TEST(Gradient, MatchesFiniteDifferencesForEveryActAndMask) {
  std::mt19937_64 rng(4242);
  for (int a = 0; a < kNumActivations; ++a) {
    for (MaskKind mask :
         {MaskKind::kNone, MaskKind::kCausal, MaskKind::kWindow, MaskKind::kBlock}) {
      CaseConfig config = SmallConfig();
      config.acts = {static_cast<Activation>(a)};
      config.masks = {mask};
      for (int rep = 0; rep < 8; ++rep) {
        const AttentionCase c =
            DrawCheckableCase(rng, config, [](const AttentionCase&) { return true; });
        EXPECT_TRUE(GradientsMatchFiniteDifferences(c, rng())) << "case: " << c;
      }
    }
  }
}

TEST(Gradient, DenseBiasGradientMatchesFiniteDifferences) {
  std::mt19937_64 rng(11);
  for (int a = 0; a < kNumActivations; ++a) {
    CaseConfig config = SmallConfig();
    config.acts = {static_cast<Activation>(a)};
    const AttentionCase c = DrawCheckableCase(
        rng, config, [](const AttentionCase& x) { return x.bias_dense.present(); });
    EXPECT_TRUE(GradientsMatchFiniteDifferences(c, rng())) << "case: " << c;
  }
}

TEST(Gradient, RelativeBiasGradientMatchesFiniteDifferences) {
  std::mt19937_64 rng(12);
  for (int a = 0; a < kNumActivations; ++a) {
    CaseConfig config = SmallConfig();
    config.acts = {static_cast<Activation>(a)};
    const AttentionCase c =
        DrawCheckableCase(rng, config, [](const AttentionCase& x) { return x.bias_rel.present(); });
    EXPECT_TRUE(GradientsMatchFiniteDifferences(c, rng())) << "case: " << c;
  }
}

TEST(Gradient, TimeBiasGradientMatchesFiniteDifferences) {
  std::mt19937_64 rng(13);
  for (int a = 0; a < kNumActivations; ++a) {
    CaseConfig config = SmallConfig();
    config.acts = {static_cast<Activation>(a)};
    config.pairing = check::Pairing::kSelf;
    config.max_length = 6;
    const AttentionCase c =
        DrawCheckableCase(rng, config, [](const AttentionCase& x) { return x.bias_ts.present(); });
    EXPECT_TRUE(GradientsMatchFiniteDifferences(c, rng())) << "case: " << c;
  }
}

TEST(Gradient, GradientThroughRopeMatchesFiniteDifferences) {
  std::mt19937_64 rng(14);
  for (int a = 0; a < kNumActivations; ++a) {
    CaseConfig config = SmallConfig();
    config.acts = {static_cast<Activation>(a)};
    const AttentionCase c =
        DrawCheckableCase(rng, config, [](const AttentionCase& x) { return x.rope_v.present(); });
    EXPECT_TRUE(GradientsMatchFiniteDifferences(c, rng())) << "case: " << c;
  }
}

TEST(Gradient, MatchesFiniteDifferencesOnArbitraryCases) {
  testing::CheckProperty(400, [] {
    const AttentionCase c = *testing::GenAttentionCase(SmallConfig());
    RC_PRE(!NearKink(c));
    testing::RcRequire(GradientsMatchFiniteDifferences(c, c.shape.value_seed + 1), c);
  });
}

// The independent padded reference's activation derivatives against central differences of its own
// values, away from kinks (guards the test oracle itself).
TEST(Gradient, PaddedReferenceActDerivativesMatchFiniteDifferences) {
  for (int a = 1; a < kNumActivations; ++a) {
    const auto act = static_cast<Activation>(a);
    for (double x = -6.0; x <= 6.0; x += 0.0625 * 1.03) {
      const double h = 1e-6;
      const double fd = (testing::ActValue(act, x + h) - testing::ActValue(act, x - h)) / (2 * h);
      EXPECT_NEAR(testing::ActDerivative(act, x), fd, 1e-8) << ActivationName(act) << " at " << x;
    }
  }
}

}  // namespace
}  // namespace gemtb
