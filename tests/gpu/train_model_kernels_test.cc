// ColumnSums (gpu/train/model_kernels.h) against the host's fp32 sums in the stated order: rows in
// order up to kColumnSumsBlockRows, beyond that a tree of blocks of kColumnSumsBlockRows rows each
// summed in order; the same bits, at and around the block size and over one, two and three levels.
#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "gpu/train/model_kernels.h"
#include "gtest/gtest.h"
#include "tests/gpu/train_test_util.h"

namespace gemtb::gpu::train {
namespace {

using test::DeviceArray;
using test::HaveSm90;

// The stated tree: one column's values summed in order if they fit a block, else each block's sum in
// order, and the same sum over those.
float HostTreeSum(std::vector<float> values) {
  while (static_cast<int64_t>(values.size()) > kColumnSumsBlockRows) {
    std::vector<float> sums;
    for (size_t r0 = 0; r0 < values.size(); r0 += kColumnSumsBlockRows) {
      float block = 0.0f;
      for (size_t r = r0; r < std::min(values.size(), r0 + kColumnSumsBlockRows); ++r) block += values[r];
      sums.push_back(block);
    }
    values = std::move(sums);
  }
  float total = 0.0f;
  for (const float v : values) total += v;
  return total;
}

std::vector<float> HostColumnSums(const std::vector<float>& x, int64_t rows, int64_t cols, const std::vector<float>& out) {
  std::vector<float> result(out);
  for (int64_t c = 0; c < cols; ++c) {
    std::vector<float> column(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) column[r] = x[r * cols + c];
    result[c] += HostTreeSum(std::move(column));
  }
  return result;
}

TEST(ModelKernelsTest, ColumnSumsAddInTheStatedOrder) {
  if (!HaveSm90()) GTEST_SKIP() << "no sm_90 GPU";
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const int64_t rows : {int64_t{1}, int64_t{1000}, kColumnSumsBlockRows, kColumnSumsBlockRows + 1, int64_t{5000},
                             kColumnSumsBlockRows * kColumnSumsBlockRows * 2 + 3}) {
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
