// Normalized entropy and calibration, with the exact-1 evaluation.
//
// NE (He et al. 2014, TorchRec's variant): cross-entropy of the predictions over the masked samples,
// divided by the entropy of the window's own mean label p̄; p and p̄ clamped to [1e-12, 1 - 1e-12],
// log2, fp64. Calibration = Σp / Σy.
//
// Exact-1 evaluation: each unit (one step on one rank, one task) keeps S1 = seqsum of -log2 p over
// its positives, S0 = seqsum of -log2(1 - p) over its negatives, the counts n1, n0 and Σp. Units
// merge in order. The denominator replays the same sums with -log2 p̄ (n1 times) and -log2(1 - p̄)
// (n0 times) per unit, merged the same way, so a predictor that outputs p̄ itself gets NE == 1.0
// exactly, not just to rounding. Logs come from model/numerics/det_math.h: the same bits on every
// platform and thread count. Host only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "model/numerics/det_math.h"

namespace gemtb::metrics {

inline constexpr double kNeClamp = 1e-12;

inline double ClampProbability(double p) {
  if (!(p >= kNeClamp)) return kNeClamp;  // also maps NaN to the clamp
  if (p > 1.0 - kNeClamp) return 1.0 - kNeClamp;
  return p;
}

// One unit's sufficient statistics for one task.
struct NeUnit {
  double s1 = 0.0;     // seqsum over positives of -log2 p
  double s0 = 0.0;     // seqsum over negatives of -log2(1 - p)
  double sum_p = 0.0;  // seqsum of p (unclamped) over the unit's masked samples
  int64_t n1 = 0;
  int64_t n0 = 0;

  // Adds one masked sample (call in sample order).
  void Add(double p, bool label) {
    const double c = ClampProbability(p);
    if (label) {
      s1 = s1 + -numerics::DetLog2(c);
      ++n1;
    } else {
      s0 = s0 + -numerics::DetLog2(1.0 - c);
      ++n0;
    }
    sum_p = sum_p + p;
  }
  int64_t count() const { return n1 + n0; }
};

// A unit from arrays: samples b with mask[b] != 0, in order.
inline NeUnit MakeNeUnit(const double* p, const uint8_t* label, const uint8_t* mask, int64_t n, int64_t stride = 1) {
  NeUnit u;
  for (int64_t b = 0; b < n; ++b) {
    if (mask != nullptr && mask[b * stride] == 0) continue;
    u.Add(p[b * stride], label[b * stride] != 0);
  }
  return u;
}

struct NeResult {
  double ne = 0.0;           // NaN when no samples
  double cross_entropy = 0;  // bits per sample: the numerator
  double entropy = 0.0;      // bits per sample of the mean-label predictor: the denominator
  double mean_label = 0.0;   // p̄ (unclamped)
  double calibration = 0.0;  // Σp / Σy; NaN when there are no positives
  int64_t positives = 0;
  int64_t count = 0;
};

// NE over units[first, last) merged in order.
inline NeResult EvaluateNe(const NeUnit* units, int64_t n_units) {
  NeResult r;
  double num = 0.0, sum_p = 0.0;
  int64_t n1 = 0, n0 = 0;
  for (int64_t u = 0; u < n_units; ++u) {
    num = num + (units[u].s1 + units[u].s0);
    sum_p = sum_p + units[u].sum_p;
    n1 += units[u].n1;
    n0 += units[u].n0;
  }
  r.positives = n1;
  r.count = n1 + n0;
  if (r.count == 0) {
    r.ne = r.cross_entropy = r.entropy = r.mean_label = r.calibration = numerics::DetNaN();
    return r;
  }
  const double n = static_cast<double>(r.count);
  r.mean_label = static_cast<double>(n1) / n;
  const double pbar = ClampProbability(r.mean_label);
  const double c1 = -numerics::DetLog2(pbar);
  const double c0 = -numerics::DetLog2(1.0 - pbar);
  // Replay: each unit's S1, S0 as seqsums of the constant, merged exactly as the numerator.
  double den = 0.0;
  for (int64_t u = 0; u < n_units; ++u) {
    double d1 = 0.0, d0 = 0.0;
    for (int64_t i = 0; i < units[u].n1; ++i) d1 = d1 + c1;
    for (int64_t i = 0; i < units[u].n0; ++i) d0 = d0 + c0;
    den = den + (d1 + d0);
  }
  r.cross_entropy = num / n;
  r.entropy = den / n;
  r.ne = num / den;
  r.calibration = n1 > 0 ? sum_p / static_cast<double>(n1) : numerics::DetNaN();
  return r;
}

inline NeResult EvaluateNe(const std::vector<NeUnit>& units) {
  return EvaluateNe(units.data(), static_cast<int64_t>(units.size()));
}

// Lifetime and windowed (the last `window_steps` steps) NE and calibration of T tasks. A step adds
// one unit per rank and task; units keep their (step, rank) order.
class NeTracker {
 public:
  NeTracker(int tasks, int64_t window_steps) : tasks_(tasks), window_(window_steps), lifetime_(tasks) {}

  // One step: units[rank * T + t] (rank-major), any number of ranks.
  void AddStep(const std::vector<NeUnit>& units) {
    for (size_t i = 0; i < units.size(); ++i) lifetime_[i % static_cast<size_t>(tasks_)].push_back(units[i]);
    steps_.push_back(units);
    while (static_cast<int64_t>(steps_.size()) > window_) steps_.pop_front();
  }

  NeResult Lifetime(int task) const { return EvaluateNe(lifetime_[static_cast<size_t>(task)]); }

  NeResult Windowed(int task) const {
    std::vector<NeUnit> units;
    for (const std::vector<NeUnit>& step : steps_) {
      for (size_t i = static_cast<size_t>(task); i < step.size(); i += static_cast<size_t>(tasks_)) {
        units.push_back(step[i]);
      }
    }
    return EvaluateNe(units);
  }

  int tasks() const { return tasks_; }
  int64_t window_steps() const { return window_; }

 private:
  int tasks_;
  int64_t window_;
  std::vector<std::vector<NeUnit>> lifetime_;  // per task, every unit in order
  std::deque<std::vector<NeUnit>> steps_;      // the last window_ steps
};

}  // namespace gemtb::metrics
