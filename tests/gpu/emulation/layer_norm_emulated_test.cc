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

namespace gemtb::gpu::train::ln {

float sums[2 * kWarps * kFusedMaxWidth];  // the kernel's `extern __shared__` array

namespace {

// The 32 lanes' partial sums by the kernel's butterfly (offsets 16, 8, 4, 2, 1): lane 0's result.
float Butterfly(std::vector<float> p) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    std::vector<float> next(kWarp);
    for (int l = 0; l < kWarp; ++l) next[l] = p[l] + p[l ^ offset];
    p = next;
  }
  return p[0];
}

struct Host {
  std::vector<float> dx, g_part, b_part;
};

Host HostModel(const std::vector<float>& x, const std::vector<float>& gamma, const std::vector<float>& mean,
               const std::vector<float>& rstd, const std::vector<float>& dy, int64_t n, int width,
               std::vector<float> dx, bool accumulate) {
  const int64_t blocks = (n + kBlockRows - 1) / kBlockRows;
  Host h;
  h.g_part.assign(static_cast<size_t>(blocks * width), 0.0f);
  h.b_part = h.g_part;
  for (int64_t row = 0; row < n; ++row) {
    const float* xr = x.data() + row * width;
    const float* dyr = dy.data() + row * width;
    std::vector<float> lane_sum(kWarp, 0.0f), lane_sum_h(kWarp, 0.0f);
    for (int l = 0; l < kWarp; ++l) {
      for (int i = l; i < width; i += kWarp) {
        const float hv = (xr[i] - mean[row]) * rstd[row];
        const float dh = dyr[i] * gamma[i];
        lane_sum[l] = lane_sum[l] + dh;
        lane_sum_h[l] = lane_sum_h[l] + dh * hv;
      }
    }
    const float sum = Butterfly(lane_sum) / static_cast<float>(width);
    const float sum_h = Butterfly(lane_sum_h) / static_cast<float>(width);
    for (int i = 0; i < width; ++i) {
      const float hv = (xr[i] - mean[row]) * rstd[row];
      const float dh = dyr[i] * gamma[i];
      const float g = rstd[row] * ((dh - sum) - hv * sum_h);
      float& out = dx[static_cast<size_t>(row * width + i)];
      out = accumulate ? out + g : g;
    }
  }
  for (int64_t b = 0; b < blocks; ++b) {
    for (int i = 0; i < width; ++i) {
      float g = 0.0f, bs = 0.0f;
      for (int w = 0; w < kWarps; ++w) {
        float gw = 0.0f, bw = 0.0f;
        for (int r = 0; r < kRowsPerWarp; ++r) {
          const int64_t row = b * kBlockRows + w * kRowsPerWarp + r;
          if (row >= n) break;
          const float d = dy[static_cast<size_t>(row * width + i)];
          const float hv = (x[static_cast<size_t>(row * width + i)] - mean[row]) * rstd[row];
          gw = gw + d * hv;
          bw = bw + d;
        }
        g = w == 0 ? gw : g + gw;
        bs = w == 0 ? bw : bs + bw;
      }
      h.g_part[static_cast<size_t>(b * width + i)] = g;
      h.b_part[static_cast<size_t>(b * width + i)] = bs;
    }
  }
  h.dx = std::move(dx);
  return h;
}

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
  const Host want = HostModel(x, gamma, mean, rstd, dy, n, width, dx0, accumulate);

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
