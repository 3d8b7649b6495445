// The model's GEMM (gpu/train/gemm.h) in each precision against a double-precision loop over the
// same fp32 values: every transpose, padded rows, a matrix shared by the whole batch (stride 0), batches in
// blocks and side by side within rows, beta = 1 accumulation, beta = 0 over a C full of NaN, odd
// sizes; elements outside the matrices neither read nor written; the same bytes on every run; and
// descriptions it cannot take refused by name (that part needs no GPU). At the end, the linear
// layer's product with its bias and residual in cuBLASLt's epilogue (Fp32Matmul::Linear).
//
// The bound: any order of summing k fp32 products (split-K, FMA or not) is within
// k u / (1 - k u) sum_p |a||b| of the exact sum (u = 2^-24); scaling by alpha and adding beta C are
// two more roundings. So |c - ref| <= (k + 2) u (|alpha| sum_p |a||b| + |beta c|), below
// 1e-5 (...) for k <= 165: the cases keep k <= 130 and the bound is 1e-6 + 1e-5 (...). TF32 would
// miss it: inputs rounded to 10 mantissa bits err by about 2^-11 sum_p |a||b| / sqrt(k), several
// times 1e-5 at k = 130.
//
// TF32 rounds each operand to 10 mantissa bits (to nearest, or by truncation: relative error below
// 2^-10 either way), so a product errs by at most 2 * 2^-10 + 2^-20 of |a||b| (2.1e-3), plus the fp32
// bound above. That it does round (and so runs on the tensor cores), and to TF32 rather than bf16,
// shows on operands with bits that TF32 drops and bits that it keeps but bf16 would not.
#include "gpu/train/gemm.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/gpu/train_test_util.h"

