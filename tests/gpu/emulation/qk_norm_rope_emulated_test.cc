// The fused QK-norm and RoPE kernel (gpu/train/qk_norm_rope_kernels.cuh) run on the CPU by the fiber
// emulation: its bytes equal the host model of the two passes it replaces
// (tests/gpu/qk_norm_rope_host_model.h), forward (y and the inverse RMS) and backward in place over
// dy, at head dims 16, 32 and 64 with 2 and 6 heads, on jagged samples (empty ones, one longer than a
// block's 32 rows), and at head dim 6 with 3 heads; rows outside the samples keep their bytes. The shim's explicitly rounded
// operations are the host's IEEE ones, so equality here is the device's arithmetic, lane order and
// shuffles. On bf16 rows holding x and dy rounded, the kernel gives the host model's y and dx of
// those values rounded; the device test (tests/gpu/train_qk_norm_rope_test.cc) checks the same on the GPU.
#include "tests/gpu/emulation/cuda_shim.h"
// The shim must come first.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gpu/train/qk_norm_rope_kernels.cuh"
#include "gtest/gtest.h"
#include "model/attention/rope_table.h"
#include "model/numerics/float_formats.h"
#include "tests/gpu/qk_norm_rope_host_model.h"

namespace gemtb::gpu::train::qkr {
namespace {

struct Shape {
  int heads, dh;
  std::vector<int32_t> lengths;
};

// The shape's samples' row offsets and its longest sample.
std::pair<std::vector<int32_t>, int32_t> Samples(const Shape& s) {
  std::vector<int32_t> off = {0};
  int32_t max_rows = 0;
  for (int32_t n : s.lengths) off.push_back(off.back() + n), max_rows = std::max(max_rows, n);
  return {off, max_rows};
}

template <typename Body>
void RunGrid(unsigned x, unsigned y, const Body& body) {
  emu::SetGridDim({x, y, 1});
  for (unsigned by = 0; by < y; ++by) {
    for (unsigned bx = 0; bx < x; ++bx) emu::RunBlock({bx, by, 0}, kThreads, body);
  }
}

bool SameBytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(QkNormRopeEmulated, KernelGivesTheHostModelsBytes) {
  const std::vector<Shape> shapes = {{2, 16, {5, 0, 33, 1, 70}}, {6, 32, {40, 0, 0, 12}}, {2, 64, {1, 65, 31, 32}},
                                     {6, 64, {33}}, {3, 6, {7, 33}},
                                     {6, 16, {100}}};
  uint64_t seed = 5;
  for (const Shape& s : shapes) {
    const std::string where = "heads " + std::to_string(s.heads) + " dh " + std::to_string(s.dh);
    const auto [off, max_rows] = Samples(s);
    const int64_t rows = off.back(), width = int64_t{s.heads} * s.dh, head_rows = rows * s.heads;
    const size_t n = static_cast<size_t>((rows + 2) * width);  // two spare rows past the samples
    std::mt19937_64 rng(seed++);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> x(n), dy(n);
    for (float& v : x) v = normal(rng);
    for (float& v : dy) v = normal(rng);
    const std::vector<float> table = gemtb::model::RopeTable<float>(std::max(1, max_rows), s.dh);

    std::vector<float> want_y(n, 7.0f), want_inv(static_cast<size_t>(head_rows + 2 * s.heads), 7.0f), want_dx = dy;
    test::HostRows(off, s.heads, s.dh, table, x, dy, want_y, want_inv, want_dx);
    std::vector<float> y(n, 7.0f), inv(want_inv.size(), 7.0f), dx = dy;
    const unsigned gx = static_cast<unsigned>(s.lengths.size());
    const unsigned gy = static_cast<unsigned>((max_rows + kRowsPerBlock - 1) / kRowsPerBlock);
    RunGrid(gx, gy, [&] {
      QkNormRopeKernelFor<false, float>(s.dh)(off.data(), s.heads, s.dh, width, table.data(), x.data(), nullptr, nullptr, y.data(),
                              inv.data());
    });
    RunGrid(gx, gy, [&] {
      QkNormRopeKernelFor<true, float>(s.dh)(off.data(), s.heads, s.dh, width, table.data(), x.data(), dx.data(), inv.data(), dx.data(),
                             nullptr);
    });
    EXPECT_TRUE(SameBytes(y, want_y)) << where << ": y";
    EXPECT_TRUE(SameBytes(inv, want_inv)) << where << ": inv";
    EXPECT_TRUE(SameBytes(dx, want_dx)) << where << ": dx";

    // bf16 rows holding x and dy rounded: the host model on their values, its y and dx rounded.
    auto rounded = [](const std::vector<float>& v) {
      std::vector<uint16_t> r(v.size());
      for (size_t i = 0; i < v.size(); ++i) r[i] = numerics::FloatToBf16BitsRne(v[i]);
      return r;
    };
    auto widened = [](const std::vector<uint16_t>& v) {
      std::vector<float> r(v.size());
      for (size_t i = 0; i < v.size(); ++i) r[i] = numerics::Bf16BitsToFloat(v[i]);
      return r;
    };
    const std::vector<uint16_t> x16 = rounded(x), dy16 = rounded(dy);
    const std::vector<float> xw = widened(x16), dyw = widened(dy16);
    std::vector<float> want_y16(n, 7.0f), want_inv16(want_inv.size(), 7.0f), want_dx16 = dyw;
    test::HostRows(off, s.heads, s.dh, table, xw, dyw, want_y16, want_inv16, want_dx16);
    std::vector<uint16_t> y16(n, numerics::FloatToBf16BitsRne(7.0f)), dx16 = dy16;
    std::vector<float> inv16(want_inv.size(), 7.0f);
    RunGrid(gx, gy, [&] {
      QkNormRopeKernelFor<false, uint16_t>(s.dh)(off.data(), s.heads, s.dh, width, table.data(), x16.data(), nullptr, nullptr,
                                        y16.data(), inv16.data());
    });
    RunGrid(gx, gy, [&] {
      QkNormRopeKernelFor<true, uint16_t>(s.dh)(off.data(), s.heads, s.dh, width, table.data(), x16.data(), dx16.data(),
                                       inv16.data(), dx16.data(), nullptr);
    });
    EXPECT_EQ(y16, rounded(want_y16)) << where << ": bf16 y";
    EXPECT_TRUE(SameBytes(inv16, want_inv16)) << where << ": bf16 inv";
    EXPECT_EQ(dx16, rounded(want_dx16)) << where << ": bf16 dx";
  }
}

// x read from, and dx written into, rows wider than a head's columns (x's at an offset of the row, the
// other columns holding NaN): the dense run's y, inv and dx, and no byte of dx's row outside its
// columns written.
TEST(QkNormRopeEmulated, WideRowsGiveTheDenseBytes) {
  const std::vector<Shape> shapes = {{4, 32, {5, 0, 33, 70}}, {2, 16, {40, 1}}, {3, 6, {7, 33}}};
  uint64_t seed = 11;
  for (const Shape& s : shapes) {
    const std::string where = "heads " + std::to_string(s.heads) + " dh " + std::to_string(s.dh);
    const auto [off, max_rows] = Samples(s);
    const int64_t rows = off.back(), width = int64_t{s.heads} * s.dh, ld = 3 * width + 2, at = width + 1;
    const size_t n = static_cast<size_t>(rows * width), wide_n = static_cast<size_t>(rows * ld);
    std::mt19937_64 rng(seed++);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> x(n), dy(n), x_wide(wide_n, std::nanf(""));
    for (float& v : x) v = normal(rng);
    for (float& v : dy) v = normal(rng);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < width; ++c) x_wide[r * ld + at + c] = x[r * width + c];
    }
    const std::vector<float> table = gemtb::model::RopeTable<float>(std::max(1, max_rows), s.dh);
    const unsigned gx = static_cast<unsigned>(s.lengths.size());
    const unsigned gy = static_cast<unsigned>((max_rows + kRowsPerBlock - 1) / kRowsPerBlock);
    std::vector<float> y(n, 7.0f), inv(static_cast<size_t>(rows * s.heads), 7.0f), dx(n, 7.0f);
    std::vector<float> y_w = y, inv_w = inv, dx_w(wide_n, 7.0f);
    RunGrid(gx, gy, [&] {
      QkNormRopeKernelFor<false, float>(s.dh)(off.data(), s.heads, s.dh, width, table.data(), x.data(), nullptr,
                                              nullptr, y.data(), inv.data());
    });
    RunGrid(gx, gy, [&] {
      QkNormRopeKernelFor<true, float>(s.dh)(off.data(), s.heads, s.dh, width, table.data(), x.data(), dy.data(),
                                             inv.data(), dx.data(), nullptr);
    });
    RunGrid(gx, gy, [&] {
      QkNormRopeKernelFor<false, float>(s.dh)(off.data(), s.heads, s.dh, ld, table.data(), x_wide.data() + at,
                                              nullptr, nullptr, y_w.data(), inv_w.data());
    });
    RunGrid(gx, gy, [&] {
      QkNormRopeKernelFor<true, float>(s.dh)(off.data(), s.heads, s.dh, ld, table.data(), x_wide.data() + at,
                                             dy.data(), inv_w.data(), dx_w.data() + at, nullptr);
    });
    EXPECT_TRUE(SameBytes(y_w, y)) << where << ": y";
    EXPECT_TRUE(SameBytes(inv_w, inv)) << where << ": inv";
    std::vector<float> want_dx_w(wide_n, 7.0f);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < width; ++c) want_dx_w[r * ld + at + c] = dx[r * width + c];
    }
    EXPECT_TRUE(SameBytes(dx_w, want_dx_w)) << where << ": dx";
  }
}

}  // namespace
}  // namespace gemtb::gpu::train::qkr
