// ColumnSums (gpu/train/model_kernels.h) against the host's fp32 sums in the stated order: rows in
// order up to kColumnSumsBlockRows, beyond that blocks of kColumnSumsBlockRows rows each in order and
// the block sums in order; the same bits, at and around the block size.
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "gpu/train/model_kernels.h"
#include "gtest/gtest.h"
#include "tests/gpu/train_test_util.h"

namespace gemtb::gpu::train {
namespace {

using test::DeviceArray;
using test::HaveSm90;

std::vector<float> HostColumnSums(const std::vector<float>& x, int64_t rows, int64_t cols, const std::vector<float>& out) {
  std::vector<float> result(out);
  for (int64_t c = 0; c < cols; ++c) {
    float total = 0.0f;
    if (rows <= kColumnSumsBlockRows) {
      for (int64_t r = 0; r < rows; ++r) total += x[r * cols + c];
    } else {
      for (int64_t r0 = 0; r0 < rows; r0 += kColumnSumsBlockRows) {
        float block = 0.0f;
        for (int64_t r = r0; r < std::min(rows, r0 + kColumnSumsBlockRows); ++r) block += x[r * cols + c];
        total += block;
      }
    }
    result[c] += total;
  }
  return result;
}

TEST(ModelKernelsTest, ColumnSumsAddInTheStatedOrder) {
  if (!HaveSm90()) GTEST_SKIP() << "no sm_90 GPU";
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const int64_t rows : {int64_t{1}, int64_t{1000}, kColumnSumsBlockRows, kColumnSumsBlockRows + 1, int64_t{5000}}) {
    for (const int64_t cols : {int64_t{1}, int64_t{300}}) {
      std::vector<float> x(static_cast<size_t>(rows * cols)), out(static_cast<size_t>(cols));
      for (float& v : x) v = normal(rng);
      for (float& v : out) v = normal(rng);
      DeviceArray<float> d_x(x), d_out(out);
      ASSERT_TRUE(ColumnSums(d_x.ptr, rows, cols, cols, d_out.ptr, true, nullptr).ok());
      EXPECT_EQ(d_out.Get(out.size()), HostColumnSums(x, rows, cols, out)) << rows << " x " << cols;
    }
  }
}

}  // namespace
}  // namespace gemtb::gpu::train