namespace gemtb::gpu::train {
namespace {

using test::DeviceArray;
using test::HaveSm90;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kUntouched = 12345.0f;  // C's elements outside the matrices: must stay as they are

// Elements an array of `batch` stored matrices of `rows` rows with row stride `ld` spans.
size_t Extent(int64_t batch, int64_t stride, int64_t rows, int64_t ld) {
  return static_cast<size_t>((batch - 1) * stride + rows * ld);
}

// Where op(A[b])(i, p), op(B[b])(p, j) and C[b](i, j) are.
size_t AAt(const GemmF32& g, int64_t b, int64_t i, int64_t p) {
  return static_cast<size_t>(b * g.stride_a + (g.trans_a ? p * g.lda + i : i * g.lda + p));
}
size_t BAt(const GemmF32& g, int64_t b, int64_t p, int64_t j) {
  return static_cast<size_t>(b * g.stride_b + (g.trans_b ? j * g.ldb + p : p * g.ldb + j));
}
size_t CAt(const GemmF32& g, int64_t b, int64_t i, int64_t j) {
  return static_cast<size_t>(b * g.stride_c + i * g.ldc + j);
}

struct Operands {
  std::vector<float> a, b, c;
};

// A and B NaN except in their matrices (a product that read outside them would be NaN); C
// kUntouched outside its matrices and, inside, normal draws or NaN.
Operands MakeOperands(const GemmF32& g, uint64_t seed, bool c_nan) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Operands o;
  o.a.assign(Extent(g.batch, g.stride_a, g.trans_a ? g.k : g.m, g.lda), kNaN);
  o.b.assign(Extent(g.batch, g.stride_b, g.trans_b ? g.n : g.k, g.ldb), kNaN);
  o.c.assign(Extent(g.batch, g.stride_c, g.m, g.ldc), kUntouched);
  for (int64_t b = 0; b < g.batch; ++b) {  // a shared (stride 0) matrix is simply drawn again
    for (int64_t i = 0; i < g.m; ++i) {
      for (int64_t p = 0; p < g.k; ++p) o.a[AAt(g, b, i, p)] = normal(rng);
    }
    for (int64_t p = 0; p < g.k; ++p) {
      for (int64_t j = 0; j < g.n; ++j) o.b[BAt(g, b, p, j)] = normal(rng);
    }
    for (int64_t i = 0; i < g.m; ++i) {
      for (int64_t j = 0; j < g.n; ++j) o.c[CAt(g, b, i, j)] = c_nan ? kNaN : normal(rng);
    }
  }
  return o;
}

absl::StatusOr<std::vector<float>> RunOnDevice(Fp32Matmul& mm, const GemmF32& g, const Operands& o,
                                               cudaStream_t stream) {
  DeviceArray<float> a(o.a), b(o.b), c(o.c);
  if (absl::Status s = mm.Run(g, a.ptr, b.ptr, c.ptr, stream); !s.ok()) return s;
  if (cudaStreamSynchronize(stream) != cudaSuccess) return absl::InternalError("cudaStreamSynchronize");
  return c.Get(o.c.size());
}

// got against the fp64 loop inside the matrices (the bound above), bit for bit outside them.
void ExpectMatchesFp64(const GemmF32& g, const Operands& o, const std::vector<float>& got, const std::string& what,
                       double rel = 1e-5) {
  ASSERT_EQ(got.size(), o.c.size()) << what;
  std::vector<bool> inside(got.size(), false);
  int bad = 0;
  double max_error = 0, max_fraction = 0;
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t i = 0; i < g.m; ++i) {
      for (int64_t j = 0; j < g.n; ++j) {
        double sum = 0, magnitude = 0;
        for (int64_t p = 0; p < g.k; ++p) {
          const double term = static_cast<double>(o.a[AAt(g, b, i, p)]) * o.b[BAt(g, b, p, j)];
          sum += term;
          magnitude += std::fabs(term);
        }
        const size_t e = CAt(g, b, i, j);
        inside[e] = true;
        double want = static_cast<double>(g.alpha) * sum;
        double scale = std::fabs(g.alpha) * magnitude;
        if (g.beta != 0.0f) {  // beta 0: C is not read, NaN or not
          want += static_cast<double>(g.beta) * o.c[e];
          scale += std::fabs(static_cast<double>(g.beta) * o.c[e]);
        }
        const double error = std::fabs(got[e] - want), bound = 1e-6 + rel * scale;
        if (!(error <= bound) && bad++ < 5) {
          ADD_FAILURE() << what << " C[" << b << "](" << i << ", " << j << "): " << got[e] << ", want " << want
                        << " (bound " << bound << ")";
        }
        max_error = std::max(max_error, error);
        max_fraction = std::max(max_fraction, error / bound);
      }
    }
  }
  EXPECT_EQ(bad, 0) << what;
  int written = 0;
  for (size_t e = 0; e < got.size(); ++e) {
    if (!inside[e] && std::memcmp(&got[e], &kUntouched, sizeof(float)) != 0 && written++ < 5) {
      ADD_FAILURE() << what << ": element " << e << " outside C's matrices was written (" << got[e] << ")";
    }
  }
  EXPECT_EQ(written, 0) << what;
  std::printf("%s: max |error| %.3g, max error/bound %.3f\n", what.c_str(), max_error, max_fraction);
}

// A plain row-major product m x k times k x n, rows unpadded.
GemmF32 Plain(int64_t m, int64_t n, int64_t k) {
  GemmF32 g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.lda = k;
  g.ldb = n;
  g.ldc = n;
  return g;
}

