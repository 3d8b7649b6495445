// The row kernels at the build's own level: SSE2 (two doubles per register) on x86-64, one double at
// a time elsewhere.
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <cstdint>

#include "reference/attention/row_kernels.h"
#include "reference/attention/softmax_exp.h"

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
  // ((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7)) of a Dot's eight lanes (four registers).
  static double Tree8(const Vec* lanes) {
    const __m128d s01 = _mm_add_pd(lanes[0].x, lanes[2].x);  // l0 + l4, l1 + l5
    const __m128d s23 = _mm_add_pd(lanes[1].x, lanes[3].x);  // l2 + l6, l3 + l7
    const __m128d t = _mm_add_pd(_mm_unpacklo_pd(s01, s23), _mm_unpackhi_pd(s01, s23));
    return _mm_cvtsd_f64(_mm_add_sd(t, _mm_unpackhi_pd(t, t)));
  }
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
  static double Tree8(const Vec* l) { return ((l[0].x + l[4].x) + (l[1].x + l[5].x)) + ((l[2].x + l[6].x) + (l[3].x + l[7].x)); }
};
#endif

#include "reference/attention/row_kernels_impl.h"

void ExpRows(const double* x, double shift, int64_t n, double* out) {
  for (int64_t t = 0; t < n; ++t) out[t] = softmax_exp::Exp(x[t] - shift);
}

extern const RowKernels kKernels = {"baseline", DotRows,       AxpyRows,  Axpy,
                                    DotRowsMulti, AxpyRowsMulti, AxpyMulti, ExpRows};

}  // namespace gemtb::reference::row_kernels_baseline
