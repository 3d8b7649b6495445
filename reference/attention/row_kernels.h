// The oracle's fp64 inner loops over many rows at once, compiled for three x86-64 levels (baseline,
// AVX2 with FMA, AVX-512) and chosen once at run time from the CPU (cpuid). Every level performs the
// same multiplications and additions in the same order as Dot and Axpy (kernel_utils.h), never fused
// (-ffp-contract=off), and the same fused steps as softmax_exp::Exp: only the vector width differs,
// so every level gives the same bits.
#ifndef GEMTB_REFERENCE_ATTENTION_ROW_KERNELS_H_
#define GEMTB_REFERENCE_ATTENTION_ROW_KERNELS_H_

#include <cstdint>

namespace gemtb::reference {

struct RowKernels {
  const char* level;  // "baseline", "avx2" or "avx512"
  // out[t] = Dot(a, rows + t * stride, dim) for t < n.
  void (*dot_rows)(const double* a, const double* rows, int64_t stride, int64_t n, int64_t dim, double* out);
  // for t < n in increasing t: Axpy(coef[t], rows + t * stride, y, dim).
  void (*axpy_rows)(const double* coef, const double* rows, int64_t stride, int64_t n, int64_t dim, double* y);
  // Axpy(alpha, x, y, n).
  void (*axpy)(double alpha, const double* x, double* y, int64_t n);
  // dot_rows(a[r], rows, stride, n, dim, out[r]) for r < count.
  void (*dot_rows_multi)(const double* const* a, int count, const double* rows, int64_t stride, int64_t n,
                         int64_t dim, double* const* out);
  // axpy_rows(coef[r], rows, stride, n, dim, y[r]) for r < count.
  void (*axpy_rows_multi)(const double* const* coef, int count, const double* rows, int64_t stride, int64_t n,
                          int64_t dim, double* const* y);
  // axpy(coef[r], x[r], y, dim) for r = 0 .. count-1 in this order.
  void (*axpy_multi)(const double* coef, const double* const* x, int count, double* y, int64_t dim);
  // out[t] = softmax_exp::Exp(x[t] - shift) for t < n (softmax_exp.h).
  void (*exp_rows)(const double* x, double shift, int64_t n, double* out);
};

// The kernels of the widest level this CPU runs, chosen on the first call.
const RowKernels& Kernels();
// softmax_exp::Exp(x) for one value, by the chosen level (whose fused steps are instructions; the
// baseline build calls libm's fma for them).
inline double SoftmaxExp(double x) {
  double y;
  Kernels().exp_rows(&x, 0.0, 1, &y);  // x - 0.0 is x, -0 included
  return y;
}
// Every level this CPU runs, baseline first (for tests that compare them).
int NumRowKernelLevels();
const RowKernels& RowKernelLevel(int index);

}  // namespace gemtb::reference

#endif  // GEMTB_REFERENCE_ATTENTION_ROW_KERNELS_H_
