// The row kernels on AVX2 with FMA (four doubles per register); compiled with -mavx2 -mfma
// (reference/CMakeLists.txt).
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "reference/attention/row_kernels.h"
#include "reference/attention/softmax_exp.h"

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

// softmax_exp::Exp four at a time: Core's steps on every lane, then std::exp for lanes outside its
// range.
void ExpRows(const double* x, double shift, int64_t n, double* out) {
  namespace e = softmax_exp;
  const __m256d sh = _mm256_set1_pd(shift);
  const __m256d sign = _mm256_set1_pd(-0.0);
  int64_t t = 0;
  for (; t + 4 <= n; t += 4) {
    const __m256d v = _mm256_sub_pd(_mm256_loadu_pd(x + t), sh);
    const __m256d a = _mm256_andnot_pd(sign, v);
    const int fast = _mm256_movemask_pd(_mm256_and_pd(_mm256_cmp_pd(a, _mm256_set1_pd(e::kMinAbs), _CMP_GE_OQ),
                                                      _mm256_cmp_pd(a, _mm256_set1_pd(e::kMaxAbs), _CMP_LT_OQ)));
    __m256d kd = _mm256_fmadd_pd(v, _mm256_set1_pd(e::kInvLn2N), _mm256_set1_pd(e::kShift));
    const __m256i ki = _mm256_castpd_si256(kd);
    kd = _mm256_sub_pd(kd, _mm256_set1_pd(e::kShift));
    __m256d r = _mm256_fmadd_pd(kd, _mm256_set1_pd(e::kNegLn2HiN), v);
    r = _mm256_fmadd_pd(kd, _mm256_set1_pd(e::kNegLn2LoN), r);
    const __m256i idx = _mm256_slli_epi64(_mm256_and_si256(ki, _mm256_set1_epi64x(127)), 1);
    const auto* table = reinterpret_cast<const long long*>(e::kTable);
    const __m256d tail = _mm256_castsi256_pd(_mm256_i64gather_epi64(table, idx, 8));
    const __m256i sbits = _mm256_add_epi64(_mm256_i64gather_epi64(table + 1, idx, 8), _mm256_slli_epi64(ki, 45));
    const __m256d scale = _mm256_castsi256_pd(sbits);
    const __m256d r2 = _mm256_mul_pd(r, r);
    __m256d tmp = _mm256_fmadd_pd(_mm256_fmadd_pd(r, _mm256_set1_pd(e::kC3), _mm256_set1_pd(e::kC2)), r2,
                                  _mm256_add_pd(r, tail));
    tmp = _mm256_fmadd_pd(_mm256_mul_pd(r2, r2), _mm256_fmadd_pd(r, _mm256_set1_pd(e::kC5), _mm256_set1_pd(e::kC4)),
                          tmp);
    _mm256_storeu_pd(out + t, _mm256_fmadd_pd(scale, tmp, scale));
    if (fast != 0xF) {
      for (int l = 0; l < 4; ++l) {
        if (!(fast >> l & 1)) out[t + l] = std::exp(x[t + l] - shift);
      }
    }
  }
  for (; t < n; ++t) out[t] = e::Exp(x[t] - shift);
}

extern const RowKernels kKernels = {"avx2",       DotRows,       AxpyRows,  Axpy,
                                    DotRowsMulti, AxpyRowsMulti, AxpyMulti, ExpRows};

}  // namespace gemtb::reference::row_kernels_avx2
