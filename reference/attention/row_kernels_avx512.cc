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

extern const RowKernels kKernels = {"avx512", DotRows, AxpyRows, Axpy, DotRowsMulti, AxpyRowsMulti, AxpyMulti};

}  // namespace gemtb::reference::row_kernels_avx512
