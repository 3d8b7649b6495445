// The self-attention's fused QK-norm and RoPE (gpu/train/qk_norm_rope.h):
// - bit for bit a host model in fp32 of the two passes it replaces (head_rms_norm_kernels.cuh's 8-lane row:
//   lane g sums elements g, g + 8, ... in order, then a butterfly over the lanes; then the
//   reference's RoPE), forward (y and the inverse RMS) and backward, every operation rounded once as
//   the host's IEEE fp32 operations round (the build contracts no FMA);
// - within 1e-5 of the reference model's own QK-norm and RoPE (reference/model/layers.h, gdpa.h) in
//   fp64, which shows the host model computes the model's function;
// - at head dims 16, 32 and 64 (the configs'), 2 and 6 heads, on jagged samples with empty ones and
//   one longer than a block's 32 rows, the same bytes on a second run, rows outside the samples
//   untouched, dx written in place over dy;
// - on bf16 rows holding x and dy rounded: the host model's y and dx of those values rounded, the
//   same inverse RMS;
// - shapes it cannot take refused by name.
#include "gpu/train/qk_norm_rope.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "reference/model/gdpa.h"
#include "reference/model/layers.h"
#include "tests/gpu/qk_norm_rope_host_model.h"
#include "tests/gpu/train_test_util.h"

