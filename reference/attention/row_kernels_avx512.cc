// The row kernels on AVX-512 (eight doubles per register, one Dot's lanes); compiled with -mavx512f
// (reference/CMakeLists.txt).
#include <immintrin.h>

#include <cstdint>

#include "reference/attention/row_kernels.h"

namespace gemtb::reference::row_kernels_avx512 {

struct Vec {
  static constexpr int kWidth = 8;
  __m512d x;
  static Vec Load(const double* p) { return {_mm512_loadu_pd(p)}; }
  static void Store(double* p, Vec v) { _mm512_storeu_pd(p, v.x); }
  static Vec Set1(double s) { return {_mm512_set1_pd(s)}; }
  static Vec Mul(Vec a, Vec b) { return {_mm512_mul_pd(a.x, b.x)}; }
  static Vec Add(Vec a, Vec b) { return {_mm512_add_pd(a.x, b.x)}; }
};

#include "reference/attention/row_kernels_impl.h"

extern const RowKernels kKernels = {"avx512", DotRows, AxpyRows, Axpy, DotRowsMulti, AxpyRowsMulti, AxpyMulti};

}  // namespace gemtb::reference::row_kernels_avx512
