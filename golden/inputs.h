// Inputs of the golden vectors: values drawn from Philox with integer arithmetic and exact or
// correctly rounded IEEE operations only (no log/cos/sin), so that the inputs are the same bytes on
// every platform. model/random/normal.h uses libm and is therefore not used here.
#ifndef GEMTB_GOLDEN_INPUTS_H_
#define GEMTB_GOLDEN_INPUTS_H_

#include <cstdint>
#include <vector>

#include "model/common/element_type.h"
#include "model/numerics/float_formats.h"
#include "model/numerics/philox.h"

namespace gemtb::golden {

// Uniform on [-1, 1) with 24-bit resolution (exact in fp32): element `i` of (seed, stream).
inline double Uniform(uint64_t seed, uint64_t stream, uint64_t i) {
  const uint32_t w = numerics::PhiloxWord(seed, stream, i);
  return static_cast<double>(w >> 8) * (1.0 / 8388608.0) - 1.0;
}

// Roughly standard normal: the Irwin-Hall sum of four uniforms, scaled to unit variance. Every step
// is an exact or correctly rounded fp64 operation, so the bits are platform-independent.
inline double Bell(uint64_t seed, uint64_t stream, uint64_t i) {
  const double s = Uniform(seed, stream, 4 * i) + Uniform(seed, stream, 4 * i + 1) +
                   Uniform(seed, stream, 4 * i + 2) + Uniform(seed, stream, 4 * i + 3);
  return s * 0.8660254037844386;  // sqrt(3)/2: each uniform has variance 1/3
}

// Rounds an fp64 value once to the storage type (RNE), keeping it as fp64.
inline double RoundTo(double x, ElementType t) {
  switch (t) {
    case ElementType::kFloat32: return numerics::RoundDoubleToFloat(x);
    case ElementType::kFloat16: return numerics::RoundDoubleToFp16(x);
    case ElementType::kBFloat16: return numerics::RoundDoubleToBf16(x);
    case ElementType::kFloat64: break;
  }
  return x;
}

// n bell-shaped values times `scale`, rounded to `type`.
inline std::vector<double> BellValues(uint64_t seed, uint64_t stream, int64_t n, double scale, ElementType type) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = RoundTo(scale * Bell(seed, stream, static_cast<uint64_t>(i)), type);
  return v;
}

// A uniform integer in [0, n) (n > 0) from two Philox words.
inline uint64_t UniformInt(uint64_t seed, uint64_t stream, uint64_t i, uint64_t n) {
  const uint64_t w = (uint64_t{numerics::PhiloxWord(seed, stream, 2 * i)} << 32) |
                     numerics::PhiloxWord(seed, stream, 2 * i + 1);
  return w % n;
}

}  // namespace gemtb::golden

#endif  // GEMTB_GOLDEN_INPUTS_H_
