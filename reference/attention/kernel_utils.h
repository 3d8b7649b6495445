// Small fixed-order building blocks of the oracle's inner loops, and the rounding policy that
// separates the two precisions (oracle of record vs GPU emulation).
#ifndef GEMTB_REFERENCE_ATTENTION_KERNEL_UTILS_H_
#define GEMTB_REFERENCE_ATTENTION_KERNEL_UTILS_H_

#include <algorithm>
#include <cstdint>

#include "model/common/element_type.h"
#include "model/numerics/float_formats.h"

namespace gemtb::reference {

// Dot product with eight partial sums in a fixed pattern: lane l sums the elements d = l (mod 8) in
// increasing d, then the lanes are combined in a fixed tree. The order depends on n alone, so results
// are identical on every thread count and run, and eight independent chains keep the FPU busy
// (a single running sum is bound by the add latency). The row kernels (row_kernels.h) compute the
// same sums for many rows at once; y += alpha * x (Axpy) lives there, independent per element.
inline double Dot(const double* a, const double* b, int64_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t d = 0;
  for (; d + 8 <= n; d += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[d + l] * b[d + l];
  }
  for (int l = 0; d + l < n; ++l) acc[l] += a[d + l] * b[d + l];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// The softmax row maximum of sc[0 .. n-1], n >= 1: the value of m = sc[0]; m = std::max(m, sc[t])
// for t = 1, 2, ... (a NaN sc[0] stays, later NaNs are skipped), from four running maxima, since one
// chain of dependent max instructions is bound by their latency. When the maximum is 0 the lanes may
// hold the other zero than the chain would, so then the chain decides.
inline double RowMax(const double* sc, int64_t n) {
  double lane[4] = {sc[0], sc[0], sc[0], sc[0]};
  int64_t t = 1;
  for (; t + 4 <= n; t += 4) {
    for (int l = 0; l < 4; ++l) lane[l] = std::max(lane[l], sc[t + l]);
  }
  for (; t < n; ++t) lane[0] = std::max(lane[0], sc[t]);
  const double m = std::max(std::max(lane[0], lane[1]), std::max(lane[2], lane[3]));
  if (m != 0.0) return m;
  double chain = sc[0];
  for (t = 1; t < n; ++t) chain = std::max(chain, sc[t]);
  return chain;
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
