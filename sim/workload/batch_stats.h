// One rank's batch for one step, reduced to what every cost in the simulator is affine in
// (model.json's Affine {c, B, N, P}): the sample count B, per
// sequence j the tokens N_j = sum_b (l_bj + n_s) and the pairs P_j under j's self-attention mask, and
// X, the KJT bytes this rank moves in global balancing's all-to-all. A StatAffine is a quantity
// affine in these (FLOPs, seconds, bytes) — evaluating it is one short dot product.
#ifndef GEMTB_SIM_WORKLOAD_BATCH_STATS_H_
#define GEMTB_SIM_WORKLOAD_BATCH_STATS_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace gemtb::sim {

// Index layout of one rank-step's statistics: [1, B, X, N_0..N_{J-1}, P_0..P_{J-1}] (slot 0 is the
// constant 1 so that a StatAffine is a plain dot product).
struct StatLayout {
  int sequences = 0;  // J
  int size() const { return 3 + 2 * sequences; }
  static constexpr int kOne = 0, kB = 1, kX = 2;
  int N(int j) const { return 3 + j; }
  int P(int j) const { return 3 + sequences + j; }
};

struct StatAffine {
  std::vector<double> coef;  // StatLayout::size() entries (empty = zero)

  double Eval(absl::Span<const double> stats) const {
    double v = 0.0;
    if (compact_) {
      // Slot 0 is the constant 1: a constant (most collectives' bytes) never touches `stats`.
      v = constant_;
      for (size_t k = 0; k < nz_index_.size(); ++k) v += nz_value_[k] * stats[nz_index_[k]];
      return v;
    }
    for (size_t i = 0; i < coef.size(); ++i) v += coef[i] * stats[i];
    return v;
  }
  // Eval as a start value and terms (index, coefficient) added in order: Eval(stats) is exactly
  // start + val[0] * stats[idx[0]] + val[1] * stats[idx[1]] + ..., left to right. Appends the terms.
  double Program(std::vector<int32_t>& idx, std::vector<double>& val) const {
    if (compact_) {
      idx.insert(idx.end(), nz_index_.begin(), nz_index_.end());
      val.insert(val.end(), nz_value_.begin(), nz_value_.end());
      return constant_;
    }
    for (size_t i = 0; i < coef.size(); ++i) {
      idx.push_back(static_cast<int32_t>(i));
      val.push_back(coef[i]);
    }
    return 0.0;
  }
  void AddScaled(const StatAffine& o, double s) {
    if (coef.size() < o.coef.size()) coef.resize(o.coef.size(), 0.0);
    for (size_t i = 0; i < o.coef.size(); ++i) coef[i] += s * o.coef[i];
    compact_ = false;
  }
  // Multiplies every term by s (compacted or not).
  void Scale(double s) {
    for (double& c : coef) c *= s;
    constant_ *= s;
    for (double& v : nz_value_) v *= s;
  }
  bool IsZero() const {
    for (double c : coef) if (c != 0.0) return false;
    return true;
  }
  // Keeps only the non-zero terms for Eval (most costs touch 2-4 of the statistics); the sum runs
  // in the same index order, so the value is unchanged (0 * x terms add +0).
  void Compact() {
    nz_index_.clear();
    nz_value_.clear();
    constant_ = coef.empty() ? 0.0 : coef[0];
    for (size_t i = 1; i < coef.size(); ++i) {
      if (coef[i] != 0.0) {
        nz_index_.push_back(static_cast<int>(i));
        nz_value_.push_back(coef[i]);
      }
    }
    compact_ = true;
  }

 private:
  bool compact_ = false;
  double constant_ = 0.0;
  std::vector<int32_t> nz_index_;
  std::vector<double> nz_value_;
};

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_WORKLOAD_BATCH_STATS_H_
