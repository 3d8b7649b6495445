// An attention block's fused input side (gpu/train/attention_input_kernels.cuh) run on the CPU by the
// fiber emulation, against host models: LayerNorm as layer_norm_host_model.h models its rows; each
// projection an in-order fp32 sum over k (the emulated mma.sync adds its 16 terms in order) plus the
// bias, rounded to bf16; the QK-norm and RoPE of the rounded rows as tests/gpu/qk_norm_rope_host_model.h
// models QkNormRopeForward (a table of sin 0 and cos 1 where the block has no RoPE). Bit for bit: h,
// the row statistics, every projection, the normed rows and the inverse RMS; one and three
// projections, widths 32, 64 and 128 with head widths 16, 32 and 64, jagged samples, a partial tile;
// a tile's worth of rows past n stays as it was.
#include "tests/gpu/emulation/cuda_shim.h"
// The shim must come first.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu/train/attention_input_kernels.cuh"
#include "gtest/gtest.h"
#include "model/numerics/float_formats.h"
#include "tests/gpu/emulation/emulated_test_util.h"
#include "tests/gpu/emulation/layer_norm_host_model.h"
#include "tests/gpu/qk_norm_rope_host_model.h"

namespace gemtb::gpu::train::ain {

alignas(128) unsigned char smem[Layout<128>::kBytes];  // the kernel's `extern __shared__` array

namespace {

using emu::test::Guarded;
using emu::test::SameBytes;
constexpr auto B = emu::test::Bf16;
constexpr auto R = emu::test::Rounded;

// lengths: the samples' rows (their sum is n).
template <int kD, int kDh>
void RunCase(const std::vector<int32_t>& lengths, int projections, bool rope, uint64_t seed) {
  std::vector<int32_t> offsets = {0};
  for (int32_t l : lengths) offsets.push_back(offsets.back() + l);
  const int64_t n = offsets.back();
  constexpr int kHeads = kD / kDh;
  const std::string where = "n " + std::to_string(n) + ", d " + std::to_string(kD) + ", dh " + std::to_string(kDh) +
                            ", projections " + std::to_string(projections) + (rope ? ", rope" : "");
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t nd = static_cast<size_t>(n) * kD;
  std::vector<float> x(nd), gamma(kD), beta(kD);
  for (float& v : x) v = normal(rng) + 0.2f;
  for (float& v : gamma) v = 1.0f + 0.2f * normal(rng);
  for (float& v : beta) v = 0.1f * normal(rng);
  std::vector<std::vector<uint16_t>> w(projections), bias(projections);
  for (int s = 0; s < projections; ++s) {
    w[s].resize(static_cast<size_t>(kD) * kD);
    bias[s].resize(kD);
    for (uint16_t& v : w[s]) v = R(0.15f * normal(rng));
    for (uint16_t& v : bias[s]) v = R(0.3f * normal(rng));
  }
  int32_t longest = 0;
  for (int32_t l : lengths) longest = std::max(longest, l);
  std::vector<float> table(static_cast<size_t>(longest) * kDh);
  for (int32_t t = 0; t < longest; ++t) {
    for (int m = 0; m < kDh / 2; ++m) {
      const double angle = t / std::pow(10000.0, 2.0 * m / kDh);
      table[static_cast<size_t>(t) * kDh + m] = rope ? static_cast<float>(std::sin(angle)) : 0.0f;
      table[static_cast<size_t>(t) * kDh + kDh / 2 + m] = rope ? static_cast<float>(std::cos(angle)) : 1.0f;
    }
  }

  // Host models.
  const ln::host::Forward norm = ln::host::LayerNormForward(x, gamma, beta, n, kD);
  std::vector<uint16_t> h_want(nd);
  for (size_t e = 0; e < nd; ++e) h_want[e] = R(norm.y[e]);
  const int normed = projections == 1 ? 1 : 2;  // queries (and keys)
  std::vector<std::vector<uint16_t>> y_want(projections, std::vector<uint16_t>(nd)),
      yn_want(normed, std::vector<uint16_t>(nd));
  std::vector<std::vector<float>> inv_want(normed, std::vector<float>(static_cast<size_t>(n) * kHeads));
  for (int s = 0; s < projections; ++s) {
    for (int64_t r = 0; r < n; ++r) {
      for (int c = 0; c < kD; ++c) {
        float acc = 0.0f;
        for (int k = 0; k < kD; ++k) acc += B(h_want[r * kD + k]) * B(w[s][static_cast<size_t>(k) * kD + c]);
        y_want[s][r * kD + c] = R(acc + B(bias[s][c]));
      }
    }
    if (s >= normed) continue;
    for (size_t b = 0; b < lengths.size(); ++b) {
      for (int32_t t = 0; t < lengths[b]; ++t) {
        const int64_t r = offsets[b] + t;
        for (int hd = 0; hd < kHeads; ++hd) {
          float in[kDh], out[kDh];
          for (int i = 0; i < kDh; ++i) in[i] = B(y_want[s][r * kD + hd * kDh + i]);
          test::HostForward(in, kDh, table.data() + static_cast<size_t>(t) * kDh, out, &inv_want[s][r * kHeads + hd]);
          for (int i = 0; i < kDh; ++i) yn_want[s][r * kD + hd * kDh + i] = R(out[i]);
        }
      }
    }
  }

  // The kernel.
  constexpr uint16_t kUntouched16 = 0x7FC1;
  const float kUntouched32 = std::nanf("7");
  const size_t guard = static_cast<size_t>(kRows) * kD;
  std::vector<uint16_t> h(nd + guard, kUntouched16);
  std::vector<float> mean(n + kRows, kUntouched32), rstd(n + kRows, kUntouched32);
  std::vector<std::vector<uint16_t>> y(projections, std::vector<uint16_t>(nd + guard, kUntouched16)),
      yn(normed, std::vector<uint16_t>(nd + guard, kUntouched16));
  std::vector<std::vector<float>> inv(normed, std::vector<float>((n + kRows) * kHeads, kUntouched32));
  Params p;
  p.n = n;
  p.x = x.data();
  p.gamma = gamma.data();
  p.beta = beta.data();
  p.h = h.data();
  p.mean = mean.data();
  p.rstd = rstd.data();
  p.projections = projections;
  for (int s = 0; s < projections; ++s) {
    p.proj[s] = Projection{w[s].data(), bias[s].data(), y[s].data(), s < normed ? yn[s].data() : nullptr,
                           s < normed ? inv[s].data() : nullptr};
  }
  if (rope) {
    p.table = table.data();
    p.offsets = offsets.data();
    p.batch = static_cast<int64_t>(lengths.size());
  }
  const auto grid = static_cast<unsigned>((n + kRows - 1) / kRows);
  emu::SetGridDim({grid, 1, 1});
  for (unsigned b = 0; b < grid; ++b) {
    std::memset(smem, 0xFF, sizeof(smem));
    emu::RunBlock({b, 0, 0}, kThreads, [&] { AttentionInputKernel<kD, kDh>(p); });
  }

  EXPECT_TRUE(SameBytes(h, Guarded(h_want, guard, kUntouched16))) << where << ": h";
  EXPECT_TRUE(SameBytes(mean, Guarded(norm.mean, kRows, kUntouched32))) << where << ": mean";
  EXPECT_TRUE(SameBytes(rstd, Guarded(norm.rstd, kRows, kUntouched32))) << where << ": rstd";
  for (int s = 0; s < projections; ++s) {
    EXPECT_TRUE(SameBytes(y[s], Guarded(y_want[s], guard, kUntouched16))) << where << ": projection " << s;
  }
  for (int s = 0; s < normed; ++s) {
    EXPECT_TRUE(SameBytes(yn[s], Guarded(yn_want[s], guard, kUntouched16))) << where << ": normed " << s;
    EXPECT_TRUE(SameBytes(inv[s], Guarded(inv_want[s], static_cast<size_t>(kRows) * kHeads, kUntouched32)))
        << where << ": inv " << s;
  }
}

TEST(AttentionInputEmulated, IsItsHostModelsBitForBit) {
  RunCase<128, 32>({70, 1, 79}, 3, true, 1);  // small's self-attention block; a partial second tile
  RunCase<128, 32>({5, 40}, 1, false, 2);     // a cross-attention block's queries
  RunCase<32, 16>({64, 3}, 3, true, 3);       // tiny's widths
  RunCase<64, 64>({20}, 3, true, 4);
  RunCase<128, 16>({130}, 3, true, 5);
}

}  // namespace
}  // namespace gemtb::gpu::train::ain
