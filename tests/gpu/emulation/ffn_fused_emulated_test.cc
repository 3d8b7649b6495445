// The fused feed-forward kernels (gpu/train/ffn_fused_kernels.cuh) run on the
// CPU by the fiber emulation, against a host model of the same chain: each
// product an in-order fp32 sum over k (what the kernel's k-steps and chunks add
// up to, the emulated mma.sync adding its 16 terms in order), the bf16
// roundings where the kernel rounds, GELU and its derivative from gelu.cuh. Bit
// for bit: u, g, y forward; du, dh backward. Widths 32, 64 and 128, one to
// three hidden chunks, row counts that leave a partial tile; a tile's worth of
// rows past the last stays as it was.
#include "tests/gpu/emulation/cuda_shim.h"
// The shim must come first.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu/train/ffn_fused_kernels.cuh"
#include "model/numerics/float_formats.h"
#include "gtest/gtest.h"

namespace gemtb::gpu::train::ffn {

alignas(128) unsigned char smem[Layout<128>::kBytes]; // the kernels' `extern
                                                      // __shared__` array

namespace {

float B(uint16_t bits) { return numerics::Bf16BitsToFloat(bits); }
uint16_t R(float v) { return numerics::FloatToBf16BitsRne(v); }

template <typename T>
bool SameBytes(const std::vector<T> &a, const std::vector<T> &b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <int kD, bool kForward> void RunGridOf(const Params &p) {
  const auto blocks = static_cast<unsigned>((p.n + kRows - 1) / kRows);
  emu::SetGridDim({blocks, 1, 1});
  for (unsigned b = 0; b < blocks; ++b) {
    std::memset(smem, 0xFF, sizeof(smem));
    emu::RunBlock({b, 0, 0}, kThreads,
                  [&] { FfnChainKernel<kD, kForward>(p); });
  }
}

std::vector<uint16_t> RandomBf16(size_t count, float scale,
                                 std::mt19937_64 &rng) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<uint16_t> v(count);
  for (uint16_t &e : v)
    e = R(normal(rng));
  return v;
}

template <int kD> void RunCase(int64_t n, int hidden, uint64_t seed) {
  const std::string where = "n " + std::to_string(n) + ", d " +
                            std::to_string(kD) + ", hidden " +
                            std::to_string(hidden);
  std::mt19937_64 rng(seed);
  const size_t nd = static_cast<size_t>(n) * kD,
               nh = static_cast<size_t>(n) * hidden;
  const std::vector<uint16_t> x = RandomBf16(nd, 1.0f, rng);
  const std::vector<uint16_t> w1 =
      RandomBf16(static_cast<size_t>(kD) * hidden, 0.2f, rng);
  const std::vector<uint16_t> w2 =
      RandomBf16(static_cast<size_t>(hidden) * kD, 0.1f, rng);
  const std::vector<uint16_t> b1 =
      RandomBf16(static_cast<size_t>(hidden), 0.5f, rng);
  const std::vector<uint16_t> ds = RandomBf16(nd, 1.0f, rng);
  std::vector<float> b2(kD), residual(nd);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float &v : b2)
    v = normal(rng);
  for (float &v : residual)
    v = normal(rng);

  // Host model, forward.
  std::vector<uint16_t> u_want(nh), g_want(nh);
  std::vector<float> y_want(nd);
  for (int64_t r = 0; r < n; ++r) {
    for (int c = 0; c < hidden; ++c) {
      float s = 0.0f;
      for (int k = 0; k < kD; ++k)
        s += B(x[r * kD + k]) * B(w1[static_cast<size_t>(k) * hidden + c]);
      const size_t e = static_cast<size_t>(r) * hidden + c;
      u_want[e] = R(s + B(b1[c]));
      g_want[e] = R(GeluOf(B(u_want[e])));
    }
    for (int j = 0; j < kD; ++j) {
      float s = 0.0f;
      for (int c = 0; c < hidden; ++c)
        s += B(g_want[r * hidden + c]) * B(w2[static_cast<size_t>(c) * kD + j]);
      y_want[r * kD + j] = (s + b2[j]) + residual[r * kD + j];
    }
  }
  // Host model, backward (the forward's u).
  std::vector<uint16_t> du_want(nh);
  std::vector<float> dh_want(nd);
  for (int64_t r = 0; r < n; ++r) {
    for (int c = 0; c < hidden; ++c) {
      float s = 0.0f;
      for (int k = 0; k < kD; ++k)
        s += B(ds[r * kD + k]) * B(w2[static_cast<size_t>(c) * kD + k]);
      const size_t e = static_cast<size_t>(r) * hidden + c;
      du_want[e] = R(B(R(s)) * GeluGradOf(B(u_want[e])));
    }
    for (int j = 0; j < kD; ++j) {
      float s = 0.0f;
      for (int c = 0; c < hidden; ++c)
        s += B(du_want[r * hidden + c]) *
             B(w1[static_cast<size_t>(j) * hidden + c]);
      dh_want[r * kD + j] = s;
    }
  }

