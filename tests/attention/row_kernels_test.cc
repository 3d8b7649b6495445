// The row kernels (reference/attention/row_kernels.h): every instruction-set level this CPU runs gives
// the bits of the scalar Dot and of y += a * x in the caller's order, on lengths with and without a
// tail and on values where a fused multiply-add or another summation order would round differently.
#include "reference/attention/row_kernels.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "reference/attention/kernel_utils.h"
#include "reference/attention/softmax_exp.h"

namespace gemtb::reference {
namespace {

// Values of widely different magnitudes, so that sums depend on their order.
std::vector<double> Values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int> exponent(-30, 30);
  std::vector<double> x(n);
  for (double& v : x) v = std::ldexp(normal(rng), exponent(rng));
  return x;
}

bool SameBits(const std::vector<double>& a, const std::vector<double>& b) {
  // memcmp is not given the null data() of an empty vector (undefined behaviour, UBSan says so).
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

TEST(RowKernelsTest, TheChosenLevelIsTheWidestThisCpuRuns) {
  ASSERT_GE(NumRowKernelLevels(), 1);
  EXPECT_STREQ(RowKernelLevel(0).level, "baseline");
  EXPECT_EQ(&Kernels(), &RowKernelLevel(NumRowKernelLevels() - 1));
}

TEST(RowKernelsTest, EveryLevelGivesTheScalarBits) {
  for (int64_t dim : {1, 3, 7, 8, 13, 31, 32, 64, 100, 128, 129}) {
    for (int64_t n : {0, 1, 3, 4, 5, 9, 17}) {
      const int64_t stride = dim + 3;  // rows apart in memory, as heads interleave
      const std::vector<double> a = Values(dim, 1 + dim), rows = Values(n * stride, 2 + n);
      const std::vector<double> coef = Values(n, 3 + n), y0 = Values(dim, 4 + dim);
      // The scalar definitions: Dot per row, then y += coef[t] * row_t one t after another.
      std::vector<double> dots(n), axpy_rows = y0, axpy = y0;
      for (int64_t t = 0; t < n; ++t) dots[t] = Dot(a.data(), rows.data() + t * stride, dim);
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t d = 0; d < dim; ++d) axpy_rows[d] += coef[t] * rows[t * stride + d];
      }
      const double alpha = Values(1, 5 + n)[0];
      for (int64_t d = 0; d < dim; ++d) axpy[d] += alpha * a[d];
      for (int level = 0; level < NumRowKernelLevels(); ++level) {
        const RowKernels& k = RowKernelLevel(level);
        const std::string where = std::string(k.level) + " dim " + std::to_string(dim) + " n " + std::to_string(n);
        std::vector<double> got_dots(n, -1.0), got_rows = y0, got_axpy = y0;
        k.dot_rows(a.data(), rows.data(), stride, n, dim, got_dots.data());
        k.axpy_rows(coef.data(), rows.data(), stride, n, dim, got_rows.data());
        k.axpy(alpha, a.data(), got_axpy.data(), dim);
        EXPECT_TRUE(SameBits(got_dots, dots)) << where;
        EXPECT_TRUE(SameBits(got_rows, axpy_rows)) << where;
        EXPECT_TRUE(SameBits(got_axpy, axpy)) << where;
      }
    }
  }
}

// The Multi kernels: several vectors or outputs at once (up to and past the four that share a load),
// each with the bits of its own single call.
TEST(RowKernelsTest, MultiKernelsGiveTheBitsOfSingleCalls) {
  for (int64_t dim : {5, 8, 16, 17, 128}) {
    for (int64_t n : {0, 1, 2, 3, 8, 130}) {
      for (int count : {1, 2, 4, 5, 8}) {
        const int64_t stride = dim + 1;
        const std::vector<double> rows = Values(n * stride, 10 + n);
        std::vector<std::vector<double>> a(count), coef(count), y0(count);
        for (int c = 0; c < count; ++c) {
          a[c] = Values(dim, 20 + c);
          coef[c] = Values(n, 30 + c);
          y0[c] = Values(dim, 40 + c);
        }
        const RowKernels& scalar = RowKernelLevel(0);
        for (int level = 0; level < NumRowKernelLevels(); ++level) {
          const RowKernels& k = RowKernelLevel(level);
          const std::string where = std::string(k.level) + " dim " + std::to_string(dim) + " n " +
                                    std::to_string(n) + " count " + std::to_string(count);
          std::vector<std::vector<double>> dots(count, std::vector<double>(n)), ys = y0;
          std::vector<const double*> a_ptr(count), coef_ptr(count);
          std::vector<double*> dot_ptr(count), y_ptr(count);
          for (int c = 0; c < count; ++c) {
            a_ptr[c] = a[c].data();
            coef_ptr[c] = coef[c].data();
            dot_ptr[c] = dots[c].data();
            y_ptr[c] = ys[c].data();
          }
          k.dot_rows_multi(a_ptr.data(), count, rows.data(), stride, n, dim, dot_ptr.data());
          k.axpy_rows_multi(coef_ptr.data(), count, rows.data(), stride, n, dim, y_ptr.data());
          for (int c = 0; c < count; ++c) {
            std::vector<double> want_dots(n), want_y = y0[c];
            scalar.dot_rows(a[c].data(), rows.data(), stride, n, dim, want_dots.data());
            scalar.axpy_rows(coef[c].data(), rows.data(), stride, n, dim, want_y.data());
            EXPECT_TRUE(SameBits(dots[c], want_dots)) << where << " row " << c;
            EXPECT_TRUE(SameBits(ys[c], want_y)) << where << " row " << c;
          }
          // y += coef[r] * x[r] in order r = 0, 1, ...: the single axpy calls one after another.
          const std::vector<double> alphas = Values(count, 50 + n);
          std::vector<double> got = y0[0], want = y0[0];
          k.axpy_multi(alphas.data(), a_ptr.data(), count, got.data(), dim);
          for (int c = 0; c < count; ++c) scalar.axpy(alphas[c], a[c].data(), want.data(), dim);
          EXPECT_TRUE(SameBits(got, want)) << where;
        }
      }
    }
  }
}

