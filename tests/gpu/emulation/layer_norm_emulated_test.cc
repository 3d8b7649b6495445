// The fused LayerNorm backward (gpu/train/layer_norm_kernels.cuh) run on the CPU by the fiber
// emulation, against a host model of its fp32 operations in the same order: dx as the unfused input
// kernel computes it (each lane's columns in order, the 32 lanes' sums by the butterfly), written or
// added to; the blocks' partial rows of dgamma and dbeta as eight warps' sums of eight rows each, added
// in warp order. Bit for bit, at widths of 4, 8 and 16 columns per lane (full and partial), on row
// counts that leave partial warps and blocks; rows past n and dx outside them untouched. The partial
// rows' totals also agree with fp64 sums of the definition. The same with bf16 output gradients and
// with the new dx handed on in bf16 (its rows rounded to nearest even, its partial rows summed as
// dbeta's; none written without a handoff). The forward kernel of rows up to 512 values
// (ForwardRowsKernel, several rows a warp) against the host model of one row a warp, bit for bit, on
// fp32 and bf16 rows into fp32 and bf16 ones (bf16 outputs: the fp32 values rounded to nearest even).
#include "tests/gpu/emulation/cuda_shim.h"
// The shim must come first.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "gpu/train/layer_norm_kernels.cuh"
#include "gtest/gtest.h"
#include "model/numerics/float_formats.h"
#include "tests/gpu/emulation/layer_norm_host_model.h"

namespace gemtb::gpu::train::ln {

float sums[3 * kWarps * kFusedMaxWidth];  // the kernel's `extern __shared__` array

namespace {

bool SameBytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Rows of fp32, or of bf16 bits, for the forward's input and output and the backward's dy.
template <typename T>
T Stored(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return numerics::FloatToBf16BitsRne(v);
  }
}
template <typename T>
float Widened(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return numerics::Bf16BitsToFloat(v);
  }
}

