// The column-sum tree (gpu/train/column_sums_kernels.cuh) run on the CPU by the fiber emulation, its
// blocks in a shuffled order, against a host model of its fp32 adds in the same order: level 0's rows
// the in-order sums of 64-row blocks, each level above the in-order sums of 64-row groups of the one
// below, the last level (at most 64 rows) summed in order into the output (added to it with
// accumulate), bit for bit, over fp32 and bf16 rows (a row stride wider than the row too); with
// `rounded`, the rows rounded to bf16 (to nearest, ties to even) in the same pass; several matrices in
// one grid (z); one, two and three levels; and GELU's backward with the tree over its result. The
// counters are zero again after every launch. Row counts leave partial blocks and groups, column counts
// a partial thread block; what lies past the rows and columns stays as it was.
#include "tests/gpu/emulation/cuda_shim.h"
// The shim must come first.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
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

// The tree model_kernels.cu's FromFirstLevel builds for `count` matrices of [rows, cols], over host
// vectors, and what a launch left in them.
struct HostTree {
  Tree tree{};
  std::vector<float> partial;
  std::vector<unsigned> counters;
  std::vector<float> out[2];
  int64_t cols = 0;

  HostTree(int64_t rows, int64_t cols_in, int count, unsigned col_blocks, bool accumulate, float out_init)
      : cols(cols_in) {
    int64_t partial_rows = 0;
    for (int64_t n = Groups(rows);; n = Groups(n)) {
      tree.rows[tree.levels++] = n;
      partial_rows += n;
      if (n <= kBlockRows) break;
    }
    partial.assign(static_cast<size_t>(count * partial_rows * cols), std::nanf(""));
    counters.assign(static_cast<size_t>(count * col_blocks * TreeCounters(tree)), 0u);
    for (int l = 0, at = 0; l < tree.levels; at += static_cast<int>(tree.rows[l]), ++l)
      tree.partial[l] = partial.data() + int64_t{count} * at * cols;
    tree.counters = counters.data();
    for (int z = 0; z < count; ++z) {
      out[z].assign(static_cast<size_t>(cols), out_init);
      tree.out[z] = out[z].data();
    }
    tree.accumulate = accumulate;
  }

  // Level 0's rows of matrix z.
  std::vector<float> LevelZero(int z) const {
    const int64_t n = tree.rows[0];
    const float* at = tree.partial[0] + z * n * cols;
    return std::vector<float>(at, at + n * cols);
  }

  bool CountersZero() const {
    return std::all_of(counters.begin(), counters.end(), [](unsigned c) { return c == 0; });
  }
};

// Every block of a grid, in an order shuffled by `seed`.
void RunGrid(emu::Dim grid, int threads, uint64_t seed, const std::function<void()>& kernel) {
  std::vector<emu::Dim> blocks;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) blocks.push_back({x, y, z});
  std::mt19937_64 rng(seed);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  emu::SetGridDim(grid);
  for (const emu::Dim& b : blocks) emu::RunBlock(b, threads, kernel);
}

// The host model: level 0 the in-order sums of 64-row blocks of value(r, c), each level above those of
// 64-row groups, the last level's in-order sum into out (added to out_init with accumulate).
struct ModelSums {
  std::vector<float> level_zero, out;
};
ModelSums Model(int64_t rows, int64_t cols, const std::function<float(int64_t, int64_t)>& value, bool accumulate,
                float out_init) {
  const auto block_sums = [&](int64_t n, const std::function<float(int64_t, int64_t)>& at) {
    std::vector<float> sums(static_cast<size_t>(Groups(n) * cols));
    for (int64_t b = 0; b < Groups(n); ++b) {
      for (int64_t c = 0; c < cols; ++c) {
        float s = 0.0f;
        for (int64_t r = b * kBlockRows; r < std::min(n, (b + 1) * kBlockRows); ++r) s = s + at(r, c);
        sums[static_cast<size_t>(b * cols + c)] = s;
      }
    }
    return sums;
  };
  ModelSums m;
  m.level_zero = block_sums(rows, value);
  std::vector<float> level = m.level_zero;
  int64_t n = Groups(rows);
  while (n > kBlockRows) {
    level = block_sums(n, [&](int64_t r, int64_t c) { return level[static_cast<size_t>(r * cols + c)]; });
    n = Groups(n);
  }
  m.out.assign(static_cast<size_t>(cols), 0.0f);
  for (int64_t c = 0; c < cols; ++c) {
    float s = 0.0f;
    for (int64_t r = 0; r < n; ++r) s = s + level[static_cast<size_t>(r * cols + c)];
    m.out[static_cast<size_t>(c)] = accumulate ? out_init + s : s;
  }
  return m;
}

