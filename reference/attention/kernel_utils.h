// Small fixed-order building blocks of the oracle's inner loops, and the rounding policy that
// separates the two precisions (oracle of record vs GPU emulation).
#ifndef GEMTB_REFERENCE_ATTENTION_KERNEL_UTILS_H_
#define GEMTB_REFERENCE_ATTENTION_KERNEL_UTILS_H_

#include <cstdint>

#include "model/common/element_type.h"
#include "model/numerics/float_formats.h"

namespace gemtb::reference {

// Dot product with eight partial sums in a fixed pattern: lane l sums the elements d = l (mod 8) in
// increasing d, then the lanes are combined in a fixed tree. The order depends on n alone, so results
// are identical on every thread count and run, and eight independent chains keep the FPU busy
// (a single running sum is bound by the add latency).
inline double Dot(const double* a, const double* b, int64_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t d = 0;
  for (; d + 8 <= n; d += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[d + l] * b[d + l];
  }
  for (int l = 0; d + l < n; ++l) acc[l] += a[d + l] * b[d + l];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// y[d] += alpha * x[d]: independent per d, so the only order is the caller's loop order.
inline void Axpy(double alpha, const double* x, double* y, int64_t n) {
  for (int64_t d = 0; d < n; ++d) y[d] += alpha * x[d];
}

inline double RoundToFloat(double x) { return static_cast<double>(static_cast<float>(x)); }

inline double RoundToStorage(double x, ElementType type) {
  switch (type) {
    case ElementType::kFloat64: return x;
    case ElementType::kFloat32: return RoundToFloat(x);
    case ElementType::kFloat16: return numerics::RoundDoubleToFp16(x);
    case ElementType::kBFloat16: return numerics::RoundDoubleToBf16(x);
  }
  return x;
}

// Rounding points. In the oracle both are the identity; in emulate mode Acc rounds to the
// fp32 accumulator and Store to the input storage type (what a kernel feeds its next matmul).
template <bool kEmulate>
struct Rounding {
  ElementType storage = ElementType::kFloat64;

  double Acc(double x) const {
    if constexpr (kEmulate) return RoundToFloat(x);
    return x;
  }
  double Store(double x) const {
    if constexpr (kEmulate) return RoundToStorage(x, storage);
    return x;
  }
};

}  // namespace gemtb::reference

#endif  // GEMTB_REFERENCE_ATTENTION_KERNEL_UTILS_H_