namespace gemtb::gpu::train {
namespace {

using test::DeviceArray;
using test::HaveSm90;
using test::HostRows;

struct Shape {
  int heads, dh;
  std::vector<int32_t> lengths;
};

std::vector<int32_t> Offsets(const std::vector<int32_t>& lengths, int32_t* max_rows) {
  std::vector<int32_t> off = {0};
  *max_rows = 0;
  for (int32_t n : lengths) {
    off.push_back(off.back() + n);
    *max_rows = std::max(*max_rows, n);
  }
  return off;
}

bool SameBytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(QkNormRope, ShapesItCannotTakeAreRefusedByName) {
  const auto* bogus_offsets = reinterpret_cast<const int32_t*>(uintptr_t{64});
  const auto* bogus = reinterpret_cast<const float*>(uintptr_t{128});
  const RopeRows good{3, bogus_offsets, 10, 2, 16, bogus};
  EXPECT_TRUE(ValidateRopeRows(good).ok());
  auto refused = [](const RopeRows& r, const std::string& name) {
    const absl::Status s = ValidateRopeRows(r);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_NE(s.message().find(name), std::string::npos) << s;
  };
  RopeRows r = good;
  r.batch = -1;
  refused(r, "batch=-1");
  r = good, r.max_rows = -1;
  refused(r, "max_rows=-1");
  r = good, r.heads = 0;
  refused(r, "heads=0");
  r = good, r.dh = 15;
  refused(r, "dh=15");
  r = good, r.dh = 128;
  refused(r, "dh=128");
  r = good, r.offsets = nullptr;
  refused(r, "offsets=null");
  r = good, r.table = nullptr;
  refused(r, "table=null");
  r = good, r.ld = 31;  // narrower than heads * dh = 32
  refused(r, "ld=31");
  float* out = reinterpret_cast<float*>(uintptr_t{256});
  EXPECT_NE(QkNormRopeForward(good, nullptr, out, out, nullptr).message().find("x=null"), std::string::npos);
  EXPECT_NE(QkNormRopeBackward(good, bogus, bogus, nullptr, out, nullptr).message().find("dy=null"), std::string::npos);
}

TEST(QkNormRope, IsTheTwoPassesBitForBitAndTheModelsFunction) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const std::vector<Shape> shapes = {{2, 16, {5, 0, 33, 1, 70}}, {6, 32, {40, 0, 0, 12}}, {2, 64, {1, 65, 31, 32}},
                                     {6, 16, {100}}};
  uint64_t seed = 5;
  for (const Shape& s : shapes) {
    const std::string where = "heads " + std::to_string(s.heads) + " dh " + std::to_string(s.dh);
    int32_t max_rows = 0;
    const std::vector<int32_t> off = Offsets(s.lengths, &max_rows);
    const int64_t rows = off.back(), width = int64_t{s.heads} * s.dh, head_rows = rows * s.heads;
    // Two spare rows past the samples: they must stay as they were.
    const size_t n = static_cast<size_t>((rows + 2) * width);
    std::mt19937_64 rng(seed++);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> x(n), dy(n);
    for (float& v : x) v = normal(rng);
    for (float& v : dy) v = normal(rng);
    const std::vector<float> table = reference::model::RopeTable<float>(std::max(1, max_rows), s.dh);

    // The host model.
    std::vector<float> want_y(x.size(), 7.0f), want_inv(static_cast<size_t>(head_rows + 2 * s.heads), 7.0f);
    std::vector<float> want_dx = dy;
    HostRows(off, s.heads, s.dh, table, x, dy, want_y, want_inv, want_dx);
    // The reference model's functions in fp64, sample by sample.
    std::vector<double> ref_y(static_cast<size_t>(rows * width)), ref_inv(static_cast<size_t>(head_rows));
    const std::vector<double> table64(table.begin(), table.end());
    for (size_t b = 0; b + 1 < off.size(); ++b) {
      const int nb = off[b + 1] - off[b];
      const size_t at = static_cast<size_t>(off[b]) * width;
      std::vector<double> xb(x.begin() + at, x.begin() + at + nb * width);
      reference::model::HeadRmsNormForward(xb.data(), nb, s.heads, s.dh, ref_y.data() + at,
                                           ref_inv.data() + static_cast<size_t>(off[b]) * s.heads);
      reference::model::RopeForward(table64.data(), nb, s.heads, s.dh, ref_y.data() + at);
    }
    int far = 0;
    for (size_t e = 0; e < ref_y.size(); ++e) {
      if (!(std::fabs(want_y[e] - ref_y[e]) <= 1e-5 * (1 + std::fabs(ref_y[e]))) && far++ < 5) {
        ADD_FAILURE() << where << " host model y[" << e << "] " << want_y[e] << ", reference " << ref_y[e];
      }
    }

    // The device, twice.
    const std::vector<float> sevens_inv(want_inv.size(), 7.0f), sevens(x.size(), 7.0f);
    DeviceArray<int32_t> d_off(off);
    DeviceArray<float> d_table(table), d_x(x), d_y(sevens), d_inv(sevens_inv), d_dy(dy);
    const RopeRows rr{static_cast<int64_t>(s.lengths.size()), d_off.ptr, max_rows, s.heads, s.dh, d_table.ptr};
    for (int run = 0; run < 2; ++run) {
      d_dy.Put(dy);
      ASSERT_TRUE(QkNormRopeForward(rr, d_x.ptr, d_y.ptr, d_inv.ptr, nullptr).ok());
      ASSERT_TRUE(QkNormRopeBackward(rr, d_x.ptr, d_inv.ptr, d_dy.ptr, d_dy.ptr, nullptr).ok());  // in place
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_TRUE(SameBytes(d_y.Get(x.size()), want_y)) << where << " y, run " << run;
      EXPECT_TRUE(SameBytes(d_inv.Get(want_inv.size()), want_inv)) << where << " inv, run " << run;
      EXPECT_TRUE(SameBytes(d_dy.Get(dy.size()), want_dx)) << where << " dx, run " << run;
    }

    // bf16 rows holding x and dy rounded: the host model on their values, y and dx rounded once.
    auto rounded = [](const std::vector<float>& v) {
      std::vector<uint16_t> r(v.size());
      for (size_t i = 0; i < v.size(); ++i) r[i] = numerics::FloatToBf16BitsRne(v[i]);
      return r;
    };
    const std::vector<uint16_t> x16 = rounded(x), dy16 = rounded(dy);
    std::vector<float> xw(n), dyw(n);
    for (size_t i = 0; i < n; ++i) xw[i] = numerics::Bf16BitsToFloat(x16[i]), dyw[i] = numerics::Bf16BitsToFloat(dy16[i]);
    std::vector<float> want_y16(n, 7.0f), want_inv16(want_inv.size(), 7.0f), want_dx16 = dyw;
    HostRows(off, s.heads, s.dh, table, xw, dyw, want_y16, want_inv16, want_dx16);
    DeviceArray<uint16_t> d_x16(x16), d_y16(rounded(sevens)), d_dy16(dy16);
    DeviceArray<float> d_inv16(sevens_inv);
    ASSERT_TRUE(QkNormRopeForward(rr, d_x16.bf16(), d_y16.bf16(), d_inv16.ptr, nullptr).ok());
    ASSERT_TRUE(QkNormRopeBackward(rr, d_x16.bf16(), d_inv16.ptr, d_dy16.bf16(), d_dy16.bf16(), nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(d_y16.Get(n), rounded(want_y16)) << where << " bf16 y";
    EXPECT_TRUE(SameBytes(d_inv16.Get(want_inv.size()), want_inv16)) << where << " bf16 inv";
    EXPECT_EQ(d_dy16.Get(n), rounded(want_dx16)) << where << " bf16 dx";
  }
}

}  // namespace
}  // namespace gemtb::gpu::train
