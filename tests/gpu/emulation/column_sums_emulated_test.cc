// The first level of the column-sum tree (gpu/train/column_sums_kernels.cuh) run on the CPU by the
// fiber emulation, against a host model of its fp32 adds in the same order: each block's partial row
// the in-order sum of its 64 rows, bit for bit, over fp32 and bf16 rows (a row stride wider than the
// row too); with `rounded`, the rows rounded to bf16 (to nearest, ties to even) next to the same
// partial rows; several matrices in one grid (z); and GELU's backward with the block sums of its result. Row counts leave a partial
// block and column counts a partial thread block; what lies past the rows and columns stays as it was.
#include "tests/gpu/emulation/cuda_shim.h"
// The shim must come first.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gpu/train/column_sums_kernels.cuh"
#include "gtest/gtest.h"
#include "model/numerics/float_formats.h"

namespace gemtb::gpu::train::colsum {
namespace {

constexpr int kThreads = 256;  // model_kernels.cu's block

bool SameBytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The kernel over every block of the grid model_kernels.cu launches: `count` matrices, matrix z at
// x + z x_stride and its partial rows at partial + z partial_stride.
template <typename T, int kVec = 1>
void Run(const T* x, int64_t rows, int64_t cols, int64_t ldx, float* partial, uint16_t* rounded, unsigned count = 1,
         int64_t x_stride = 0, int64_t partial_stride = 0) {
  const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
  // kVec = 1: kThreads a block; wider, model_kernels.cu's block of the columns' lanes in whole warps.
  const int64_t lanes = cols / kVec;
  const int threads = kVec == 1 ? kThreads
                                : static_cast<int>(std::min<int64_t>(std::min<int64_t>(kThreads, (cols + 31) / 32 * 32),
                                                                     (lanes + 31) / 32 * 32));
  const unsigned col_blocks = static_cast<unsigned>((lanes + threads - 1) / threads);
  emu::SetGridDim({col_blocks, static_cast<unsigned>(blocks), count});
  for (unsigned z = 0; z < count; ++z) {
    for (int64_t b = 0; b < blocks; ++b) {
      for (unsigned cb = 0; cb < col_blocks; ++cb) {
        emu::RunBlock({cb, static_cast<unsigned>(b), z}, threads, [&] {
          ColumnBlockSumsKernel<T, kVec>(x, rows, cols, ldx, partial, rounded, x_stride, partial_stride);
        });
      }
    }
  }
}

void RunCase(int64_t rows, int64_t cols, uint64_t seed) {
  const std::string where = std::to_string(rows) + " x " + std::to_string(cols);
  const int64_t ldx = cols + 3, blocks = (rows + kBlockRows - 1) / kBlockRows;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * ldx));
  for (float& v : x) v = normal(rng);
  std::vector<uint16_t> x16(x.size());
  for (size_t e = 0; e < x.size(); ++e) x16[e] = numerics::FloatToBf16BitsRne(x[e]);

  // Host model: each block's rows added in order from +0, value(r * ld + c) the row r's value in column c.
  const auto model = [&](auto value, int64_t ld) {
    std::vector<float> p(static_cast<size_t>(blocks * cols));
    for (int64_t b = 0; b < blocks; ++b) {
      for (int64_t c = 0; c < cols; ++c) {
        float s = 0.0f;
        for (int64_t r = b * kBlockRows; r < std::min(rows, (b + 1) * kBlockRows); ++r) s = s + value(r * ld + c);
        p[static_cast<size_t>(b * cols + c)] = s;
      }
    }
    return p;
  };
  const std::vector<float> want32 = model([&](int64_t e) { return x[e]; }, ldx);
  const std::vector<float> want16 = model([&](int64_t e) { return numerics::Bf16BitsToFloat(x16[e]); }, ldx);