  // The kernels, each output kRows rows longer than n: those rows must stay as
  // they were.
  constexpr uint16_t kUntouched16 = 0x7FC1;
  const float kUntouched32 = std::nanf("7");
  const size_t guard_h = static_cast<size_t>(kRows) * hidden,
               guard_d = static_cast<size_t>(kRows) * kD;
  std::vector<uint16_t> u(nh + guard_h, kUntouched16),
      g(nh + guard_h, kUntouched16), du(nh + guard_h, kUntouched16);
  std::vector<float> y(nd + guard_d, kUntouched32),
      dh(nd + guard_d, kUntouched32);
  Params f;
  f.n = n;
  f.hidden = hidden;
  f.x = x.data();
  f.w1 = w1.data();
  f.w2 = w2.data();
  f.b1 = b1.data();
  f.b2 = b2.data();
  f.residual = residual.data();
  f.u = u.data();
  f.g = g.data();
  f.out = y.data();
  RunGridOf<kD, true>(f);
  Params b;
  b.n = n;
  b.hidden = hidden;
  b.x = ds.data();
  b.w1 = w1.data();
  b.w2 = w2.data();
  b.u_in = u.data();
  b.du = du.data();
  b.out = dh.data();
  RunGridOf<kD, false>(b);

  auto with_guard16 = [&](std::vector<uint16_t> v) {
    v.resize(nh + guard_h, kUntouched16);
    return v;
  };
  auto with_guard32 = [&](std::vector<float> v) {
    v.resize(nd + guard_d, kUntouched32);
    return v;
  };
  EXPECT_TRUE(SameBytes(u, with_guard16(u_want))) << where << ": u";
  EXPECT_TRUE(SameBytes(g, with_guard16(g_want))) << where << ": g";
  EXPECT_TRUE(SameBytes(y, with_guard32(y_want))) << where << ": y";
  EXPECT_TRUE(SameBytes(du, with_guard16(du_want))) << where << ": du";
  EXPECT_TRUE(SameBytes(dh, with_guard32(dh_want))) << where << ": dh";
  // A first mismatch, to read when the bytes differ.
  for (size_t e = 0; e < nd; ++e) {
    if (std::memcmp(&y[e], &y_want[e], sizeof(float)) != 0) {
      ADD_FAILURE() << where << ": y[" << e << "] = " << y[e] << ", want "
                    << y_want[e];
      break;
    }
  }
  for (size_t e = 0; e < nd; ++e) {
    if (std::memcmp(&dh[e], &dh_want[e], sizeof(float)) != 0) {
      ADD_FAILURE() << where << ": dh[" << e << "] = " << dh[e] << ", want "
                    << dh_want[e];
      break;
    }
  }
}

TEST(FfnFusedEmulated, Width128GivesTheHostChainsBytes) {
  RunCase<128>(1, 64, 1);
  RunCase<128>(150, 192,
               2); // two tiles, the second partial; three hidden chunks
}

TEST(FfnFusedEmulated, Widths32And64GiveTheHostChainsBytes) {
  RunCase<32>(37, 64, 3);
  RunCase<64>(129, 128, 4);
}

TEST(FfnFusedEmulated, ForwardWithoutBiasOrResidualWritesTheProductAlone) {
  constexpr int kD = 32, kHidden = 64;
  const int64_t n = 20;
  std::mt19937_64 rng(5);
  const std::vector<uint16_t> x = RandomBf16(n * kD, 1.0f, rng),
                              w1 = RandomBf16(kD * kHidden, 0.2f, rng),
                              w2 = RandomBf16(kHidden * kD, 0.1f, rng),
                              b1 = RandomBf16(kHidden, 0.5f, rng);
  std::vector<uint16_t> u(n * kHidden), g(n * kHidden);
  std::vector<float> y(n * kD);
  Params p;
  p.n = n;
  p.hidden = kHidden;
  p.x = x.data();
  p.w1 = w1.data();
  p.w2 = w2.data();
  p.b1 = b1.data();
  p.u = u.data();
  p.g = g.data();
  p.out = y.data();
  RunGridOf<kD, true>(p);
  for (int64_t r = 0; r < n; ++r) {
    for (int j = 0; j < kD; ++j) {
      float s = 0.0f;
      for (int c = 0; c < kHidden; ++c)
        s += B(g[r * kHidden + c]) * B(w2[c * kD + j]);
      ASSERT_EQ(std::memcmp(&s, &y[r * kD + j], sizeof(float)), 0)
          << "row " << r << " column " << j;
    }
  }
}

} // namespace
} // namespace gemtb::gpu::train::ffn
