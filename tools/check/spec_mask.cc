#include "tools/check/spec_mask.h"

#include <array>
#include <cmath>

namespace gemtb::check {
namespace {

int64_t FloorDivide(int64_t a, int64_t n) {  // n > 0; no intermediate can overflow
  return a >= 0 ? a / n : -1 - (-(a + 1)) / n;
}

}  // namespace

bool PairIsValid(const AttentionOptions& o, int64_t i, int64_t j, int64_t lq, int64_t lk) {
  if (i < 0 || i >= lq || j < 0 || j >= lk) return false;
  const int64_t a = i + (o.align == Alignment::kBottomRight ? lk - lq : 0);
  switch (o.mask) {
    case MaskKind::kNone:
      return true;
    case MaskKind::kCausal:
      return j <= a;
    case MaskKind::kWindow: {
      const int64_t l = o.window_left;
      const int64_t r = o.window_right;
      // j >= a - l and j <= a + r, written as differences of small numbers so that any int64
      // window (e.g. INT64_MAX) is exact.
      return (l < 0 || a - j <= l) && (r < 0 || j - a <= r);
    }
    case MaskKind::kBlock:
      return FloorDivide(a, o.block) == FloorDivide(j, o.block);
  }
  return false;
}

int64_t TimeThreshold(int k) { return static_cast<int64_t>(std::ceil(std::exp(0.301 * k))); }

int64_t TimeBucket(int64_t delta) {
  static const std::array<int64_t, 128> thresholds = [] {
    std::array<int64_t, 128> t{};
    for (int k = 1; k <= 128; ++k) t[k - 1] = TimeThreshold(k);
    return t;
  }();
  const int64_t mag = delta < 0 ? -delta : delta;
  int64_t count = 0;
  for (int64_t t : thresholds) count += mag >= t ? 1 : 0;
  return count;
}

}  // namespace gemtb::check
