// NE with the exact-1 evaluation and calibration.
#include "model/metrics/ne.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace gemtb::metrics {
namespace {

// Random units of a step-by-rank layout with the given positive rate.
std::vector<std::vector<uint8_t>> RandomLabels(int units, int per_unit, double rate, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution coin(rate);
  std::vector<std::vector<uint8_t>> labels(static_cast<size_t>(units));
  for (auto& u : labels) {
    for (int i = 0; i < per_unit; ++i) u.push_back(coin(rng) ? 1 : 0);
  }
  return labels;
}

TEST(Ne, ConstantPredictorEqualToTheWindowMeanGivesExactlyOne) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const int n_units = 1 + static_cast<int>(seed % 7), per_unit = 50 + static_cast<int>(seed * 13 % 97);
    const double rate = 0.01 + 0.05 * static_cast<double>(seed % 5);
    const auto labels = RandomLabels(n_units, per_unit, rate, seed);
    int64_t n1 = 0, n = 0;
    for (const auto& u : labels) {
      for (uint8_t y : u) n1 += y, ++n;
    }
    const double pbar = static_cast<double>(n1) / static_cast<double>(n);  // the window's mean label
    std::vector<NeUnit> units;
    for (const auto& u : labels) {
      NeUnit unit;
      for (uint8_t y : u) unit.Add(pbar, y != 0);
      units.push_back(unit);
    }
    const NeResult r = EvaluateNe(units);
    EXPECT_EQ(r.ne, 1.0) << "seed " << seed;
    EXPECT_EQ(r.count, n);
    EXPECT_EQ(r.positives, n1);
  }
}

TEST(Ne, WindowedConstantPredictorGivesExactlyOneOverTheLastSteps) {
  // Ten steps of two ranks; the predictor outputs the mean label of the last four steps.
  const auto labels = RandomLabels(20, 64, 0.05, 99);
  NeTracker tracker(/*tasks=*/1, /*window_steps=*/4);
  int64_t n1 = 0, n = 0;
  for (int u = 12; u < 20; ++u) {
    for (uint8_t y : labels[static_cast<size_t>(u)]) n1 += y, ++n;
  }
  const double pbar = static_cast<double>(n1) / static_cast<double>(n);
  for (int step = 0; step < 10; ++step) {
    std::vector<NeUnit> units;
    for (int rank = 0; rank < 2; ++rank) {
      NeUnit unit;
      for (uint8_t y : labels[static_cast<size_t>(step * 2 + rank)]) unit.Add(pbar, y != 0);
      units.push_back(unit);
    }
    tracker.AddStep(units);
  }
  EXPECT_EQ(tracker.Windowed(0).ne, 1.0);
  EXPECT_EQ(tracker.Windowed(0).count, n);
  EXPECT_EQ(tracker.Lifetime(0).count, 20 * 64);
}

TEST(Ne, HandWorkedExample) {
  // Labels 1, 0, 0, 1 with p = 0.5, 0.25, 0.5, 0.75: cross-entropy (bits) = (1 + log2(4/3) + 1 +
  // log2(4/3)) / 4; p̄ = 0.5 so the entropy is 1 bit.
  NeUnit u;
  u.Add(0.5, true);
  u.Add(0.25, false);
  u.Add(0.5, false);
  u.Add(0.75, true);
  const NeResult r = EvaluateNe(std::vector<NeUnit>{u});
  const double want = (2.0 + 2.0 * std::log2(4.0 / 3.0)) / 4.0;
  EXPECT_NEAR(r.ne, want, 1e-15);
  EXPECT_EQ(r.entropy, 1.0);
  EXPECT_EQ(r.mean_label, 0.5);
  EXPECT_EQ(r.calibration, 2.0 / 2.0);
}

TEST(Ne, PerfectPredictionsAreClampedNotInfinite) {
  NeUnit u;
  u.Add(1.0, true);
  u.Add(0.0, false);
  u.Add(0.0, true);  // a confident miss: clamped to 1e-12, -log2 = 39.86 bits
  const NeResult r = EvaluateNe(std::vector<NeUnit>{u});
  EXPECT_TRUE(std::isfinite(r.ne));
  EXPECT_NEAR(r.cross_entropy, (-std::log2(1.0 - 1e-12) * 2.0 - std::log2(1e-12)) / 3.0, 1e-12);
}

TEST(Ne, NoSamplesGiveNaNAndNoPositivesGiveNaNCalibration) {
  EXPECT_TRUE(std::isnan(EvaluateNe(std::vector<NeUnit>{}).ne));
  NeUnit u;
  u.Add(0.1, false);
  const NeResult r = EvaluateNe(std::vector<NeUnit>{u});
  EXPECT_TRUE(std::isnan(r.calibration));
  EXPECT_TRUE(std::isfinite(r.ne));
}

TEST(Ne, MaskedSamplesAreSkipped) {
  const std::vector<double> p = {0.9, 0.2, 0.3};
  const std::vector<uint8_t> y = {1, 0, 1}, m = {1, 0, 1};
  const NeUnit u = MakeNeUnit(p.data(), y.data(), m.data(), 3);
  EXPECT_EQ(u.count(), 2);
  EXPECT_EQ(u.n1, 2);
  EXPECT_EQ(u.sum_p, 0.9 + 0.3);
}

TEST(Ne, WindowKeepsOnlyTheLastSteps) {
  NeTracker tracker(2, 3);
  for (int step = 0; step < 5; ++step) {
    NeUnit a, b;
    a.Add(0.5, step % 2 == 0);
    b.Add(0.5, true);
    b.Add(0.5, false);
    tracker.AddStep({a, b});
  }
  EXPECT_EQ(tracker.Windowed(0).count, 3);
  EXPECT_EQ(tracker.Windowed(1).count, 6);
  EXPECT_EQ(tracker.Lifetime(0).count, 5);
  EXPECT_EQ(tracker.Lifetime(1).count, 10);
  EXPECT_EQ(tracker.Windowed(0).positives, 2);  // steps 2, 3, 4: labels 1, 0, 1
}

}  // namespace
}  // namespace gemtb::metrics
