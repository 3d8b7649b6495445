// The row kernels at the build's own level: SSE2 (two doubles per register) on x86-64, one double at
// a time elsewhere.
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <cstdint>

#include "reference/attention/row_kernels.h"

namespace gemtb::reference::row_kernels_baseline {

#if defined(__SSE2__)
struct Vec {
  static constexpr int kWidth = 2;
  __m128d x;
  static Vec Load(const double* p) { return {_mm_loadu_pd(p)}; }
  static void Store(double* p, Vec v) { _mm_storeu_pd(p, v.x); }
  static Vec Set1(double s) { return {_mm_set1_pd(s)}; }
  static Vec Mul(Vec a, Vec b) { return {_mm_mul_pd(a.x, b.x)}; }
  static Vec Add(Vec a, Vec b) { return {_mm_add_pd(a.x, b.x)}; }
};
#else
struct Vec {
  static constexpr int kWidth = 1;
  double x;
  static Vec Load(const double* p) { return {*p}; }
  static void Store(double* p, Vec v) { *p = v.x; }
  static Vec Set1(double s) { return {s}; }
  static Vec Mul(Vec a, Vec b) { return {a.x * b.x}; }
  static Vec Add(Vec a, Vec b) { return {a.x + b.x}; }
};
#endif

#include "reference/attention/row_kernels_impl.h"

extern const RowKernels kKernels = {"baseline", DotRows, AxpyRows, Axpy, DotRowsMulti, AxpyRowsMulti, AxpyMulti};

}  // namespace gemtb::reference::row_kernels_baseline
