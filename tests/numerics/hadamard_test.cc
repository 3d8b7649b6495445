// Randomized Hadamard transform (model/numerics/hadamard.h) against the format definitions.
#include "model/numerics/hadamard.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "model/numerics/philox.h"

namespace gemtb::numerics {
namespace {

constexpr int kSizes[] = {32, 64, 128};
constexpr uint64_t kSeed = 0x5EEDF00DBA5Eull;
constexpr uint64_t kStream = 77;

// s_i: bit i%32 of word i/32 of Philox at counter 0 of (seed, stream).
int RefSign(int i, uint64_t seed, uint64_t stream) {
  const uint32_t word = PhiloxWord(seed, stream, static_cast<uint64_t>(i / 32));
  return ((word >> (i % 32)) & 1u) != 0 ? -1 : 1;
}

// Natural-order Walsh–Hadamard entry (unnormalised).
int H(int i, int j) { return (std::popcount(static_cast<unsigned>(i & j)) % 2 == 0) ? 1 : -1; }

std::vector<float> RandomVector(int n, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = nd(rng);
  return v;
}

// fp32(1/√n): c - ulp/2 < 1/√n < c + ulp/2, decided exactly by squaring in fp64 (25-bit operands).
TEST(Hadamard, ScaleIsTheNearestFp32ToInverseSqrtN) {
  for (const int n : {2, 4, 8, 16, 32, 64, 128}) {
    const float c = RhtScale(n);
    const double half_ulp = (static_cast<double>(std::nextafter(c, 1.0f)) - c) / 2;
    const double lo = c - half_ulp;
    const double hi = c + half_ulp;
    EXPECT_LT(lo * lo * n, 1.0) << n;
    EXPECT_GT(hi * hi * n, 1.0) << n;
  }
  EXPECT_EQ(RhtScale(64), 0.125f);
  EXPECT_EQ(std::bit_cast<uint32_t>(RhtScale(32)), 0x3E3504F3u);
  EXPECT_TRUE(RhtIsValidSize(32) && RhtIsValidSize(64) && RhtIsValidSize(128));
  EXPECT_FALSE(RhtIsValidSize(16) || RhtIsValidSize(256) || RhtIsValidSize(96));
}

TEST(Hadamard, SignsComeFromPhiloxCounterZero) {
  std::vector<float> x(128, 1.0f);
  RhtApplySigns(x.data(), 128, RhtSignWords(kSeed, kStream));
  int negatives = 0;
  for (int i = 0; i < 128; ++i) {
    EXPECT_EQ(x[static_cast<size_t>(i)], static_cast<float>(RefSign(i, kSeed, kStream))) << i;
    negatives += x[static_cast<size_t>(i)] < 0 ? 1 : 0;
  }
  EXPECT_GT(negatives, 30);
  EXPECT_LT(negatives, 98);
  // Another stream gives other signs.
  std::vector<float> y(128, 1.0f);
  RhtApplySigns(y.data(), 128, RhtSignWords(kSeed, kStream + 1));
  EXPECT_NE(x, y);
}

// Hand-worked n = 32: with x_i = s_i the sign flips give all ones, whose WHT is (32, 0, …, 0);
// × fp32(1/√32) = 0x3E3504F3 gives 32·c = 0x40B504F3 exactly.
TEST(Hadamard, HandWorkedN32) {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[static_cast<size_t>(i)] = static_cast<float>(RefSign(i, kSeed, kStream));
  RandomizedHadamardTransform(x.data(), 32, kSeed, kStream);
  EXPECT_EQ(std::bit_cast<uint32_t>(x[0]), 0x40B504F3u);
  for (int i = 1; i < 32; ++i) EXPECT_EQ(x[static_cast<size_t>(i)], 0.0f) << i;

  // x_i = i + 1: every butterfly is exact on these small integers, so the result is
  // fp32(c · Σ_j H[i][j]·s_j·(j+1)) with the integer sum computed here from the matrix definition.
  std::vector<float> y(32);
  for (int i = 0; i < 32; ++i) y[static_cast<size_t>(i)] = static_cast<float>(i + 1);
  RandomizedHadamardTransform(y.data(), 32, kSeed, kStream);
  const float c = std::bit_cast<float>(0x3E3504F3u);
  for (int i = 0; i < 32; ++i) {
    int sum = 0;
    for (int j = 0; j < 32; ++j) sum += H(i, j) * RefSign(j, kSeed, kStream) * (j + 1);
    EXPECT_EQ(y[static_cast<size_t>(i)], static_cast<float>(sum) * c) << i;
  }
}

// Unit vectors: column j of H·D is s_j·c·H[·][j], for every j and all three sizes.
TEST(Hadamard, UnitVectorsGiveSignedHadamardColumns) {
  for (const int n : kSizes) {
    const float c = RhtScale(n);
    for (int j = 0; j < n; ++j) {
      std::vector<float> x(static_cast<size_t>(n), 0.0f);
      x[static_cast<size_t>(j)] = 1.0f;
      RandomizedHadamardTransform(x.data(), n, kSeed, kStream);
      for (int i = 0; i < n; ++i) {
        ASSERT_EQ(x[static_cast<size_t>(i)], static_cast<float>(RefSign(j, kSeed, kStream) * H(i, j)) * c)
            << n << " " << i << " " << j;
      }
    }
  }
}

// Unnormalised WHT written recursively: transform each half (stages h < n/2), then the last stage
// h = n/2 combines the halves. Performs exactly the fp32 operations of stages h = 1, 2, …, n/2.
void RecursiveWht(float* x, int n) {
  if (n == 1) return;
  RecursiveWht(x, n / 2);
  RecursiveWht(x + n / 2, n / 2);
  for (int j = 0; j < n / 2; ++j) {
    const float a = x[j];
    const float b = x[j + n / 2];
    x[j] = a + b;
    x[j + n / 2] = a - b;
  }
}

// Butterflies with h running downwards: the same matrix, but a different fp32 rounding sequence.
void ReversedStageWht(float* x, int n) {
  for (int h = n / 2; h >= 1; h /= 2) {
    for (int i = 0; i < n; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        const float a = x[j];
        const float b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
}

// The stage order h = 1, 2, …, n/2 and the final × fp32(1/√n) are part of the bitwise contract
// (CPU and GPU must agree), so they are pinned against an independently structured evaluation;
// the reversed order is shown to round differently, so this test can tell them apart.
TEST(Hadamard, ButterflyStagesRunFromH1UpwardsBitwise) {
  std::mt19937_64 rng(91);
  for (const int n : kSizes) {
    int reversed_differs = 0;
    for (int trial = 0; trial < 100; ++trial) {
      const std::vector<float> x = RandomVector(n, rng);
      std::vector<float> got = x;
      RandomizedHadamardTransform(got.data(), n, kSeed, kStream);
      std::vector<float> ref = x;
      std::vector<float> rev = x;
      for (int i = 0; i < n; ++i) {
        if (RefSign(i, kSeed, kStream) < 0) {
          ref[static_cast<size_t>(i)] = -ref[static_cast<size_t>(i)];
          rev[static_cast<size_t>(i)] = -rev[static_cast<size_t>(i)];
        }
      }
      RecursiveWht(ref.data(), n);
      ReversedStageWht(rev.data(), n);
      const float c = RhtScale(n);
      for (int i = 0; i < n; ++i) {
        ref[static_cast<size_t>(i)] *= c;
        rev[static_cast<size_t>(i)] *= c;
      }
      for (int i = 0; i < n; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(got[static_cast<size_t>(i)]),
                  std::bit_cast<uint32_t>(ref[static_cast<size_t>(i)]))
            << n << " " << i;
      }
      reversed_differs += (rev != ref) ? 1 : 0;
    }
    EXPECT_GT(reversed_differs, 50) << n;
  }
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

double MaxAbs(const std::vector<float>& a) {
  double m = 0;
  for (const float v : a) m = std::max(m, std::fabs(static_cast<double>(v)));
  return m;
}

// H is symmetric and orthonormal: WHT∘WHT = I, and (H·D)⁻¹ = D·H, both up to fp32 rounding
// (each output has passed log2(n) additions and two scalings: a few ulps of the vector's norm).
// Note the forward RHT applied twice is not the identity (D·H·D·H ≠ I); the inverse is.
TEST(Hadamard, TransformTwiceReturnsInputUpToRounding) {
  std::mt19937_64 rng(71);
  for (const int n : kSizes) {
    for (int trial = 0; trial < 200; ++trial) {
      const std::vector<float> x = RandomVector(n, rng);
      const double tol = 16 * std::sqrt(static_cast<double>(n)) * MaxAbs(x) * 0x1p-24;
      std::vector<float> y = x;
      WalshHadamardInPlace(y.data(), n);
      ASSERT_GT(MaxAbsDiff(x, y), 0.1);  // it did something
      WalshHadamardInPlace(y.data(), n);
      EXPECT_LE(MaxAbsDiff(x, y), tol) << n;

      std::vector<float> z = x;
      RandomizedHadamardTransform(z.data(), n, kSeed, kStream);
      InverseRandomizedHadamardTransform(z.data(), n, kSeed, kStream);
      EXPECT_LE(MaxAbsDiff(x, z), tol) << n;

      std::vector<float> w = x;
      RandomizedHadamardTransform(w.data(), n, kSeed, kStream);
      RandomizedHadamardTransform(w.data(), n, kSeed, kStream);
      EXPECT_GT(MaxAbsDiff(x, w), 0.1) << "forward twice should not be the identity";
    }
  }
}

// Q and K transformed alike keep their dot products (the point of sharing the RHT along Dqk).
TEST(Hadamard, PreservesDotProductsOfQAndKTransformedAlike) {
  std::mt19937_64 rng(81);
  for (const int n : kSizes) {
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<float> q = RandomVector(n, rng);
      std::vector<float> k = RandomVector(n, rng);
      double dot = 0, qq = 0, kk = 0;
      for (int i = 0; i < n; ++i) {
        dot += static_cast<double>(q[static_cast<size_t>(i)]) * k[static_cast<size_t>(i)];
        qq += static_cast<double>(q[static_cast<size_t>(i)]) * q[static_cast<size_t>(i)];
        kk += static_cast<double>(k[static_cast<size_t>(i)]) * k[static_cast<size_t>(i)];
      }
      RandomizedHadamardTransform(q.data(), n, kSeed, trial);
      RandomizedHadamardTransform(k.data(), n, kSeed, trial);
      double dot_t = 0, qq_t = 0;
      for (int i = 0; i < n; ++i) {
        dot_t += static_cast<double>(q[static_cast<size_t>(i)]) * k[static_cast<size_t>(i)];
        qq_t += static_cast<double>(q[static_cast<size_t>(i)]) * q[static_cast<size_t>(i)];
      }
      const double scale = std::sqrt(qq * kk);
      EXPECT_LE(std::fabs(dot_t - dot), 1e-5 * scale) << n;
      EXPECT_LE(std::fabs(qq_t - qq), 1e-5 * qq) << n;
    }
  }
}

}  // namespace
}  // namespace gemtb::numerics