// ColumnBlockSumsKernel over model_kernels.cu's grid: `count` matrices, matrix z at x + z x_stride.
template <typename T>
HostTree RunTree(const T* x, int64_t rows, int64_t cols, int64_t ldx, uint16_t* rounded, uint64_t seed, int count = 1,
             int64_t x_stride = 0, bool accumulate = false, float out_init = 0.0f) {
  const int threads = static_cast<int>(std::min<int64_t>(kThreads, (cols + 31) / 32 * 32));
  const unsigned col_blocks = static_cast<unsigned>((cols + threads - 1) / threads);
  HostTree t(rows, cols, count, col_blocks, accumulate, out_init);
  RunGrid({col_blocks, static_cast<unsigned>(Groups(rows)), static_cast<unsigned>(count)}, threads, seed,
          [&] { ColumnBlockSumsKernel<T>(x, rows, cols, ldx, rounded, x_stride, t.tree); });
  return t;
}

void RunCase(int64_t rows, int64_t cols, uint64_t seed) {
  const std::string where = std::to_string(rows) + " x " + std::to_string(cols);
  const int64_t ldx = cols + 3;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * ldx));
  for (float& v : x) v = normal(rng);
  std::vector<uint16_t> x16(x.size());
  for (size_t e = 0; e < x.size(); ++e) x16[e] = numerics::FloatToBf16BitsRne(x[e]);
  const auto at32 = [&](int64_t r, int64_t c) { return x[static_cast<size_t>(r * ldx + c)]; };
  const auto at16 = [&](int64_t r, int64_t c) { return numerics::Bf16BitsToFloat(x16[static_cast<size_t>(r * ldx + c)]); };

  const ModelSums want32 = Model(rows, cols, at32, false, 0.0f);
  HostTree t = RunTree<float>(x.data(), rows, cols, ldx, nullptr, seed);
  EXPECT_TRUE(SameBytes(t.LevelZero(0), want32.level_zero)) << where << ": fp32 rows, level 0";
  EXPECT_TRUE(SameBytes(t.out[0], want32.out)) << where << ": fp32 rows, sums";
  EXPECT_TRUE(t.CountersZero()) << where;

  const ModelSums want16 = Model(rows, cols, at16, true, 0.75f);
  t = RunTree<uint16_t>(x16.data(), rows, cols, ldx, nullptr, seed + 1, 1, 0, /*accumulate=*/true, 0.75f);
  EXPECT_TRUE(SameBytes(t.LevelZero(0), want16.level_zero)) << where << ": bf16 rows, level 0";
  EXPECT_TRUE(SameBytes(t.out[0], want16.out)) << where << ": bf16 rows, sums added to 0.75";
  EXPECT_TRUE(t.CountersZero()) << where;

  // Two matrices in one grid (z): the fp32 rows, then the same rows again half a matrix further on.
  const int64_t half = rows / 2 * ldx;
  std::vector<float> x2(x);
  x2.insert(x2.end(), x.begin(), x.end());
  const int64_t stride = static_cast<int64_t>(x.size()) - half;
  t = RunTree<float>(x2.data(), rows, cols, ldx, nullptr, seed + 2, 2, stride);
  const ModelSums want_second =
      Model(rows, cols, [&](int64_t r, int64_t c) { return x2[static_cast<size_t>(stride + r * ldx + c)]; }, false, 0.0f);
  EXPECT_TRUE(SameBytes(t.out[0], want32.out)) << where << ": the first of two matrices";
  EXPECT_TRUE(SameBytes(t.out[1], want_second.out)) << where << ": the second of two matrices";
  EXPECT_TRUE(SameBytes(t.LevelZero(1), want_second.level_zero)) << where << ": the second's level 0";
  EXPECT_TRUE(t.CountersZero()) << where;

  // Rounding in the same pass: contiguous rows (ldx = cols), a spare row past the end untouched.
  std::vector<float> dense(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dense[static_cast<size_t>(r * cols + c)] = at32(r, c);
  constexpr uint16_t kUntouched = 0x7FC1;
  std::vector<uint16_t> rounded(dense.size() + static_cast<size_t>(cols), kUntouched);
  t = RunTree<float>(dense.data(), rows, cols, cols, rounded.data(), seed + 3);
  EXPECT_TRUE(SameBytes(t.out[0], want32.out)) << where << ": fp32 rows, rounded in the same pass";
  int bad = 0;
  for (size_t e = 0; e < rounded.size(); ++e) {
    const uint16_t want = e < dense.size() ? numerics::FloatToBf16BitsRne(dense[e]) : kUntouched;
    if (rounded[e] != want && bad++ < 5)
      ADD_FAILURE() << where << ": rounded[" << e << "] " << rounded[e] << ", want " << want;
  }
  EXPECT_EQ(bad, 0) << where;
}