// RowMax against the chain it replaces, bit for bit, on rows mixing NaNs (first or later), infinities,
// both zeros and repeated values, at every length up to 19 (each tail of the four lanes).
TEST(RowKernelsTest, RowMaxGivesTheBitsOfTheSequentialMax) {
  const double kNaN = std::numeric_limits<double>::quiet_NaN();
  const double kInf = std::numeric_limits<double>::infinity();
  const double pool[] = {0.0, -0.0, 1.5, -1.5, kInf, -kInf, kNaN, -kNaN, 1e-300, -2.0};
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> pick(0, std::size(pool) - 1);
  int zero_maxima = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const int64_t n = 1 + trial % 19;
    std::vector<double> row(n);
    for (double& x : row) x = pool[pick(rng)];
    double want = row[0];
    for (int64_t t = 1; t < n; ++t) want = std::max(want, row[t]);
    const double got = RowMax(row.data(), n);
    zero_maxima += want == 0.0;
    ASSERT_EQ(std::memcmp(&got, &want, sizeof(double)), 0) << "trial " << trial << " n " << n;
  }
  EXPECT_GT(zero_maxima, 100);  // the zero case, where the lanes defer to the chain, was reached
}

// exp_rows on every level gives softmax_exp::Exp's bits, in the fast range and out of it (zeros,
// tiny and large |x|, subnormal and overflowing results, infinities, NaN), at lengths with and without
// a vector tail.
TEST(RowKernelsTest, ExpRowsGiveTheBitsOfSoftmaxExpOnEveryLevel) {
  const double kInf = std::numeric_limits<double>::infinity();
  const double special[] = {0.0, -0.0, 0x1p-60, -0x1p-54, 0x1p-54, -511.9, 511.9, -512.0, 512.0, -600.0, -745.1,
                            -746.0, 709.7, 710.0, -kInf, kInf, std::numeric_limits<double>::quiet_NaN()};
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> wide(-800.0, 800.0), narrow(-40.0, 0.0);
  for (int64_t n : {0, 1, 5, 8, 13, 64, 301, 200003}) {  // the last: rare roundings where a step unfused differs
    std::vector<double> x(n);
    for (int64_t t = 0; t < n; ++t) {
      x[t] = t % 5 == 0 ? special[(t / 5) % std::size(special)] : (t % 2 ? wide(rng) : narrow(rng));
    }
    for (double shift : {0.0, 1.5, -3.25}) {
      std::vector<double> want(n);
      for (int64_t t = 0; t < n; ++t) want[t] = softmax_exp::Exp(x[t] - shift);
      for (int level = 0; level < NumRowKernelLevels(); ++level) {
        const RowKernels& k = RowKernelLevel(level);
        std::vector<double> got(n, -1.0);
        k.exp_rows(x.data(), shift, n, got.data());
        EXPECT_TRUE(SameBits(got, want)) << k.level << " n " << n << " shift " << shift;
      }
    }
  }
}

// softmax_exp::Exp is the exp of glibc's FMA build, the one this platform's libm runs on a CPU with
// FMA: the same bits on a million arguments over the fast range, its edges and beyond.
TEST(RowKernelsTest, SoftmaxExpGivesTheBitsOfTheSystemExp) {
  std::mt19937_64 rng(12);
  std::uniform_real_distribution<double> wide(-760.0, 720.0), unit(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(-60, 10);
  int64_t differ = 0;
  for (int i = 0; i < 1000000; ++i) {
    const double x = i % 2 ? wide(rng) : std::ldexp(unit(rng), exponent(rng));
    const double ours = softmax_exp::Exp(x), system = std::exp(x);
    if (std::memcmp(&ours, &system, sizeof(double)) != 0 && differ++ < 5) {
      ADD_FAILURE() << "exp(" << x << "): " << ours << " here, " << system << " from the system";
    }
  }
  EXPECT_EQ(differ, 0);
}

}  // namespace
}  // namespace gemtb::reference