TEST(TrainGemm, DescriptionsItCannotTakeAreRefusedByName) {
  const GemmF32 ok = Plain(7, 33, 130);
  EXPECT_TRUE(ValidateGemmF32(ok).ok());
  const auto message = [&](auto change) {
    GemmF32 g = ok;
    change(g);
    return std::string(ValidateGemmF32(g).message());
  };
  const auto has = [](const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
  };
  EXPECT_TRUE(has(message([](GemmF32& g) { g.m = 0; }), "m=0"));
  EXPECT_TRUE(has(message([](GemmF32& g) { g.n = int64_t{1} << 31; }), "n=2147483648"));
  EXPECT_TRUE(has(message([](GemmF32& g) { g.k = 0; }), "k=0"));
  EXPECT_TRUE(has(message([](GemmF32& g) { g.batch = 0; }), "batch=0"));
  EXPECT_TRUE(has(message([](GemmF32& g) { g.lda = 129; }), "lda=129: want 130"));
  EXPECT_TRUE(ValidateGemmF32([&] {
                GemmF32 g = ok;
                g.trans_a = true;
                g.lda = 7;
                return g;
              }())
                  .ok());
  EXPECT_TRUE(has(message([](GemmF32& g) {
                    g.trans_a = true;
                    g.lda = 6;
                  }),
                  "lda=6: want 7"));
  EXPECT_TRUE(has(message([](GemmF32& g) { g.ldb = 32; }), "ldb=32: want 33"));
  EXPECT_TRUE(has(message([](GemmF32& g) {
                    g.trans_b = true;
                    g.ldb = 129;
                  }),
                  "ldb=129: want 130"));
  EXPECT_TRUE(has(message([](GemmF32& g) { g.ldc = 0; }), "ldc=0"));
  EXPECT_TRUE(has(message([](GemmF32& g) { g.stride_b = -1; }), "stride_b=-1"));
  // Batched C entries that overlap (stride 0, or blocks closer than a matrix) are refused...
  EXPECT_TRUE(has(message([](GemmF32& g) { g.batch = 2; }), "stride_c=0"));
  EXPECT_TRUE(has(message([](GemmF32& g) {
                    g.batch = 2;
                    g.stride_c = 6 * 33 + 32;
                  }),
                  "stride_c=230"));
  // ...blocks and side-by-side entries ([m, batch, n]) are not.
  EXPECT_TRUE(message([](GemmF32& g) {
                g.batch = 2;
                g.stride_c = 6 * 33 + 33;
              }).empty());
  EXPECT_TRUE(message([](GemmF32& g) {
                g.batch = 3;
                g.ldc = 3 * 33;
                g.stride_c = 33;
              }).empty());
  EXPECT_TRUE(has(message([](GemmF32& g) {
                    g.batch = 4;
                    g.ldc = 3 * 33;
                    g.stride_c = 33;
                  }),
                  "stride_c=33"));
  EXPECT_TRUE(has(message([](GemmF32& g) { g.stride_a = -5; }), "stride_a=-5"));
}

struct Case {
  std::string name;
  GemmF32 g;
  bool c_nan = false;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  cases.push_back({"plain", Plain(7, 33, 130)});
  {
    Case c{"trans_a", Plain(33, 130, 7)};
    c.g.trans_a = true;  // A stored [k, m]
    c.g.lda = 33;
    cases.push_back(c);
  }
  {
    Case c{"trans_b", Plain(130, 7, 33)};
    c.g.trans_b = true;  // B stored [n, k]
    c.g.ldb = 33;
    cases.push_back(c);
  }
  {
    Case c{"trans_a and trans_b", Plain(7, 33, 130)};
    c.g.trans_a = c.g.trans_b = true;
    c.g.lda = 7;
    c.g.ldb = 130;
    cases.push_back(c);
  }
  {
    Case c{"padded rows", Plain(33, 7, 130)};
    c.g.lda = 137;
    c.g.ldb = 10;
    c.g.ldc = 12;
    cases.push_back(c);
  }
  {
    Case c{"padded rows, both transposed", Plain(33, 7, 130)};
    c.g.trans_a = c.g.trans_b = true;
    c.g.lda = 40;
    c.g.ldb = 131;
    c.g.ldc = 9;
    cases.push_back(c);
  }
  {
    // A token-mixing matrix [out tokens, in tokens] applied to every sample's [in tokens, d].
    Case c{"shared A (stride_a 0)", Plain(7, 130, 33)};
    c.g.batch = 5;
    c.g.stride_b = 33 * 130;
    c.g.stride_c = 7 * 130;
    cases.push_back(c);
  }
  {
    Case c{"batched with gaps, trans_a", Plain(33, 7, 130)};
    c.g.trans_a = true;
    c.g.lda = 33;
    c.g.batch = 3;
    c.g.stride_a = 130 * 33 + 11;
    c.g.stride_b = 130 * 7 + 5;
    c.g.stride_c = 33 * 7 + 3;
    cases.push_back(c);
  }
  {
    // Per-head products on [tokens, heads, d] arrays: each head's matrix side by side in the rows.
    Case c{"heads side by side", Plain(33, 16, 130)};
    c.g.batch = 4;
    c.g.lda = 4 * 130;
    c.g.stride_a = 130;
    c.g.stride_b = 130 * 16;
    c.g.ldc = 4 * 16;
    c.g.stride_c = 16;
    cases.push_back(c);
  }
  {
    Case c{"beta 1 accumulates", Plain(7, 33, 130)};
    c.g.alpha = 0.5f;
    c.g.beta = 1.0f;
    c.g.batch = 2;
    c.g.stride_a = 7 * 130;
    c.g.stride_b = 130 * 33;
    c.g.stride_c = 7 * 33;
    cases.push_back(c);
  }
  {
    Case c{"beta 0 over NaN", Plain(33, 7, 130)};
    c.g.alpha = -2.0f;
    c.c_nan = true;
    cases.push_back(c);
  }
  {
    Case c{"one by one", Plain(1, 1, 1)};
    c.g.beta = -0.25f;
    cases.push_back(c);
  }
  return cases;
}

