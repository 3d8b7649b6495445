// Attention pairs of one sample's sequence of n tokens under a self-attention mask, as
// spec/attention.md §10 counts them (valid query-key pairs, per head). O(1) per call: the simulator
// evaluates it for every sample of every rank and step.
#ifndef GEMTB_SIM_WORKLOAD_PAIRS_H_
#define GEMTB_SIM_WORKLOAD_PAIRS_H_

#include <algorithm>
#include <cstdint>

#include "model/description/model_graph.h"

namespace gemtb::sim {

// Pairs with max(0, i - left) <= t <= min(n - 1, i + right) over queries i in [0, n); left/right < 0
// mean unbounded. Query i sees left + right + 1 keys less the l - i cut off at the start (i < l) and
// the i + r - (n - 1) cut off at the end, so the sum is n(l + r + 1) - l(l+1)/2 - r(r+1)/2 with l, r
// clamped to n.
inline double WindowPairs(int64_t n, int64_t left, int64_t right) {
  if (n <= 0) return 0.0;
  const double l = static_cast<double>(left < 0 ? n : std::min(left, n));
  const double r = static_cast<double>(right < 0 ? n : std::min(right, n));
  const double nn = static_cast<double>(n);
  return nn * (l + r + 1.0) - 0.5 * l * (l + 1.0) - 0.5 * r * (r + 1.0);
}

// Full attention inside consecutive chunks of `block` tokens, the first chunk starting at token 0.
inline double BlockPairs(int64_t n, int64_t block) {
  if (n <= 0) return 0.0;
  if (block <= 0) return static_cast<double>(n) * static_cast<double>(n);
  const double full = static_cast<double>(n / block);
  const double rem = static_cast<double>(n % block);
  return full * static_cast<double>(block) * static_cast<double>(block) + rem * rem;
}

inline double PairsUnderMask(const model::AttentionMask& mask, int64_t n) {
  switch (mask.kind) {
    case model::AttentionMask::Kind::kNone: return static_cast<double>(n) * static_cast<double>(n);
    case model::AttentionMask::Kind::kWindow: return WindowPairs(n, mask.left, mask.right);
    case model::AttentionMask::Kind::kBlock: return BlockPairs(n, mask.block);
    case model::AttentionMask::Kind::kCausal: return WindowPairs(n, -1, 0);
  }
  return 0.0;
}

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_WORKLOAD_PAIRS_H_
