// The head RMS-norm kernels (gpu/train/head_rms_norm_kernels.cuh) run on the CPU by the fiber
// emulation: forward (y and the inverse RMS) and backward bytes equal a host model of their lanes'
// sums (lane g of a row's kLanes adds elements g, g + kLanes, ... in order, then the butterfly) on
// fp32 rows and on bf16 rows (the model on the widened values, its outputs rounded), for head dims
// 5 (spans that are not multiples of 16 bytes), 16, 32 and 64 (8 lanes a row) and 96 (a warp a
// row), over blocks of one and several passes and a last block part full. The device test
// (tests/gpu/train_head_rms_norm_test.cc) checks the kernels against the reference in fp64.
#include "tests/gpu/emulation/cuda_shim.h"
// The shim must come first.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu/train/head_rms_norm_kernels.cuh"
#include "gtest/gtest.h"
#include "model/numerics/float_formats.h"

namespace gemtb::gpu::train::hrn {

// The kernels' `extern __shared__` array, filled with 0xFF before each block.
alignas(16) unsigned char staged[2 * kStageElems * sizeof(float) + 2 * kRowsPerPass<kWarp> * 96 * sizeof(float)];

namespace {

// The lanes' butterfly: offsets lanes / 2, ..., 1.
float Butterfly(std::vector<float> p) {
  const int lanes = static_cast<int>(p.size());
  for (int offset = lanes / 2; offset > 0; offset /= 2) {
    std::vector<float> next(p.size());
    for (int g = 0; g < lanes; ++g) next[g] = p[g] + p[g ^ offset];
    p = next;
  }
  return p[0];
}

// One row's forward and backward in host fp32, operation for operation.
void HostRow(const float* x, const float* dy, int dh, int lanes, float* y, float* inv, float* dx) {
  std::vector<float> part(static_cast<size_t>(lanes), 0.0f);
  for (int g = 0; g < lanes; ++g)
    for (int i = g; i < dh; i += lanes) part[g] = part[g] + x[i] * x[i];
  const float r = 1.0f / std::sqrt(Butterfly(part) / static_cast<float>(dh) + 1e-6f);
  *inv = r;
  for (int i = 0; i < dh; ++i) y[i] = x[i] * r;
  std::fill(part.begin(), part.end(), 0.0f);
  for (int g = 0; g < lanes; ++g)
    for (int i = g; i < dh; i += lanes) part[g] = part[g] + dy[i] * (x[i] * r);
  const float s = Butterfly(part) / static_cast<float>(dh);
  for (int i = 0; i < dh; ++i) dx[i] = r * (dy[i] - (x[i] * r) * s);
}

// `body` on blocks of `block_rows` rows each.
template <typename Body>
void RunRows(int64_t rows, int64_t block_rows, const Body& body) {
  const auto blocks = static_cast<unsigned>((rows + block_rows - 1) / block_rows);
  emu::SetGridDim({blocks, 1, 1});
  for (unsigned bx = 0; bx < blocks; ++bx) {
    std::memset(staged, 0xFF, sizeof(staged));
    emu::RunBlock({bx, 0, 0}, kThreads, [&] { body(static_cast<int>(block_rows)); });
  }
}

// The kernels on `rows` rows of T (float or bf16 bits) holding x and dy: x and dx in tokens of
// `heads` head rows `ld` apart (0: dense), from element `at` of their arrays.
template <typename T, int kLanes>
void Run(const std::vector<T>& x, const std::vector<T>& dy, int64_t rows, int dh, std::vector<T>& y,
         std::vector<float>& inv, std::vector<T>& dx, int heads = 1, int64_t ld = 0, int64_t at = 0) {
  if (ld == 0) ld = int64_t{heads} * dh;
  RunRows(rows, RowsPerBlock<kLanes>(dh), [&](int block_rows) {
    HeadRmsNormForwardKernel<T, kLanes>(x.data() + at, rows, dh, heads, ld, y.data(), inv.data(), block_rows);
  });
  RunRows(rows, kRowsPerPass<kLanes>, [&](int) {
    HeadRmsNormBackwardKernel<T, kLanes>(x.data() + at, inv.data(), dy.data(), rows, dh, heads, ld, dx.data() + at);
  });
}

// x read from, and dx written into, token rows wider than their heads (x's columns at an offset, the
// others NaN): the dense run's y, inv and dx, and nothing of dx's rows outside its columns written.
// `at` 16-byte aligned or not: the staged forward's unit and value paths.
template <typename T, int kLanes>
void ExpectWideRows(int64_t tokens, int heads, int dh, int64_t ld, int64_t at, uint64_t seed) {
  const std::string where = "tokens " + std::to_string(tokens) + " heads " + std::to_string(heads) + " dh " +
                            std::to_string(dh) + " ld " + std::to_string(ld) + " at " + std::to_string(at);
  const int64_t width = int64_t{heads} * dh, rows = tokens * heads;
  const size_t n = static_cast<size_t>(rows * dh), wide_n = static_cast<size_t>(tokens * ld + at);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  auto value = [&] {
    const float v = normal(rng);
    if constexpr (sizeof(T) == 2) {
      return numerics::FloatToBf16BitsRne(v);
    } else {
      return v;
    }
  };
  const T nan = [] {
    if constexpr (sizeof(T) == 2) {
      return numerics::FloatToBf16BitsRne(std::nanf(""));
    } else {
      return std::nanf("");
    }
  }();
  std::vector<T> x(n), dy(n), x_wide(wide_n, nan);
  for (T& v : x) v = value();
  for (T& v : dy) v = value();
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t c = 0; c < width; ++c) x_wide[t * ld + at + c] = x[t * width + c];
  }
  std::vector<T> y(n, T{7}), dx(n, T{7}), y_w(n, T{7}), dx_w(wide_n, T{7});
  std::vector<float> inv(static_cast<size_t>(rows), 7.0f), inv_w = inv;
  Run<T, kLanes>(x, dy, rows, dh, y, inv, dx);
  Run<T, kLanes>(x_wide, dy, rows, dh, y_w, inv_w, dx_w, heads, ld, at);
  EXPECT_EQ(0, std::memcmp(y_w.data(), y.data(), n * sizeof(T))) << where << ": y";
  EXPECT_EQ(0, std::memcmp(inv_w.data(), inv.data(), inv.size() * sizeof(float))) << where << ": inv";
  std::vector<T> want_dx(wide_n, T{7});
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t c = 0; c < width; ++c) want_dx[t * ld + at + c] = dx[t * width + c];
  }
  EXPECT_EQ(0, std::memcmp(dx_w.data(), want_dx.data(), wide_n * sizeof(T))) << where << ": dx";
}