TEST(TrainGemm, MatchesAnFp64LoopOnTheSameFp32Values) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  absl::StatusOr<std::unique_ptr<Fp32Matmul>> mm = Fp32Matmul::Create();
  ASSERT_TRUE(mm.ok()) << mm.status();
  uint64_t seed = 1;
  for (const Case& c : Cases()) {
    ASSERT_TRUE(ValidateGemmF32(c.g).ok()) << c.name << ": " << ValidateGemmF32(c.g);
    const Operands o = MakeOperands(c.g, seed++, c.c_nan);
    absl::StatusOr<std::vector<float>> got = RunOnDevice(**mm, c.g, o, nullptr);
    ASSERT_TRUE(got.ok()) << c.name << ": " << got.status();
    ExpectMatchesFp64(c.g, o, *got, c.name);
  }
}

TEST(TrainGemm, TensorCorePrecisionsStayWithinTheirOperandRounding) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (const auto& [precision, rel] : {std::pair{MatmulPrecision::kTf32, 1e-5 + 2.1e-3}}) {
    absl::StatusOr<std::unique_ptr<Fp32Matmul>> mm = Fp32Matmul::Create(precision);
    ASSERT_TRUE(mm.ok()) << mm.status();
    EXPECT_EQ((*mm)->precision(), precision);
    uint64_t seed = 1;
    for (const Case& c : Cases()) {
      const Operands o = MakeOperands(c.g, seed++, c.c_nan);
      absl::StatusOr<std::vector<float>> got = RunOnDevice(**mm, c.g, o, nullptr);
      ASSERT_TRUE(got.ok()) << c.name << ": " << got.status();
      ExpectMatchesFp64(c.g, o, *got, absl::StrCat(PrecisionName(precision), " ", c.name), rel);
    }
  }
}

TEST(TrainGemm, TensorCorePrecisionsRoundTheOperands) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  // A = 1 + 2^-e everywhere, B = 1, so every element of C = A B is k (1 + 2^-e) if A's operand keeps
  // the 2^-e and k if it is rounded away (k = 256: both exact in fp32). fp32 keeps 2^-12 and 2^-9,
  // TF32 (10 mantissa bits) loses 2^-12 but keeps 2^-9 (which bf16, 7 bits, would lose).
  const GemmF32 g = Plain(256, 256, 256);
  struct Expect {
    MatmulPrecision precision;
    int exponent;
    bool kept;
  };
  for (const Expect& x : {Expect{MatmulPrecision::kFp32, 12, true}, Expect{MatmulPrecision::kFp32, 9, true},
                          Expect{MatmulPrecision::kTf32, 12, false}, Expect{MatmulPrecision::kTf32, 9, true}}) {
    Operands o = MakeOperands(g, 7, false);
    const float a = 1.0f + std::ldexp(1.0f, -x.exponent);
    std::fill(o.a.begin(), o.a.end(), a);
    std::fill(o.b.begin(), o.b.end(), 1.0f);
    const float want = x.kept ? 256.0f * a : 256.0f;
    absl::StatusOr<std::unique_ptr<Fp32Matmul>> mm = Fp32Matmul::Create(x.precision);
    ASSERT_TRUE(mm.ok()) << mm.status();
    absl::StatusOr<std::vector<float>> got = RunOnDevice(**mm, g, o, nullptr);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ((*got)[0], want) << PrecisionName(x.precision) << ", A = 1 + 2^-" << x.exponent;
    EXPECT_EQ((*got)[got->size() - 1], want) << PrecisionName(x.precision) << ", A = 1 + 2^-" << x.exponent;
  }
}

