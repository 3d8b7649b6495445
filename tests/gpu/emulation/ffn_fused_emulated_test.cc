// The fused feed-forward backward kernel (gpu/train/ffn_fused_kernels.cuh) run on the CPU by the
// fiber emulation, against a host model of the same block: the forward's tape (LayerNorm's statistics,
// u) and LayerNorm's backward as layer_norm_host_model.h models layer_norm_kernels.cuh's rows; each
// product an in-order fp32 sum over k (what the kernel's k-steps and chunks add up to, the emulated
// mma.sync adding its 16 terms in order); the bf16 roundings where the kernel rounds; GELU's
// derivative from gelu.cuh. Bit for bit: du, dx (added to) and the blocks' partial rows of LayerNorm's
// parameter gradients. Widths 32, 64 and 128, one to three hidden chunks, row counts that leave a
// partial tile and a partial LayerNorm block; a tile's worth of rows past the last stays as it was.
#include "tests/gpu/emulation/cuda_shim.h"
// The shim must come first.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu/train/ffn_fused_kernels.cuh"
#include "gtest/gtest.h"
#include "model/numerics/float_formats.h"
#include "tests/gpu/emulation/emulated_test_util.h"
#include "tests/gpu/emulation/layer_norm_host_model.h"

namespace gemtb::gpu::train::ffn {

alignas(128) unsigned char smem[Layout<128>::kBytes];  // the kernels' `extern __shared__` array

namespace {

using emu::test::FirstDifference;
using emu::test::Guarded;
using emu::test::SameBytes;
constexpr auto B = emu::test::Bf16;
constexpr auto R = emu::test::Rounded;

template <int kD>
void RunGridOf(const Params& p) {
  const auto blocks = static_cast<unsigned>((p.n + kRows - 1) / kRows);
  emu::SetGridDim({blocks, 1, 1});
  for (unsigned b = 0; b < blocks; ++b) {
    std::memset(smem, 0xFF, sizeof(smem));
    emu::RunBlock({b, 0, 0}, kThreads, [&] { FfnBackwardKernel<kD>(p); });
  }
}

std::vector<uint16_t> RandomBf16(size_t count, float scale, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<uint16_t> v(count);
  for (uint16_t& e : v) e = R(normal(rng));
  return v;
}

std::vector<float> RandomFloats(size_t count, float mean, float scale, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(mean, scale);
  std::vector<float> v(count);
  for (float& e : v) e = normal(rng);
  return v;
}

template <int kD>
void RunCase(int64_t n, int hidden, uint64_t seed) {
  const std::string where =
      "n " + std::to_string(n) + ", d " + std::to_string(kD) + ", hidden " + std::to_string(hidden);
  std::mt19937_64 rng(seed);
  const size_t nd = static_cast<size_t>(n) * kD, nh = static_cast<size_t>(n) * hidden;
  const std::vector<float> x = RandomFloats(nd, 0.3f, 1.0f, rng);
  const std::vector<float> gamma = RandomFloats(kD, 1.0f, 0.2f, rng), beta = RandomFloats(kD, 0.0f, 0.2f, rng);
  const std::vector<uint16_t> w1 = RandomBf16(static_cast<size_t>(kD) * hidden, 0.2f, rng);
  const std::vector<uint16_t> w2 = RandomBf16(static_cast<size_t>(hidden) * kD, 0.1f, rng);
  const std::vector<uint16_t> b1 = RandomBf16(static_cast<size_t>(hidden), 0.5f, rng);
  const std::vector<uint16_t> ds = RandomBf16(nd, 1.0f, rng);
  const std::vector<float> dx0 = RandomFloats(nd, 0.0f, 1.0f, rng);

  // Host model, the forward's tape: LayerNorm's statistics and u = bf16(bf16(LayerNorm(x)) W1 + b1).
  const ln::host::Forward norm = ln::host::LayerNormForward(x, gamma, beta, n, kD);
  std::vector<uint16_t> u_want(nh);
  for (int64_t r = 0; r < n; ++r) {
    for (int c = 0; c < hidden; ++c) {
      float s = 0.0f;
      for (int k = 0; k < kD; ++k) s += B(R(norm.y[r * kD + k])) * B(w1[static_cast<size_t>(k) * hidden + c]);
      u_want[static_cast<size_t>(r) * hidden + c] = R(s + B(b1[c]));
    }
  }
  // Host model, backward: dh, then LayerNorm's backward added to dx0.
  std::vector<uint16_t> du_want(nh);
  std::vector<float> dh(nd);
  for (int64_t r = 0; r < n; ++r) {
    for (int c = 0; c < hidden; ++c) {
      float s = 0.0f;
      for (int k = 0; k < kD; ++k) s += B(ds[r * kD + k]) * B(w2[static_cast<size_t>(c) * kD + k]);
      const size_t e = static_cast<size_t>(r) * hidden + c;
      du_want[e] = R(B(R(s)) * GeluGradOfBf16(B(u_want[e])));
    }
    for (int j = 0; j < kD; ++j) {
      float s = 0.0f;
      for (int c = 0; c < hidden; ++c) s += B(du_want[r * hidden + c]) * B(w1[static_cast<size_t>(j) * hidden + c]);
      dh[r * kD + j] = s;
    }
  }
  const ln::host::Backward ln_want =
      ln::host::LayerNormBackward(x, gamma, norm.mean, norm.rstd, dh, n, kD, dx0, /*accumulate=*/true);

  // The kernel, every output followed by a guard: a tile of rows (a partial row of each parameter sum)
  // that must stay as it was.
  constexpr uint16_t kUntouched16 = 0x7FC1;
  const float kUntouched32 = std::nanf("7");
  const size_t guard_h = static_cast<size_t>(kRows) * hidden, guard_d = static_cast<size_t>(kRows) * kD;
  const int64_t blocks = (n + ln::kBlockRows - 1) / ln::kBlockRows;
  std::vector<uint16_t> du(nh + guard_h, kUntouched16);
  std::vector<float> dx = Guarded(dx0, guard_d, kUntouched32);
  std::vector<float> g_part((blocks + 1) * kD, kUntouched32), b_part((blocks + 1) * kD, kUntouched32);
  Params p;
  p.n = n;
  p.hidden = hidden;
  p.w1 = w1.data();
  p.w2 = w2.data();
  p.ds = ds.data();
  p.u = u_want.data();
  p.du = du.data();
  p.ln.n = n;
  p.ln.x = x.data();
  p.ln.gamma = gamma.data();
  p.ln.mean = norm.mean.data();
  p.ln.rstd = norm.rstd.data();
  p.ln.dx = dx.data();
  p.ln.g_part = g_part.data();
  p.ln.b_part = b_part.data();
  RunGridOf<kD>(p);

  const std::vector<uint16_t> du_guarded = Guarded(du_want, guard_h, kUntouched16);
  EXPECT_TRUE(SameBytes(du, du_guarded)) << where << ": du, " << FirstDifference(du, du_guarded);
  const std::vector<float> dx_want = Guarded(ln_want.dx, guard_d, kUntouched32),
                           gp_want = Guarded(ln_want.g_part, kD, kUntouched32),
                           bp_want = Guarded(ln_want.b_part, kD, kUntouched32);
  EXPECT_TRUE(SameBytes(dx, dx_want)) << where << ": dx, " << FirstDifference(dx, dx_want);
  EXPECT_TRUE(SameBytes(g_part, gp_want)) << where << ": dgamma's partial rows, " << FirstDifference(g_part, gp_want);
  EXPECT_TRUE(SameBytes(b_part, bp_want)) << where << ": dbeta's partial rows, " << FirstDifference(b_part, bp_want);
}

TEST(FfnFusedEmulated, Width128IsItsHostModelBitForBit) {
  RunCase<128>(1, 64, 1);
  RunCase<128>(150, 192, 2);  // two tiles, the second partial (one whole LayerNorm block and a part)
}

TEST(FfnFusedEmulated, Widths32And64AreTheirHostModelsBitForBit) {
  RunCase<32>(37, 64, 3);
  RunCase<64>(129, 128, 4);
  RunCase<32>(64, 128, 5);  // one whole LayerNorm block
}

}  // namespace
}  // namespace gemtb::gpu::train::ffn
