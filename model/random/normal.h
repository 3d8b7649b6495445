// Standard normal samples from Philox4x32-10 by Box-Muller: element e of (seed, stream) uses words
// 2e and 2e+1, so any slice of a tensor can be generated independently and in any order.
// Uses libm's log/cos, so values are bitwise stable per platform (not across libms); use it for test
// and benchmark inputs, never for anything that golden files freeze across platforms.
#ifndef GEMTB_MODEL_RANDOM_NORMAL_H_
#define GEMTB_MODEL_RANDOM_NORMAL_H_

#include <cmath>
#include <cstdint>

#include "model/numerics/philox.h"

namespace gemtb {

inline double PhiloxNormal(uint64_t seed, uint64_t stream, uint64_t element) {
  // u1 in (0, 1]: never log(0).
  const double u1 = (static_cast<double>(numerics::PhiloxWord(seed, stream, 2 * element)) + 1.0) / 4294967296.0;
  const double u2 = static_cast<double>(numerics::PhiloxWord(seed, stream, 2 * element + 1)) / 4294967296.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925 * u2);
}

}  // namespace gemtb

#endif  // GEMTB_MODEL_RANDOM_NORMAL_H_