TEST(TrainGemm, EveryRunGivesTheSameBytes) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  absl::StatusOr<std::unique_ptr<Fp32Matmul>> first = Fp32Matmul::Create(), second = Fp32Matmul::Create();
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  // A long k with few outputs (where split-K pays) and a larger batched product.
  GemmF32 long_k = Plain(64, 48, 32768);
  long_k.trans_a = true;
  long_k.lda = 64;
  GemmF32 batched = Plain(513, 257, 1031);
  batched.trans_b = true;
  batched.ldb = 1031;
  batched.batch = 3;
  batched.stride_a = 513 * 1031;
  batched.stride_b = 257 * 1031;
  batched.stride_c = 513 * 257;
  batched.beta = 1.0f;
  for (const GemmF32& g : {long_k, batched}) {
    const Operands o = MakeOperands(g, 99, false);
    const absl::StatusOr<std::vector<float>> a = RunOnDevice(**first, g, o, nullptr);
    const absl::StatusOr<std::vector<float>> b = RunOnDevice(**second, g, o, stream);  // another handle and stream
    const absl::StatusOr<std::vector<float>> c = RunOnDevice(**first, g, o, stream);
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    ASSERT_EQ(a->size(), b->size());
    EXPECT_EQ(std::memcmp(a->data(), b->data(), a->size() * sizeof(float)), 0) << "k=" << g.k;
    EXPECT_EQ(std::memcmp(a->data(), c->data(), a->size() * sizeof(float)), 0) << "k=" << g.k;
  }
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

}  // namespace
}  // namespace gemtb::gpu::train

namespace gemtb::gpu::train {
namespace {

// The linear product y = x W + bias + residual (Fp32Matmul::Linear, cuBLASLt with the bias and the
// residual in its epilogue) against an fp64 loop on the same values, in both precisions: with and
// without bias and residual, the residual as y itself, padded rows (ldx > in, ldy > out; the padding
// neither read into y nor written), x at an offset that is 4- but not 16-byte aligned, an output of 3
// columns (the model's last head layer), and the same bytes on a second run. Bound: fp32 as the GEMM
// test's, (k + 3) u (sum |x||w| + |b| + |r|) (one more rounding for the bias), loosened to 1e-5 + 1e-6;
// TF32 within 2.1e-3 sum |x||w| plus that.

struct LinearCase {
  int64_t n, in, out, pad_x, pad_y;
  bool bias, residual, in_place;
  int64_t x_offset;  // floats before x in its allocation
};

void RunLinearCase(MatmulPrecision precision, const LinearCase& c, uint64_t seed) {
  const std::string where = absl::StrCat("n=", c.n, " in=", c.in, " out=", c.out, " pad ", c.pad_x, "/", c.pad_y,
                                         c.bias ? " bias" : "", c.residual ? (c.in_place ? " residual=y" : " residual") : "",
                                         " x+", c.x_offset, " ", precision == MatmulPrecision::kTf32 ? "tf32" : "fp32");
  const int64_t ldx = c.in + c.pad_x, ldy = c.out + c.pad_y;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(c.x_offset + c.n * ldx)), w(static_cast<size_t>(c.in * c.out)),
      b(static_cast<size_t>(std::max<int64_t>(c.out, 4))), r(static_cast<size_t>(c.n * ldy), kUntouched);
  for (float& v : x) v = u(rng);
  for (float& v : w) v = u(rng);
  for (float& v : b) v = u(rng);
  for (int64_t i = 0; i < c.n; ++i)
    for (int64_t j = 0; j < c.out; ++j) r[i * ldy + j] = u(rng);
  // y starts as the residual when in place, else NaN inside the rows and kUntouched in the padding.
  std::vector<float> y0(r.size(), kUntouched);
  for (int64_t i = 0; i < c.n; ++i)
    for (int64_t j = 0; j < c.out; ++j) y0[i * ldy + j] = c.in_place ? r[i * ldy + j] : kNaN;
  absl::StatusOr<std::unique_ptr<Fp32Matmul>> mm = Fp32Matmul::Create(precision);
  ASSERT_TRUE(mm.ok()) << mm.status();
  DeviceArray<float> dx(x), dw(w), db(b), dr(r), dy(y0);
  const float* resid = !c.residual ? nullptr : (c.in_place ? dy.ptr : dr.ptr);
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    dy.Put(y0);
    ASSERT_TRUE((*mm)->Linear(LinearF32{c.n, c.in, c.out, ldx, ldy}, dx.ptr + c.x_offset, dw.ptr,
                              c.bias ? db.ptr : nullptr, resid, dy.ptr, nullptr)
                    .ok())
        << where;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << where;
    const std::vector<float> got = dy.Get(y0.size());
    if (run == 1) {
      EXPECT_EQ(std::memcmp(got.data(), first.data(), got.size() * sizeof(float)), 0) << where << ": second run";
      break;
    }
    first = got;
    int bad = 0;
    for (int64_t i = 0; i < c.n; ++i) {
      for (int64_t j = 0; j < ldy; ++j) {
        const float g = got[i * ldy + j];
        if (j >= c.out) {
          if (g != kUntouched && bad++ < 5) ADD_FAILURE() << where << ": padding y[" << i << "][" << j << "] written";
          continue;
        }
        double ref = 0, mag = 0;
        for (int64_t p = 0; p < c.in; ++p) {
          const double prod = double{x[c.x_offset + i * ldx + p]} * w[p * c.out + j];
          ref += prod, mag += std::fabs(prod);
        }
        if (c.bias) ref += b[j], mag += std::fabs(b[j]);
        if (c.residual) ref += r[i * ldy + j], mag += std::fabs(r[i * ldy + j]);
        const double bound = precision == MatmulPrecision::kTf32 ? 2.1e-3 * mag + 1e-5 * mag + 1e-6 : 1e-5 * mag + 1e-6;
        if (!(std::fabs(g - ref) <= bound) && bad++ < 5) {
          ADD_FAILURE() << where << ": y[" << i << "][" << j << "] = " << g << ", want " << ref << " within " << bound;
        }
      }
    }
    EXPECT_EQ(bad, 0) << where;
  }
}

