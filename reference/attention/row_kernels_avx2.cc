// The row kernels on AVX2 (four doubles per register); compiled with -mavx2 (reference/CMakeLists.txt).
#include <immintrin.h>

#include <cstdint>

#include "reference/attention/row_kernels.h"

namespace gemtb::reference::row_kernels_avx2 {

struct Vec {
  static constexpr int kWidth = 4;
  __m256d x;
  static Vec Load(const double* p) { return {_mm256_loadu_pd(p)}; }
  static void Store(double* p, Vec v) { _mm256_storeu_pd(p, v.x); }
  static Vec Set1(double s) { return {_mm256_set1_pd(s)}; }
  static Vec Mul(Vec a, Vec b) { return {_mm256_mul_pd(a.x, b.x)}; }
  static Vec Add(Vec a, Vec b) { return {_mm256_add_pd(a.x, b.x)}; }
  // ((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7)) of a Dot's eight lanes (two registers).
  static double Tree8(const Vec* lanes) {
    const __m256d s = _mm256_add_pd(lanes[0].x, lanes[1].x);
    const __m128d t = _mm_hadd_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    return _mm_cvtsd_f64(_mm_add_sd(t, _mm_unpackhi_pd(t, t)));
  }
};

#include "reference/attention/row_kernels_impl.h"

extern const RowKernels kKernels = {"avx2", DotRows, AxpyRows, Axpy, DotRowsMulti, AxpyRowsMulti, AxpyMulti};

}  // namespace gemtb::reference::row_kernels_avx2