// Dy: float, or uint16_t for bf16 output gradients (the host model gets them widened). kHandOn: the
// kernel also hands the new dx on in bf16 with its partial column sums.
template <int kCols, typename Dy = float, bool kHandOn = false>
void RunCase(int64_t n, int width, bool accumulate, uint64_t seed) {
  const std::string where = "n " + std::to_string(n) + " width " + std::to_string(width) +
                            (accumulate ? " accumulating" : " written") +
                            (std::is_same_v<Dy, float> ? "" : ", bf16 dy") + (kHandOn ? ", handing on" : "");
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t cells = static_cast<size_t>(n * width);
  std::vector<float> x(cells), dy(cells), gamma(width), mean(n), rstd(n);
  std::vector<Dy> dy_in(cells);
  for (float& v : x) v = normal(rng) + 0.5f;
  for (size_t e = 0; e < cells; ++e) {
    dy_in[e] = Stored<Dy>(normal(rng));
    dy[e] = Widened(dy_in[e]);
  }
  for (float& v : gamma) v = 1.0f + 0.25f * normal(rng);
  for (int64_t r = 0; r < n; ++r) {
    double s = 0, s2 = 0;
    for (int i = 0; i < width; ++i) s += x[r * width + i];
    const double m = s / width;
    for (int i = 0; i < width; ++i) s2 += (x[r * width + i] - m) * (x[r * width + i] - m);
    mean[r] = static_cast<float>(m);
    rstd[r] = static_cast<float>(1.0 / std::sqrt(s2 / width + 1e-5));
  }
  // Two spare rows past n: the kernel must leave them as they are.
  std::vector<float> dx0(cells + 2 * width);
  for (float& v : dx0) v = normal(rng);
  const host::Backward want = host::LayerNormBackward(x, gamma, mean, rstd, dy, n, width, dx0, accumulate);

  const int64_t blocks = (n + kBlockRows - 1) / kBlockRows;
  std::vector<float> dx = dx0, part(static_cast<size_t>(2 * blocks * width), std::nanf(""));
  // The handoff's rows, with a spare row past n, and its partial rows.
  std::vector<uint16_t> rows16(cells + width, numerics::FloatToBf16BitsRne(-7.0f));
  std::vector<float> e_part(static_cast<size_t>(blocks * width), std::nanf(""));
  emu::SetGridDim({static_cast<unsigned>(blocks), 1, 1});
  for (int64_t b = 0; b < blocks; ++b) {
    std::fill(std::begin(sums), std::end(sums), std::nanf(""));
    emu::RunBlock({static_cast<unsigned>(b), 0, 0}, kThreads, [&] {
      BackwardFusedKernel<kCols, Dy, kHandOn>(x.data(), gamma.data(), mean.data(), rstd.data(), dy_in.data(), n, width,
                                              dx.data(), accumulate, part.data(), part.data() + blocks * width,
                                              kHandOn ? HandoffOut{rows16.data(), e_part.data()} : HandoffOut{});
    });
  }
  EXPECT_TRUE(SameBytes(dx, want.dx)) << where << ": dx";
  if (kHandOn) {
    for (size_t e = 0; e < cells; ++e) {
      ASSERT_EQ(rows16[e], numerics::FloatToBf16BitsRne(want.dx[e])) << where << ": handed-on row value " << e;
    }
    for (size_t e = cells; e < rows16.size(); ++e) ASSERT_EQ(Widened(rows16[e]), -7.0f) << where << ": the row past n";
    EXPECT_TRUE(SameBytes(e_part, want.e_part)) << where << ": the handed-on partial rows";
    // The definition in fp64: the partial rows add up to the new dx's column sums.
    for (int i = 0; i < width; ++i) {
      double e = 0, ref = 0, scale = 0;
      for (int64_t k = 0; k < blocks; ++k) e += e_part[k * width + i];
      for (int64_t r = 0; r < n; ++r) ref += want.dx[r * width + i], scale += std::fabs(want.dx[r * width + i]);
      ASSERT_NEAR(e, ref, 1e-5 * scale + 1e-30) << where << " column " << i;
    }
  } else {
    EXPECT_TRUE(std::all_of(e_part.begin(), e_part.end(), [](float v) { return std::isnan(v); }))
        << where << ": no handoff, yet its partial rows were written";
  }
  EXPECT_TRUE(SameBytes(std::vector<float>(part.begin(), part.begin() + blocks * width), want.g_part))
      << where << ": dgamma's partial rows";
  EXPECT_TRUE(SameBytes(std::vector<float>(part.begin() + blocks * width, part.end()), want.b_part))
      << where << ": dbeta's partial rows";
  // The definition in fp64: the partial rows add up to sum_rows dy xhat and sum_rows dy.
  for (int i = 0; i < width; ++i) {
    double g = 0, b = 0, g_ref = 0, b_ref = 0, scale = 0;
    for (int64_t k = 0; k < blocks; ++k) g += part[k * width + i], b += part[(blocks + k) * width + i];
    for (int64_t r = 0; r < n; ++r) {
      const double d = dy[r * width + i], hv = (double{x[r * width + i]} - mean[r]) * rstd[r];
      g_ref += d * hv, b_ref += d, scale += std::fabs(d) * (std::fabs(hv) + 1);
    }
    ASSERT_NEAR(g, g_ref, 1e-5 * scale) << where << " column " << i;
    ASSERT_NEAR(b, b_ref, 1e-5 * scale) << where << " column " << i;
  }
}

TEST(LayerNormEmulated, FusedBackwardIsItsHostModelBitForBit) {
  uint64_t seed = 11;
  for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{65}, int64_t{150}}) {
    for (const bool accumulate : {false, true}) {
      RunCase<4>(n, 128, accumulate, seed++);
      RunCase<4>(n, 33, accumulate, seed++);
      RunCase<8>(n, 200, accumulate, seed++);
      RunCase<16>(n, 512, accumulate, seed++);
      if (HasFailure()) return;
    }
  }
}