TEST(TrainLinearF32, ShapesItCannotTakeAreRefusedByName) {
  EXPECT_TRUE(ValidateLinearF32({4, 8, 3, 8, 3}).ok());
  EXPECT_NE(ValidateLinearF32({0, 8, 3, 8, 3}).message().find("n=0"), std::string::npos);
  EXPECT_NE(ValidateLinearF32({4, 8, 3, 7, 3}).message().find("ldx=7"), std::string::npos);
  EXPECT_NE(ValidateLinearF32({4, 8, 3, 8, 2}).message().find("ldy=2"), std::string::npos);
  EXPECT_NE(ValidateLinearF32({4, -1, 3, 8, 3}).message().find("in=-1"), std::string::npos);
}

TEST(TrainLinearF32, MatchesAnFp64LoopWithBiasAndResidualInTheEpilogue) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const std::vector<LinearCase> cases = {
      {300, 128, 128, 0, 0, true, false, false, 0},  {257, 128, 512, 0, 0, true, false, false, 0},
      {100, 512, 128, 0, 0, true, true, false, 0},   {100, 128, 128, 0, 0, true, true, true, 0},
      {50, 64, 96, 8, 32, true, true, false, 1},     {33, 128, 3, 0, 0, true, false, false, 0},
      {70, 96, 64, 0, 0, false, false, false, 3},    {70, 96, 64, 4, 0, false, true, true, 0},
  };
  uint64_t seed = 11;
  for (MatmulPrecision precision : {MatmulPrecision::kFp32, MatmulPrecision::kTf32}) {
    for (const LinearCase& c : cases) RunLinearCase(precision, c, seed++);
  }
}

TEST(TrainLinearF32, RefusesAnUnalignedBias) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  absl::StatusOr<std::unique_ptr<Fp32Matmul>> mm = Fp32Matmul::Create(MatmulPrecision::kTf32);
  ASSERT_TRUE(mm.ok()) << mm.status();
  DeviceArray<float> x(std::vector<float>(64, 1.0f)), w(std::vector<float>(64, 1.0f)), b(std::vector<float>(16)),
      y(std::vector<float>(64));
  const absl::Status s = (*mm)->Linear(LinearF32{8, 8, 8, 8, 8}, x.ptr, w.ptr, b.ptr + 1, nullptr, y.ptr, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("bias"), std::string::npos) << s;
}

}  // namespace
}  // namespace gemtb::gpu::train