template <int kLanes>
void ExpectHostModel(int64_t rows, int dh, uint64_t seed) {
  const std::string where = "rows " + std::to_string(rows) + " dh " + std::to_string(dh);
  const size_t n = static_cast<size_t>(rows * dh);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<float> x(n), dy(n);
  for (float& v : x) v = normal(rng);
  for (float& v : dy) v = normal(rng);
  // bf16 rows hold x and dy rounded; the host model runs on those values in both cases.
  std::vector<uint16_t> x16(n), dy16(n);
  for (size_t i = 0; i < n; ++i) {
    x16[i] = numerics::FloatToBf16BitsRne(x[i]);
    dy16[i] = numerics::FloatToBf16BitsRne(dy[i]);
  }
  for (const bool bf16 : {false, true}) {
    std::vector<float> xv = x, dyv = dy;
    if (bf16) {
      for (size_t i = 0; i < n; ++i) {
        xv[i] = numerics::Bf16BitsToFloat(x16[i]);
        dyv[i] = numerics::Bf16BitsToFloat(dy16[i]);
      }
    }
    std::vector<float> want_y(n), want_inv(static_cast<size_t>(rows)), want_dx(n);
    for (int64_t r = 0; r < rows; ++r) {
      HostRow(xv.data() + r * dh, dyv.data() + r * dh, dh, kLanes, want_y.data() + r * dh, &want_inv[r],
              want_dx.data() + r * dh);
    }
    std::vector<float> inv(static_cast<size_t>(rows), 7.0f);
    if (!bf16) {
      std::vector<float> y(n, 7.0f), dx(n, 7.0f);
      Run<float, kLanes>(x, dy, rows, dh, y, inv, dx);
      EXPECT_EQ(0, std::memcmp(y.data(), want_y.data(), n * sizeof(float))) << where << ": fp32 y";
      EXPECT_EQ(0, std::memcmp(dx.data(), want_dx.data(), n * sizeof(float))) << where << ": fp32 dx";
    } else {
      std::vector<uint16_t> y(n, 0x7FFF), dx(n, 0x7FFF);
      Run<uint16_t, kLanes>(x16, dy16, rows, dh, y, inv, dx);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(y[i], numerics::FloatToBf16BitsRne(want_y[i])) << where << ": bf16 y at " << i;
        ASSERT_EQ(dx[i], numerics::FloatToBf16BitsRne(want_dx[i])) << where << ": bf16 dx at " << i;
      }
    }
    EXPECT_EQ(0, std::memcmp(inv.data(), want_inv.data(), inv.size() * sizeof(float))) << where << ": inv";
  }
}

TEST(HeadRmsNormEmulated, KernelsGiveTheHostModelsBytes) {
  // 8 lanes a row: blocks of 256 (dh 16), 128 (dh 32), 64 (dh 64) and 800 rows (dh 5), the last part full.
  ExpectHostModel<8>(300, 16, 1);
  ExpectHostModel<8>(133, 32, 2);
  ExpectHostModel<8>(70, 64, 3);
  ExpectHostModel<8>(900, 5, 4);
  // A warp a row: blocks of 40 rows (dh 96: five passes of 8).
  ExpectHostModel<kWarp>(45, 96, 5);
}

TEST(HeadRmsNormEmulated, WideRowsGiveTheDenseBytes) {
  // k's columns of a [tokens, 2 x 4 x 32] row (aligned, whole tokens a block: the staged forward moves
  // tokens' 16-byte units), 3 heads (blocks of 128 head rows split tokens: a head row's units), and
  // unaligned or odd strides (its value path), over blocks of one and several passes.
  ExpectWideRows<uint16_t, 8>(70, 4, 32, 256, 0, 1);
  ExpectWideRows<float, 8>(70, 4, 32, 256, 128, 2);
  ExpectWideRows<uint16_t, 8>(50, 3, 32, 128, 8, 6);
  ExpectWideRows<uint16_t, 8>(33, 2, 16, 50, 3, 3);
  ExpectWideRows<float, 8>(41, 3, 5, 17, 1, 4);
  ExpectWideRows<float, kWarp>(9, 2, 96, 200, 8, 5);
}

}  // namespace
}  // namespace gemtb::gpu::train::hrn