  std::vector<float> part(want32.size(), std::nanf(""));
  Run<float>(x.data(), rows, cols, ldx, part.data(), nullptr);
  EXPECT_TRUE(SameBytes(part, want32)) << where << ": fp32 rows";
  std::fill(part.begin(), part.end(), std::nanf(""));
  Run<uint16_t>(x16.data(), rows, cols, ldx, part.data(), nullptr);
  EXPECT_TRUE(SameBytes(part, want16)) << where << ": bf16 rows";
  // Two matrices in one grid (z): the fp32 rows, then the same rows again half a matrix further on.
  const int64_t half = rows / 2 * ldx;
  std::vector<float> x2(x);
  x2.insert(x2.end(), x.begin(), x.end());
  std::vector<float> parts(2 * want32.size(), std::nanf(""));
  Run<float>(x2.data(), rows, cols, ldx, parts.data(), nullptr, 2, static_cast<int64_t>(x.size()) - half,
             static_cast<int64_t>(want32.size()));
  const std::vector<float> want_second = model([&](int64_t e) { return x2[static_cast<size_t>(e) + x.size() - half]; }, ldx);
  EXPECT_TRUE(SameBytes(std::vector<float>(parts.begin(), parts.begin() + want32.size()), want32))
      << where << ": the first of two matrices";
  EXPECT_TRUE(SameBytes(std::vector<float>(parts.begin() + want32.size(), parts.end()), want_second))
      << where << ": the second of two matrices";

