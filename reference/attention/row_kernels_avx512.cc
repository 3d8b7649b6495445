// The row kernels on AVX-512 (eight doubles per register, one Dot's lanes); compiled with -mavx512f
// -mfma (reference/CMakeLists.txt).
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "reference/attention/row_kernels.h"
#include "reference/attention/softmax_exp.h"

namespace gemtb::reference::row_kernels_avx512 {

struct Vec {
  static constexpr int kWidth = 8;
  __m512d x;
  static Vec Load(const double* p) { return {_mm512_loadu_pd(p)}; }
  static void Store(double* p, Vec v) { _mm512_storeu_pd(p, v.x); }
  static Vec Set1(double s) { return {_mm512_set1_pd(s)}; }
  static Vec Mul(Vec a, Vec b) { return {_mm512_mul_pd(a.x, b.x)}; }
  static Vec Add(Vec a, Vec b) { return {_mm512_add_pd(a.x, b.x)}; }
  // ((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7)) of a Dot's eight lanes (one register). The
  // shuffles are the masked forms with every lane selected: the plain ones pass GCC 12 an undefined
  // operand that it warns about.
  static double Tree8(const Vec* lanes) {
    const __m512d z = lanes[0].x;
    const __m512d s = _mm512_add_pd(z, _mm512_mask_shuffle_f64x2(z, 0xFF, z, z, 0xEE));  // s_l = l_l + l_(l+4)
    const __m512d u = _mm512_add_pd(s, _mm512_mask_permute_pd(s, 0xFF, s, 0x55));  // u_0 = s_0 + s_1, u_2 = s_2 + s_3
    return _mm512_cvtsd_f64(_mm512_add_pd(u, _mm512_mask_shuffle_f64x2(u, 0xFF, u, u, 0x01)));  // u_0 + u_2
  }
  // out[p] = Tree8(lanes + p) for eight Dots, the same additions in the same order with each
  // register holding one step of several trees: the first step pairs the low and high halves of two
  // Dots, the second adds neighbours (unpack), the third the remaining pairs, which leaves
  // (0, 2, 1, 3, 4, 6, 5, 7) of its inputs in order; so the inputs go in that order.
  static void Tree8x8(const Vec* const* lanes, double* out) {
    constexpr int kOrder[8] = {0, 2, 1, 3, 4, 6, 5, 7};
    __m512d s[4];
    for (int i = 0; i < 4; ++i) {
      const __m512d a = lanes[kOrder[2 * i]]->x, b = lanes[kOrder[2 * i + 1]]->x;
      // low halves of a and b, plus their high halves: (a_l + a_(l+4)) and (b_l + b_(l+4)), l < 4
      s[i] = _mm512_add_pd(_mm512_mask_shuffle_f64x2(a, 0xFF, a, b, 0x44), _mm512_mask_shuffle_f64x2(a, 0xFF, a, b, 0xEE));
    }
    __m512d u[2];
    for (int i = 0; i < 2; ++i) {  // s_0 + s_1 and s_2 + s_3 of each Dot
      u[i] = _mm512_add_pd(_mm512_mask_unpacklo_pd(s[2 * i], 0xFF, s[2 * i], s[2 * i + 1]),
                           _mm512_mask_unpackhi_pd(s[2 * i], 0xFF, s[2 * i], s[2 * i + 1]));
    }
    // u_0 + u_2: 128-bit lanes 0 and 2 of u, plus lanes 1 and 3
    _mm512_storeu_pd(out, _mm512_add_pd(_mm512_mask_shuffle_f64x2(u[0], 0xFF, u[0], u[1], 0x88),
                                        _mm512_mask_shuffle_f64x2(u[0], 0xFF, u[0], u[1], 0xDD)));
  }
};

#include "reference/attention/row_kernels_impl.h"

// softmax_exp::Exp eight at a time: Core's steps on every lane, then std::exp for lanes outside its
// range.
void ExpRows(const double* x, double shift, int64_t n, double* out) {
  namespace e = softmax_exp;
  const __m512d sh = _mm512_set1_pd(shift);
  int64_t t = 0;
  for (; t + 8 <= n; t += 8) {
    const __m512d v = _mm512_sub_pd(_mm512_loadu_pd(x + t), sh);
    const __m512d a = _mm512_abs_pd(v);
    const __mmask8 fast = _mm512_cmp_pd_mask(a, _mm512_set1_pd(e::kMinAbs), _CMP_GE_OQ) &
                          _mm512_cmp_pd_mask(a, _mm512_set1_pd(e::kMaxAbs), _CMP_LT_OQ);
    __m512d kd = _mm512_fmadd_pd(v, _mm512_set1_pd(e::kInvLn2N), _mm512_set1_pd(e::kShift));
    const __m512i ki = _mm512_castpd_si512(kd);
    kd = _mm512_sub_pd(kd, _mm512_set1_pd(e::kShift));
    __m512d r = _mm512_fmadd_pd(kd, _mm512_set1_pd(e::kNegLn2HiN), v);
    r = _mm512_fmadd_pd(kd, _mm512_set1_pd(e::kNegLn2LoN), r);
    // The masked forms with every lane selected: the plain shifts and gathers pass GCC 12 an
    // undefined operand that it warns about.
    const __m512i zero = _mm512_setzero_si512();
    const __m512i low = _mm512_and_si512(ki, _mm512_set1_epi64(127));
    const __m512i idx = _mm512_mask_slli_epi64(low, 0xFF, low, 1);
    const __m512d tail = _mm512_castsi512_pd(_mm512_mask_i64gather_epi64(zero, 0xFF, idx, e::kTable, 8));
    const __m512i sbits = _mm512_add_epi64(_mm512_mask_i64gather_epi64(zero, 0xFF, idx, e::kTable + 1, 8),
                                           _mm512_mask_slli_epi64(ki, 0xFF, ki, 45));
    const __m512d scale = _mm512_castsi512_pd(sbits);
    const __m512d r2 = _mm512_mul_pd(r, r);
    __m512d tmp = _mm512_fmadd_pd(_mm512_fmadd_pd(r, _mm512_set1_pd(e::kC3), _mm512_set1_pd(e::kC2)), r2,
                                  _mm512_add_pd(r, tail));
    tmp = _mm512_fmadd_pd(_mm512_mul_pd(r2, r2), _mm512_fmadd_pd(r, _mm512_set1_pd(e::kC5), _mm512_set1_pd(e::kC4)),
                          tmp);
    _mm512_storeu_pd(out + t, _mm512_fmadd_pd(scale, tmp, scale));
    if (fast != 0xFF) {
      for (int l = 0; l < 8; ++l) {
        if (!(fast >> l & 1)) out[t + l] = std::exp(x[t + l] - shift);
      }
    }
  }
  for (; t < n; ++t) out[t] = e::Exp(x[t] - shift);
}

extern const RowKernels kKernels = {"avx512",     DotRows,       AxpyRows,  Axpy,
                                    DotRowsMulti, AxpyRowsMulti, AxpyMulti, ExpRows};

}  // namespace gemtb::reference::row_kernels_avx512