TEST(ColumnSumsEmulated, TreeSumsInOrderAtEveryLevelAndRoundsInTheSamePass) {
  RunCase(1, 8, 1);      // one row
  RunCase(64, 128, 2);   // one full block
  RunCase(200, 130, 3);  // a partial block of 8 rows; a second thread block of 2 columns
  RunCase(129, 300, 4);  // a partial block of one row; columns past a thread block
  RunCase(4096, 40, 5);  // 64 blocks: the most one level takes
  RunCase(64 * 64 * 3 + 70, 33, 6);  // two levels: 193 blocks in groups of 64, 64, 64 and 1
}

TEST(ColumnSumsEmulated, ThreeLevels) {
  const int64_t rows = 64 * 64 * 64 + 64 * 64 + 1, cols = 3;  // 4,162 blocks, 66 groups, then 2 rows
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (float& v : x) v = uniform(rng);
  HostTree t = RunTree<float>(x.data(), rows, cols, cols, nullptr, 8);
  ASSERT_EQ(t.tree.levels, 3);
  const ModelSums want =
      Model(rows, cols, [&](int64_t r, int64_t c) { return x[static_cast<size_t>(r * cols + c)]; }, false, 0.0f);
  EXPECT_TRUE(SameBytes(t.out[0], want.out));
  EXPECT_TRUE(t.CountersZero());
}

// GELU's backward with the tree over its result: du is the elementwise kernel's expression rounded to
// bf16 at every element of the rows (nothing past them), and the sums are the tree's over the rounded
// du widened, as ColumnBlockSumsKernel forms them over du; a column a thread and, where the columns
// allow, eight a thread (model_kernels.cu's grid of cols / 8 lanes).
TEST(ColumnSumsEmulated, GeluBackwardBlockSumsAreGeluBackwardThenTheTree) {
  using Shape = std::pair<int64_t, int64_t>;  // rows, columns
  for (const Shape& shape :
       {Shape{1, 8}, Shape{64, 512}, Shape{200, 130}, Shape{129, 300}, Shape{130, 2056}, Shape{64 * 70 + 5, 16}}) {
    const int64_t rows = shape.first, cols = shape.second;
    const std::string where = std::to_string(rows) + " x " + std::to_string(cols);
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
    const ModelSums want = Model(
        rows, cols,
        [&](int64_t r, int64_t c) { return numerics::Bf16BitsToFloat(want_du[static_cast<size_t>(r * cols + c)]); },
        false, 0.0f);
    constexpr uint16_t kUntouched = 0x7FC1;
    for (const int vec : {1, 8}) {
      if (cols % vec != 0) continue;
      const std::string how = where + (vec == 8 ? ", eight columns a thread" : ", a column a thread");
      std::vector<uint16_t> du(u.size() + static_cast<size_t>(cols), kUntouched);
      const int64_t lanes = cols / vec;
      const int64_t threads_cols = std::min<int64_t>(kThreads, (cols + 31) / 32 * 32);
      const int threads =
          static_cast<int>(vec == 1 ? threads_cols : std::min<int64_t>(threads_cols, (lanes + 31) / 32 * 32));
      const unsigned col_blocks = static_cast<unsigned>((lanes + threads - 1) / threads);
      HostTree t(rows, cols, 1, col_blocks, false, 0.0f);
      RunGrid({col_blocks, static_cast<unsigned>(Groups(rows)), 1}, threads, static_cast<uint64_t>(vec), [&] {
        if (vec == 8) {
          GeluBackwardBlockSumsKernel<8>(u.data(), dg.data(), rows, cols, du.data(), t.tree);
        } else {
          GeluBackwardBlockSumsKernel<1>(u.data(), dg.data(), rows, cols, du.data(), t.tree);
        }
      });
      EXPECT_TRUE(SameBytes(t.LevelZero(0), want.level_zero)) << how << ": level 0";
      EXPECT_TRUE(SameBytes(t.out[0], want.out)) << how << ": sums";
      EXPECT_TRUE(t.CountersZero()) << how;
      int bad = 0;
      for (size_t e = 0; e < du.size(); ++e) {
        const uint16_t want_e = e < want_du.size() ? want_du[e] : kUntouched;
        if (du[e] != want_e && bad++ < 5)
          ADD_FAILURE() << how << ": du[" << e << "] " << du[e] << ", want " << want_e;
      }
      EXPECT_EQ(bad, 0) << how;
    }
  }
}

}  // namespace
}  // namespace gemtb::gpu::train::colsum
