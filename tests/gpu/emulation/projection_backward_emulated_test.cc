// The attention projections' fused input gradient and LayerNorm backward
// (gpu/train/projection_backward_kernels.cuh) run on the CPU by the fiber emulation, against a host
// model: dh an in-order fp32 sum over the sources, then k (the emulated mma.sync adds its 16 terms
// in order), and LayerNorm's backward of dh as layer_norm_host_model.h models it. Bit for bit: dx
// (added to) and the blocks' partial rows; one to three sources, widths 32, 64 and 128, row counts
// that leave a partial tile and a partial block; a tile's worth of rows past n stays as it was.
#include "tests/gpu/emulation/cuda_shim.h"
// The shim must come first.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu/train/projection_backward_kernels.cuh"
#include "gtest/gtest.h"
#include "model/numerics/float_formats.h"
#include "tests/gpu/emulation/emulated_test_util.h"
#include "tests/gpu/emulation/layer_norm_host_model.h"

namespace gemtb::gpu::train::proj {

alignas(128) unsigned char smem[Layout<128>::kBytes];  // the kernel's `extern __shared__` array

namespace {

using emu::test::SameBytes;
constexpr auto B = emu::test::Bf16;

template <int kD>
void RunCase(int64_t n, int sources, uint64_t seed) {
  const std::string where =
      "n " + std::to_string(n) + ", d " + std::to_string(kD) + ", sources " + std::to_string(sources);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t nd = static_cast<size_t>(n) * kD;
  std::vector<std::vector<uint16_t>> dy(sources), w(sources);
  for (int s = 0; s < sources; ++s) {
    dy[s].resize(nd);
    w[s].resize(static_cast<size_t>(kD) * kD);
    for (uint16_t& v : dy[s]) v = numerics::FloatToBf16BitsRne(normal(rng));
    for (uint16_t& v : w[s]) v = numerics::FloatToBf16BitsRne(0.1f * normal(rng));
  }
  std::vector<float> x(nd), gamma(kD), mean(n), rstd(n), dx0(nd);
  for (float& v : x) v = normal(rng) + 0.3f;
  for (float& v : gamma) v = 1.0f + 0.2f * normal(rng);
  for (float& v : dx0) v = normal(rng);
  for (int64_t r = 0; r < n; ++r) {
    mean[r] = 0.3f + 0.01f * normal(rng);
    rstd[r] = 1.0f + 0.05f * normal(rng);
  }

  // Host model.
  std::vector<float> dh(nd);
  for (int64_t r = 0; r < n; ++r) {
    for (int j = 0; j < kD; ++j) {
      float acc = 0.0f;
      for (int s = 0; s < sources; ++s)
        for (int k = 0; k < kD; ++k) acc += B(dy[s][r * kD + k]) * B(w[s][static_cast<size_t>(j) * kD + k]);
      dh[r * kD + j] = acc;
    }
  }
  const ln::host::Backward want = ln::host::LayerNormBackward(x, gamma, mean, rstd, dh, n, kD, dx0, true);

  // The kernel; outputs followed by a guard that must stay as it was.
  const float kUntouched = std::nanf("7");
  const int64_t blocks = (n + ln::kBlockRows - 1) / ln::kBlockRows;
  std::vector<float> dx = dx0;
  dx.resize(nd + static_cast<size_t>(kRows) * kD, kUntouched);
  std::vector<float> g_part((blocks + 1) * kD, kUntouched), b_part((blocks + 1) * kD, kUntouched);
  Params p;
  p.sources = sources;
  for (int s = 0; s < sources; ++s) p.dy[s] = dy[s].data(), p.w[s] = w[s].data();
  p.ln.n = n;
  p.ln.x = x.data();
  p.ln.gamma = gamma.data();
  p.ln.mean = mean.data();
  p.ln.rstd = rstd.data();
  p.ln.dx = dx.data();
  p.ln.g_part = g_part.data();
  p.ln.b_part = b_part.data();
  const auto grid = static_cast<unsigned>((n + kRows - 1) / kRows);
  emu::SetGridDim({grid, 1, 1});
  for (unsigned b = 0; b < grid; ++b) {
    std::memset(smem, 0xFF, sizeof(smem));
    emu::RunBlock({b, 0, 0}, kThreads, [&] { ProjectionsBackwardKernel<kD>(p); });
  }
  std::vector<float> dx_want = want.dx, gp_want = want.g_part, bp_want = want.b_part;
  dx_want.resize(dx.size(), kUntouched);
  gp_want.resize(g_part.size(), kUntouched);
  bp_want.resize(b_part.size(), kUntouched);
  EXPECT_TRUE(SameBytes(dx, dx_want)) << where << ": dx";
  EXPECT_TRUE(SameBytes(g_part, gp_want)) << where << ": dgamma's partial rows";
  EXPECT_TRUE(SameBytes(b_part, bp_want)) << where << ": dbeta's partial rows";
  for (size_t e = 0; e < nd; ++e) {
    if (std::memcmp(&dx[e], &dx_want[e], sizeof(float)) != 0) {
      ADD_FAILURE() << where << ": first dx difference at " << e << ": " << dx[e] << ", want " << dx_want[e];
      break;
    }
  }
}

TEST(ProjectionsBackwardEmulated, IsItsHostModelBitForBit) {
  RunCase<128>(150, 3, 1);  // a self-attention block: q, k and v; a partial second tile
  RunCase<128>(1, 1, 2);    // a cross-attention block's queries
  RunCase<32>(64, 3, 3);    // tiny's width, one whole LayerNorm block
  RunCase<64>(129, 2, 4);
}

}  // namespace
}  // namespace gemtb::gpu::train::proj
