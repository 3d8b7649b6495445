// The fused LayerNorm backward (gpu/train/layer_norm_kernels.cuh) run on the CPU by the fiber
// emulation, against a host model of its fp32 operations in the same order: dx as the unfused input
// kernel computes it (each lane's columns in order, the 32 lanes' sums by the butterfly), written or
// added to; the blocks' partial rows of dgamma and dbeta as eight warps' sums of eight rows each, added
// in warp order. Bit for bit, at widths of 4, 8 and 16 columns per lane (full and partial), on row
// counts that leave partial warps and blocks; rows past n and dx outside them untouched. The partial
// rows' totals also agree with fp64 sums of the definition.
#include "tests/gpu/emulation/cuda_shim.h"
// The shim must come first.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu/train/layer_norm_kernels.cuh"
#include "gtest/gtest.h"
#include "tests/gpu/emulation/layer_norm_host_model.h"

namespace gemtb::gpu::train::ln {

float sums[2 * kWarps * kFusedMaxWidth];  // the kernel's `extern __shared__` array

namespace {

bool SameBytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

template <int kCols>
void RunCase(int64_t n, int width, bool accumulate, uint64_t seed) {
  const std::string where = "n " + std::to_string(n) + " width " + std::to_string(width) +
                            (accumulate ? " accumulating" : " written");
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t cells = static_cast<size_t>(n * width);
  std::vector<float> x(cells), dy(cells), gamma(width), mean(n), rstd(n);
  for (float& v : x) v = normal(rng) + 0.5f;
  for (float& v : dy) v = normal(rng);
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
  emu::SetGridDim({static_cast<unsigned>(blocks), 1, 1});
  for (int64_t b = 0; b < blocks; ++b) {
    std::fill(std::begin(sums), std::end(sums), std::nanf(""));
    emu::RunBlock({static_cast<unsigned>(b), 0, 0}, kThreads, [&] {
      BackwardFusedKernel<kCols>(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(), n, width, dx.data(),
                                 accumulate, part.data(), part.data() + blocks * width);
    });
  }
  EXPECT_TRUE(SameBytes(dx, want.dx)) << where << ": dx";
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

}  // namespace
}  // namespace gemtb::gpu::train::ln