// The same kernel with bf16 output gradients and with the new dx handed on in bf16: dx and the
// parameters' partial rows as before (of the widened dy), the handed-on rows the new dx rounded to
// nearest even, their partial rows summed as dbeta's are.
TEST(LayerNormEmulated, FusedBackwardOfBf16DyHandingOnIsItsHostModelBitForBit) {
  uint64_t seed = 51;
  for (const int64_t n : {int64_t{1}, int64_t{9}, int64_t{64}, int64_t{130}}) {
    for (const bool accumulate : {false, true}) {
      RunCase<4, uint16_t, false>(n, 128, accumulate, seed++);
      RunCase<4, float, true>(n, 128, accumulate, seed++);
      RunCase<4, uint16_t, true>(n, 33, accumulate, seed++);
      RunCase<8, float, true>(n, 200, accumulate, seed++);
      RunCase<16, uint16_t, true>(n, 512, accumulate, seed++);
      if (HasFailure()) return;
    }
  }
}

template <int kCols, typename T, typename TOut>
void RunForwardCase(int64_t n, int width, uint64_t seed) {
  const std::string where = "n " + std::to_string(n) + " width " + std::to_string(width) + " in " +
                            (std::is_same_v<T, float> ? "fp32" : "bf16") + " out " +
                            (std::is_same_v<TOut, float> ? "fp32" : "bf16");
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t cells = static_cast<size_t>(n * width);
  std::vector<T> x(cells);
  std::vector<float> xf(cells), gamma(width), beta(width);
  for (size_t e = 0; e < cells; ++e) {
    x[e] = Stored<T>(2.0f * normal(rng) + 0.5f);
    xf[e] = Widened(x[e]);
  }
  for (float& v : gamma) v = 1.0f + 0.25f * normal(rng);
  for (float& v : beta) v = 0.1f * normal(rng);
  const host::Forward want = host::LayerNormForward(xf, gamma, beta, n, width);

  // A spare row past n (and past the statistics) that the kernel must leave as it is.
  std::vector<TOut> y(cells + width, Stored<TOut>(-7.0f));
  std::vector<float> mean(n + 1, -7.0f), rstd(n + 1, -7.0f);
  const unsigned blocks = ForwardRowsBlocks<kCols>(n);
  emu::SetGridDim({blocks, 1, 1});
  for (unsigned b = 0; b < blocks; ++b) {
    emu::RunBlock({b, 0, 0}, kThreads, [&] {
      ForwardRowsKernel<kCols, T, TOut>(x.data(), gamma.data(), beta.data(), n, width, y.data(), mean.data(),
                                        rstd.data());
    });
  }
  for (size_t e = 0; e < cells; ++e) {
    const TOut w = Stored<TOut>(want.y[e]);
    ASSERT_EQ(std::memcmp(&y[e], &w, sizeof(TOut)), 0) << where << ": y[" << e << "]";
  }
  for (size_t e = cells; e < y.size(); ++e) ASSERT_EQ(Widened(y[e]), -7.0f) << where << ": the row past n";
  ASSERT_TRUE(SameBytes(std::vector<float>(mean.begin(), mean.begin() + n), want.mean)) << where << ": mean";
  ASSERT_TRUE(SameBytes(std::vector<float>(rstd.begin(), rstd.begin() + n), want.rstd)) << where << ": rstd";
  ASSERT_EQ(mean[n], -7.0f) << where;
  ASSERT_EQ(rstd[n], -7.0f) << where;
}

TEST(LayerNormEmulated, ForwardRowsIsOneRowAWarpBitForBit) {
  uint64_t seed = 101;
  for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{33}, int64_t{64}, int64_t{65}}) {
    RunForwardCase<4, float, float>(n, 128, seed++);
    RunForwardCase<4, float, uint16_t>(n, 128, seed++);
    RunForwardCase<4, uint16_t, uint16_t>(n, 33, seed++);
    RunForwardCase<8, float, uint16_t>(n, 200, seed++);
    RunForwardCase<16, uint16_t, float>(n, 512, seed++);
    RunForwardCase<16, float, float>(n, 300, seed++);
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace gemtb::gpu::train::ln
