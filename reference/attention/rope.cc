#include "reference/attention/rope.h"

#include "reference/attention/kernel_utils.h"

namespace gemtb::reference {
namespace {

// One rotation step; `f` rounds each operation (identity in the oracle, fp32 in emulate mode).
template <typename Round>
void Rotate(const double* x, double* y, const double* table, int64_t dim, bool transpose, Round f) {
  const int64_t half = dim / 2;
  for (int64_t m = 0; m < half; ++m) {
    const double s = f(table[m]);
    const double c = f(table[half + m]);
    const double x0 = x[2 * m];
    const double x1 = x[2 * m + 1];
    if (!transpose) {
      y[2 * m] = f(f(x0 * c) - f(x1 * s));
      y[2 * m + 1] = f(f(x1 * c) + f(x0 * s));
    } else {
      y[2 * m] = f(f(x0 * c) + f(x1 * s));
      y[2 * m + 1] = f(f(x1 * c) - f(x0 * s));
    }
  }
}

template <typename Round>
void RotateAll(const double* x, double* y, int64_t rows, int64_t heads, int64_t dim,
               const double* table, bool transpose, Round f) {
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t at = (t * heads + h) * dim;
      Rotate(x + at, y + at, table + t * dim, dim, transpose, f);
    }
  }
}

}  // namespace

std::vector<double> RopeForward(absl::Span<const double> x, int64_t rows, int64_t heads, int64_t dim,
                                absl::Span<const double> table, bool emulate, ElementType storage) {
  std::vector<double> y(x.size());
  if (emulate) {
    RotateAll(x.data(), y.data(), rows, heads, dim, table.data(), false, RoundToFloat);
    for (double& v : y) v = RoundToStorage(v, storage);
  } else {
    RotateAll(x.data(), y.data(), rows, heads, dim, table.data(), false, [](double v) { return v; });
  }
  return y;
}

void RopeBackwardInPlace(absl::Span<double> dy, int64_t rows, int64_t heads, int64_t dim,
                         absl::Span<const double> table, bool emulate) {
  std::vector<double> dx(dy.size());
  if (emulate) {
    RotateAll(dy.data(), dx.data(), rows, heads, dim, table.data(), true, RoundToFloat);
  } else {
    RotateAll(dy.data(), dx.data(), rows, heads, dim, table.data(), true, [](double v) { return v; });
  }
  std::copy(dx.begin(), dx.end(), dy.begin());
}

}  // namespace gemtb::reference