  // Rounding in the same pass: contiguous rows (ldx = cols), a spare row past the end untouched.
  std::vector<float> dense(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dense[static_cast<size_t>(r * cols + c)] = x[static_cast<size_t>(r * ldx + c)];
  constexpr uint16_t kUntouched = 0x7FC1;
  std::vector<uint16_t> rounded(dense.size() + static_cast<size_t>(cols), kUntouched);
  std::fill(part.begin(), part.end(), std::nanf(""));
  Run<float>(dense.data(), rows, cols, cols, part.data(), rounded.data());
  EXPECT_TRUE(SameBytes(part, want32)) << where << ": fp32 rows, rounded in the same pass";
  int bad = 0;
  for (size_t e = 0; e < rounded.size(); ++e) {
    const uint16_t want = e < dense.size() ? numerics::FloatToBf16BitsRne(dense[e]) : kUntouched;
    if (rounded[e] != want && bad++ < 5)
      ADD_FAILURE() << where << ": rounded[" << e << "] " << rounded[e] << ", want " << want;
  }
  EXPECT_EQ(bad, 0) << where;

  // 16 bytes a thread a row (4 fp32 columns, 8 bf16 ones) on the contiguous rows: the same partial
  // rows and rounded rows, two matrices a row apart included.
  if (cols % 4 == 0) {
    std::vector<uint16_t> rounded4(rounded.size(), kUntouched);
    std::fill(part.begin(), part.end(), std::nanf(""));
    Run<float, 4>(dense.data(), rows, cols, cols, part.data(), rounded4.data());
    EXPECT_TRUE(SameBytes(part, want32)) << where << ": four fp32 columns a thread, rounded in the same pass";
    EXPECT_EQ(rounded4, rounded) << where << ": four fp32 columns a thread";
    std::vector<float> two(dense);
    two.insert(two.end(), dense.begin(), dense.end());
    std::vector<float> parts4(2 * want32.size(), std::nanf(""));
    const int64_t shift = cols;  // the second matrix one row on
    Run<float, 4>(two.data(), rows, cols, cols, parts4.data(), nullptr, 2, static_cast<int64_t>(dense.size()) - shift,
                  static_cast<int64_t>(want32.size()));
    const std::vector<float> want_shifted =
        model([&](int64_t e) { return two[static_cast<size_t>(e) + dense.size() - static_cast<size_t>(shift)]; }, cols);
    EXPECT_TRUE(SameBytes(std::vector<float>(parts4.begin(), parts4.begin() + want32.size()), want32))
        << where << ": four fp32 columns a thread, the first of two matrices";
    EXPECT_TRUE(SameBytes(std::vector<float>(parts4.begin() + want32.size(), parts4.end()), want_shifted))
        << where << ": four fp32 columns a thread, the second of two matrices";
  }
  if (cols % 8 == 0) {
    std::vector<uint16_t> dense16(dense.size());
    for (size_t e = 0; e < dense.size(); ++e) dense16[e] = numerics::FloatToBf16BitsRne(dense[e]);
    std::fill(part.begin(), part.end(), std::nanf(""));
    Run<uint16_t, 8>(dense16.data(), rows, cols, cols, part.data(), nullptr);
    EXPECT_TRUE(SameBytes(part, model([&](int64_t e) { return numerics::Bf16BitsToFloat(dense16[e]); }, cols)))
        << where << ": eight bf16 columns a thread";
  }
}

TEST(ColumnSumsEmulated, BlockSumsAddEachBlocksRowsInOrderAndRoundInTheSamePass) {
  RunCase(1, 8, 1);      // one row
  RunCase(64, 128, 2);   // one full block
  RunCase(200, 130, 3);  // a partial block of 8 rows; a second thread block of 2 columns
  RunCase(129, 300, 4);  // a partial block of one row; columns past a thread block
  RunCase(70, 8, 5);     // a warp's lanes, most idle, at 4 and 8 columns a thread
  RunCase(130, 2056, 6);  // wide rows: 514 lanes of 4 columns, 257 of 8
}

// GELU's backward with its block sums: du is the elementwise kernel's expression rounded to bf16 at
// every element of the rows (nothing past them), and the partial rows are the in-order sums of the
// rounded du widened, as ColumnBlockSumsKernel forms them over du.
TEST(ColumnSumsEmulated, GeluBackwardBlockSumsAreGeluBackwardThenBlockSums) {
  using Shape = std::pair<int64_t, int64_t>;  // rows, columns
  for (const Shape& shape : {Shape{1, 8}, Shape{64, 512}, Shape{200, 130}, Shape{129, 300}, Shape{130, 2056}}) {
    const int64_t rows = shape.first, cols = shape.second;
    const std::string where = std::to_string(rows) + " x " + std::to_string(cols);
    const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
    std::mt19937_64 rng(static_cast<uint64_t>(rows * 1000 + cols));
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<uint16_t> u(static_cast<size_t>(rows * cols)), dg(u.size());
    for (uint16_t& v : u) v = numerics::FloatToBf16BitsRne(normal(rng));
    for (uint16_t& v : dg) v = numerics::FloatToBf16BitsRne(normal(rng));
    std::vector<uint16_t> want_du(u.size());
    for (size_t e = 0; e < u.size(); ++e) {
      want_du[e] = numerics::FloatToBf16BitsRne(numerics::Bf16BitsToFloat(dg[e]) *
                                                GeluGradOfBf16(numerics::Bf16BitsToFloat(u[e])));
    }
    std::vector<float> want_part(static_cast<size_t>(blocks * cols));
    for (int64_t b = 0; b < blocks; ++b) {
      for (int64_t c = 0; c < cols; ++c) {
        float sum = 0.0f;
        for (int64_t r = b * kBlockRows; r < std::min(rows, (b + 1) * kBlockRows); ++r)
          sum = sum + numerics::Bf16BitsToFloat(want_du[static_cast<size_t>(r * cols + c)]);
        want_part[static_cast<size_t>(b * cols + c)] = sum;
      }
    }
    constexpr uint16_t kUntouched = 0x7FC1;
    // One column a thread in model_kernels.cu's grid, and where the columns allow, eight a thread in
    // its grid of cols / 8 lanes.
    for (const int vec : {1, 8}) {
      if (cols % vec != 0) continue;
      const std::string how = where + (vec == 8 ? ", eight columns a thread" : ", a column a thread");
      std::vector<uint16_t> du(u.size() + static_cast<size_t>(cols), kUntouched);
      std::vector<float> part(want_part.size(), std::nanf(""));
      const int64_t lanes = cols / vec;
      const int64_t threads_cols = std::min<int64_t>(kThreads, (cols + 31) / 32 * 32);
      const int threads = static_cast<int>(vec == 1 ? threads_cols : std::min<int64_t>(threads_cols, (lanes + 31) / 32 * 32));
      const unsigned col_blocks = static_cast<unsigned>((lanes + threads - 1) / threads);
      emu::SetGridDim({col_blocks, static_cast<unsigned>(blocks), 1});
      for (int64_t b = 0; b < blocks; ++b) {
        for (unsigned cb = 0; cb < col_blocks; ++cb) {
          emu::RunBlock({cb, static_cast<unsigned>(b), 0}, threads, [&] {
            if (vec == 8) {
              GeluBackwardBlockSumsKernel<8>(u.data(), dg.data(), rows, cols, du.data(), part.data());
            } else {
              GeluBackwardBlockSumsKernel<1>(u.data(), dg.data(), rows, cols, du.data(), part.data());
            }
          });
        }
      }
      EXPECT_TRUE(SameBytes(part, want_part)) << how << ": block sums";
      int bad = 0;
      for (size_t e = 0; e < du.size(); ++e) {
        const uint16_t want = e < want_du.size() ? want_du[e] : kUntouched;
        if (du[e] != want && bad++ < 5) ADD_FAILURE() << how << ": du[" << e << "] " << du[e] << ", want " << want;
      }
      EXPECT_EQ(bad, 0) << how;
    }
  }
}

}  // namespace
}  // namespace gemtb::gpu::train::colsum
