// ColumnSums (gpu/train/model_kernels.h) against the host's fp32 sums in the stated order: rows in
// order up to kColumnSumsBlockRows, beyond that a tree of blocks of kColumnSumsBlockRows rows each
// summed in order; the same bits, at and around the block size and over one, two and three levels,
// for fp32 rows and for bf16 rows (each value widened exactly). ToBf16 rounds as the host's
// round-to-nearest-even does, ties and overflow to infinity included; ToBf16WithColumnSums gives
// both in one pass, GeluBackwardWithColumnSums GELU's backward and its result's column sums, and
// ColumnSumsPair and ColumnSumsTriple two or three matrices' sums in shared launches.
// SequenceRowIndex gives the host loop's per-row indices, AssembleSequenceRows the rows they name
// (an event's three terms summed in the stated order); PackColumnsToBf16 and AddColumnBlocks
// move column blocks into and out of one side-by-side matrix. A chain of these kernels, each launched
// as a dependent of the one before, reads only what its predecessor finished writing.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gpu/train/layer_norm.h"
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
  // The last count's first level takes 16 bytes a thread a row where the columns allow (300 of them).
  for (const int64_t rows : {int64_t{1}, int64_t{1000}, kColumnSumsBlockRows, kColumnSumsBlockRows + 1, int64_t{5000},
                             kColumnSumsBlockRows * kColumnSumsBlockRows * 2 + 3, kColumnSumsBlockRows * 2048 + 5}) {
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

TEST(ModelKernelsTest, Bf16ColumnSumsAddTheWidenedValuesInTheStatedOrder) {
  if (!HaveSm90()) GTEST_SKIP() << "no sm_90 GPU";
  using Shape = std::pair<int64_t, int64_t>;  // rows, columns; the last, 16 bytes a thread a row
  for (const auto& [rows, cols] : {Shape{1, 130}, Shape{kColumnSumsBlockRows + 1, 130}, Shape{5000, 130},
                                   Shape{kColumnSumsBlockRows * 2048 + 5, 128}}) {
    const std::vector<uint16_t> bits = test::RandomBf16(static_cast<size_t>(rows * cols), 7 + rows, 0.0, 1.0);
    std::vector<float> x(bits.size()), out(static_cast<size_t>(cols), 0.5f);
    for (size_t e = 0; e < bits.size(); ++e) x[e] = numerics::Bf16BitsToFloat(bits[e]);
    DeviceArray<uint16_t> d_x(bits);
    DeviceArray<float> d_out(out);
    ASSERT_TRUE(ColumnSums(d_x.As<__nv_bfloat16>(), rows, cols, cols, d_out.ptr, true, nullptr).ok());
    EXPECT_EQ(d_out.Get(out.size()), HostColumnSums(x, rows, cols, out)) << rows << " x " << cols;
  }
}

// ToBf16WithColumnSums: ToBf16's bytes and ColumnSums' sums (accumulated and written) from one pass,
// with rows that fit one block, a block and one, three levels of the tree, and enough 64-row blocks for
// the first level to take 16 bytes a thread a row.
TEST(ModelKernelsTest, ToBf16WithColumnSumsIsToBf16AndColumnSumsInOnePass) {
  if (!HaveSm90()) GTEST_SKIP() << "no sm_90 GPU";
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const int64_t rows : {int64_t{1}, kColumnSumsBlockRows, kColumnSumsBlockRows + 1,
                             kColumnSumsBlockRows * kColumnSumsBlockRows * 2 + 3, kColumnSumsBlockRows * 2048 + 5}) {
    for (const int64_t cols : {int64_t{8}, int64_t{128}, int64_t{300}}) {
      for (const bool accumulate : {true, false}) {
        std::vector<float> x(static_cast<size_t>(rows * cols)), out(static_cast<size_t>(cols));
        for (float& v : x) v = normal(rng);
        for (float& v : out) v = normal(rng);
        DeviceArray<float> d_x(x), d_out(out);
        DeviceArray<uint16_t> d_y(std::vector<uint16_t>(x.size())), d_y_apart(std::vector<uint16_t>(x.size()));
        ASSERT_TRUE(ToBf16WithColumnSums(d_x.ptr, rows, cols, d_y.As<__nv_bfloat16>(), d_out.ptr, accumulate, nullptr)
                        .ok());
        ASSERT_TRUE(ToBf16(d_x.ptr, rows * cols, d_y_apart.As<__nv_bfloat16>(), nullptr).ok());
        std::vector<float> want = HostColumnSums(x, rows, cols, std::vector<float>(out.size(), 0.0f));
        // Written: the tree's sum; added: out + that sum, one rounding.
        if (accumulate)
          for (size_t c = 0; c < out.size(); ++c) want[c] = out[c] + want[c];
        const std::string where = std::to_string(rows) + " x " + std::to_string(cols) + (accumulate ? " added" : " written");
        EXPECT_EQ(d_out.Get(out.size()), want) << where;
        EXPECT_EQ(d_y.Get(x.size()), d_y_apart.Get(x.size())) << where;
      }
    }
  }
}

// Two (three) matrices' column sums in shared launches: each matrix's sums are a ColumnSums call's,
// bit for bit, written and added, over one, two and three levels of the tree.
TEST(ModelKernelsTest, ColumnSumsPairAndTripleAreColumnSumsEach) {
  if (!HaveSm90()) GTEST_SKIP() << "no sm_90 GPU";
  std::mt19937 rng(15);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const int64_t rows : {int64_t{0}, int64_t{1}, kColumnSumsBlockRows, kColumnSumsBlockRows + 1,
                             kColumnSumsBlockRows * kColumnSumsBlockRows * 2 + 3}) {
    for (const int64_t cols : {int64_t{8}, int64_t{128}, int64_t{300}}) {
      for (const bool accumulate : {true, false}) {
        const int64_t stride = rows * cols + 5;  // the second matrix a few floats past the first's end
        std::vector<float> x(static_cast<size_t>(stride + rows * cols)), out0(static_cast<size_t>(cols)), out1 = out0;
        for (float& v : x) v = normal(rng);
        for (float& v : out0) v = normal(rng);
        for (float& v : out1) v = normal(rng);
        x.resize(static_cast<size_t>(2 * stride + rows * cols));  // a third matrix, for ColumnSumsTriple
        std::vector<float> out2(out0.size());
        for (float& v : x) v = normal(rng);
        for (float& v : out2) v = normal(rng);
        DeviceArray<float> d_x(x), d_out0(out0), d_out1(out1), d_want0(out0), d_want1(out1), d_t0(out0), d_t1(out1),
            d_t2(out2), d_want2(out2);
        ASSERT_TRUE(ColumnSumsPair(d_x.ptr, rows, cols, stride, d_out0.ptr, d_out1.ptr, accumulate, nullptr).ok());
        ASSERT_TRUE(
            ColumnSumsTriple(d_x.ptr, rows, cols, stride, d_t0.ptr, d_t1.ptr, d_t2.ptr, accumulate, nullptr).ok());
        ASSERT_TRUE(ColumnSums(d_x.ptr, rows, cols, cols, d_want0.ptr, accumulate, nullptr).ok());
        ASSERT_TRUE(ColumnSums(d_x.ptr + stride, rows, cols, cols, d_want1.ptr, accumulate, nullptr).ok());
        ASSERT_TRUE(ColumnSums(d_x.ptr + 2 * stride, rows, cols, cols, d_want2.ptr, accumulate, nullptr).ok());
        const std::string where =
            std::to_string(rows) + " x " + std::to_string(cols) + (accumulate ? " added" : " written");
        EXPECT_EQ(d_out0.Get(out0.size()), d_want0.Get(out0.size())) << where << ": first";
        EXPECT_EQ(d_out1.Get(out1.size()), d_want1.Get(out1.size())) << where << ": second";
        EXPECT_EQ(d_t0.Get(out0.size()), d_want0.Get(out0.size())) << where << ": triple, first";
        EXPECT_EQ(d_t1.Get(out1.size()), d_want1.Get(out1.size())) << where << ": triple, second";
        EXPECT_EQ(d_t2.Get(out2.size()), d_want2.Get(out2.size())) << where << ": triple, third";
      }
    }
  }
}

// GELU's backward with its result's column sums in one pass: du is GeluBackward's and the sums are
// ColumnSums' over that du, bit for bit, written and added.
TEST(ModelKernelsTest, GeluBackwardWithColumnSumsIsGeluBackwardThenColumnSums) {
  if (!HaveSm90()) GTEST_SKIP() << "no sm_90 GPU";
  std::mt19937 rng(14);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (const int64_t rows : {int64_t{0}, int64_t{1}, kColumnSumsBlockRows, kColumnSumsBlockRows + 1,
                             kColumnSumsBlockRows * kColumnSumsBlockRows * 2 + 3}) {
    for (const int64_t cols : {int64_t{8}, int64_t{300}, int64_t{512}}) {
      for (const bool accumulate : {true, false}) {
        std::vector<uint16_t> u(static_cast<size_t>(rows * cols)), dg(u.size());
        for (uint16_t& v : u) v = numerics::FloatToBf16BitsRne(normal(rng));
        for (uint16_t& v : dg) v = numerics::FloatToBf16BitsRne(normal(rng));
        std::vector<float> out(static_cast<size_t>(cols));
        for (float& v : out) v = normal(rng);
        DeviceArray<uint16_t> d_u(u), d_dg(dg), d_du(std::vector<uint16_t>(u.size())),
            d_du_apart(std::vector<uint16_t>(u.size()));
        DeviceArray<float> d_out(out), d_out_apart(out);
        ASSERT_TRUE(GeluBackwardWithColumnSums(d_u.As<__nv_bfloat16>(), d_dg.As<__nv_bfloat16>(), rows, cols,
                                               d_du.As<__nv_bfloat16>(), d_out.ptr, accumulate, nullptr)
                        .ok());
        // GeluBackward refuses an empty count; with no rows, du is empty either way.
        if (rows > 0) {
          ASSERT_TRUE(GeluBackward<__nv_bfloat16>(d_u.As<__nv_bfloat16>(), d_dg.As<__nv_bfloat16>(), rows * cols,
                                                  d_du_apart.As<__nv_bfloat16>(), nullptr)
                          .ok());
        }
        ASSERT_TRUE(ColumnSums(d_du_apart.As<__nv_bfloat16>(), rows, cols, cols, d_out_apart.ptr, accumulate, nullptr)
                        .ok());
        const std::string where =
            std::to_string(rows) + " x " + std::to_string(cols) + (accumulate ? " added" : " written");
        EXPECT_EQ(d_du.Get(u.size()), d_du_apart.Get(u.size())) << where;
        EXPECT_EQ(d_out.Get(out.size()), d_out_apart.Get(out.size())) << where;
      }
    }
  }
}

TEST(ModelKernelsTest, ToBf16RoundsToNearestEven) {
  if (!HaveSm90()) GTEST_SKIP() << "no sm_90 GPU";
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 100.0f);
  std::vector<float> x(70001);
  for (float& v : x) v = normal(rng);
  x[0] = 1.00390625f;           // 1 + 2^-8: a tie, to even (1)
  x[1] = 1.01171875f;           // 1 + 3 * 2^-8: a tie, to even (1 + 2^-6)
  x[2] = 3.4e38f;               // rounds past the largest bf16: infinity
  x[3] = -0.0f;
  DeviceArray<float> d_x(x);
  // From offset 0 and 4 the kernel takes four values a thread (16-byte x, 8-byte y), from 1 and 2 one;
  // 70,001 values leave a tail of one past the last four.
  for (const size_t offset : {0, 1, 2, 4}) {
    DeviceArray<uint16_t> d_y(std::vector<uint16_t>(x.size(), 0x7FC1));
    ASSERT_TRUE(ToBf16(d_x.ptr + offset, static_cast<int64_t>(x.size() - offset), d_y.As<__nv_bfloat16>() + offset,
                       nullptr)
                    .ok());
    const std::vector<uint16_t> got = d_y.Get(x.size());
    int bad = 0;
    for (size_t e = 0; e < x.size(); ++e) {
      const uint16_t want = e < offset ? uint16_t{0x7FC1} : numerics::DoubleToBf16BitsRne(static_cast<double>(x[e]));
      if (got[e] != want && bad++ < 5) {
        ADD_FAILURE() << "offset " << offset << ": x[" << e << "] = " << x[e] << ": " << got[e] << ", want " << want;
      }
    }
    EXPECT_EQ(bad, 0) << "offset " << offset;
  }
  DeviceArray<uint16_t> d_y(std::vector<uint16_t>(x.size()));
  EXPECT_TRUE(ToBf16(d_x.ptr, 0, d_y.As<__nv_bfloat16>(), nullptr).ok());
  EXPECT_EQ(ToBf16(d_x.ptr, -1, d_y.As<__nv_bfloat16>(), nullptr).code(), absl::StatusCode::kInvalidArgument);
}

// PackColumnsToBf16 lays the blocks side by side, each value rounded as ToBf16 rounds it; AddColumnBlocks
// adds each block's columns of the side-by-side matrix to the block (three blocks of unequal widths,
// and one); bad blocks are refused by name.
TEST(ModelKernelsTest, ColumnBlocksPackAndAddSideBySide) {
  if (!HaveSm90()) GTEST_SKIP() << "no sm_90 GPU";
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (const std::vector<int64_t>& widths : {std::vector<int64_t>{128, 64, 200}, std::vector<int64_t>{33}}) {
    const int64_t rows = 129;
    int64_t total = 0;
    for (const int64_t w : widths) total += w;
    std::vector<std::vector<float>> blocks, adds;
    std::vector<std::unique_ptr<DeviceArray<float>>> d_blocks, d_adds;
    ColumnBlocks<const float*> in;
    ColumnBlocks<float*> out;
    in.count = out.count = static_cast<int>(widths.size());
    for (size_t i = 0; i < widths.size(); ++i) {
      blocks.emplace_back(static_cast<size_t>(rows * widths[i]));
      adds.emplace_back(static_cast<size_t>(rows * widths[i]));
      for (float& v : blocks.back()) v = normal(rng);
      for (float& v : adds.back()) v = normal(rng);
      d_blocks.push_back(std::make_unique<DeviceArray<float>>(blocks.back()));
      d_adds.push_back(std::make_unique<DeviceArray<float>>(adds.back()));
      in.at[i] = d_blocks.back()->ptr, out.at[i] = d_adds.back()->ptr;
      in.cols[i] = out.cols[i] = widths[i];
    }
    std::vector<float> packed(static_cast<size_t>(rows * total));
    for (float& v : packed) v = normal(rng);
    DeviceArray<float> d_packed(packed);
    DeviceArray<uint16_t> d_packed16(std::vector<uint16_t>(packed.size(), 0x7FC1));
    ASSERT_TRUE(PackColumnsToBf16(in, rows, d_packed16.As<__nv_bfloat16>(), nullptr).ok());
    ASSERT_TRUE(AddColumnBlocks(d_packed.ptr, rows, out, nullptr).ok());
    const std::vector<uint16_t> got16 = d_packed16.Get(packed.size());
    int64_t c0 = 0;
    for (size_t i = 0; i < widths.size(); ++i) {
      const std::vector<float> got = d_adds[i]->Get(adds[i].size());
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < widths[i]; ++c) {
          const size_t e = static_cast<size_t>(r * widths[i] + c), pe = static_cast<size_t>(r * total + c0 + c);
          ASSERT_EQ(got16[pe], numerics::DoubleToBf16BitsRne(static_cast<double>(blocks[i][e])))
              << "block " << i << " row " << r << " column " << c;
          ASSERT_EQ(got[e], adds[i][e] + packed[pe]) << "block " << i << " row " << r << " column " << c;
        }
      }
      c0 += widths[i];
    }
  }
  DeviceArray<float> d_one(std::vector<float>(8));
  ColumnBlocks<float*> bad;
  bad.count = 1, bad.at[0] = d_one.ptr, bad.cols[0] = 0;
  const absl::Status zero_cols = AddColumnBlocks(d_one.ptr, 1, bad, nullptr);
  EXPECT_EQ(zero_cols.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(zero_cols.message().find("cols[0]=0"), std::string::npos) << zero_cols;
  bad.count = 4;
  EXPECT_EQ(AddColumnBlocks(d_one.ptr, 1, bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

// SequenceRowIndex against the host's loop over samples, with empty samples and samples longer than
// a block's threads.
TEST(ModelKernelsTest, SequenceRowIndexGivesEachRowItsSampleAndEvent) {
  if (!HaveSm90()) GTEST_SKIP() << "no sm_90 GPU";
  const std::vector<int> lengths = {3, 0, 700, 1, 0, 0, 64};
  const int n_cls = 4;
  const int64_t B = static_cast<int64_t>(lengths.size());
  std::vector<int32_t> off(B + 1, 0), ev_off(B + 1, 0), cls, event, event_row;
  for (int64_t b = 0; b < B; ++b) {
    off[b + 1] = off[b] + n_cls + lengths[b];
    ev_off[b + 1] = ev_off[b] + lengths[b];
    for (int r = 0; r < n_cls; ++r) cls.push_back(static_cast<int32_t>(b * n_cls + r)), event.push_back(-1);
    for (int e = 0; e < lengths[b]; ++e) {
      cls.push_back(-1);
      event.push_back(ev_off[b] + e);
      event_row.push_back(off[b] + n_cls + e);
    }
  }
  DeviceArray<int32_t> d_off(off), d_ev_off(ev_off), d_cls(std::vector<int32_t>(cls.size(), 7)),
      d_event(std::vector<int32_t>(event.size(), 7)), d_event_row(std::vector<int32_t>(event_row.size(), 7));
  ASSERT_TRUE(SequenceRowIndex(d_off.ptr, d_ev_off.ptr, B, n_cls, d_cls.ptr, d_event.ptr, d_event_row.ptr, nullptr).ok());
  EXPECT_EQ(d_cls.Get(cls.size()), cls);
  EXPECT_EQ(d_event.Get(event.size()), event);
  EXPECT_EQ(d_event_row.Get(event_row.size()), event_row);
  EXPECT_EQ(SequenceRowIndex(d_off.ptr, d_ev_off.ptr, -1, n_cls, d_cls.ptr, d_event.ptr, d_event_row.ptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

// AssembleSequenceRows against the host: CLS rows copied from their source row, event rows (item +
// action) + dt in fp32 (or the item rows alone where action and dt are null), rows that are neither
// zeros; every value's bits, at a width of whole float4s (the vector path), at an odd width (the
// scalar path) and with a misaligned destination; bad arguments refused by name.
TEST(ModelKernelsTest, AssembleSequenceRowsPlacesClsRowsAndSummedEvents) {
  if (!HaveSm90()) GTEST_SKIP() << "no sm_90 GPU";
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const int64_t width : {int64_t{128}, int64_t{36}, int64_t{7}}) {
    for (const bool terms : {true, false}) {
      for (const int64_t shift : {int64_t{0}, int64_t{1}}) {
        const std::string what = "width " + std::to_string(width) + (terms ? " three terms" : " item only") +
                                  (shift ? " misaligned dst" : "");
        // Rows: CLS (index into 9 source rows), events (into 600), and a few rows that are neither.
        std::vector<int32_t> cls, event;
        for (int r = 0; r < 700; ++r) {
          const int kind = static_cast<int>(rng() % 10);
          cls.push_back(kind == 0 ? static_cast<int32_t>(rng() % 9) : -1);
          event.push_back(kind >= 2 ? static_cast<int32_t>(rng() % 600) : -1);
        }
        const int64_t rows = static_cast<int64_t>(cls.size());
        auto draw = [&](size_t n) {
          std::vector<float> v(n);
          for (float& x : v) x = normal(rng);
          return v;
        };
        const std::vector<float> src = draw(9 * width), item = draw(600 * width), action = draw(600 * width),
                                 dt = draw(600 * width);
        std::vector<float> want(static_cast<size_t>(rows * width));
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < width; ++c) {
            float y = 0.0f;
            if (cls[r] >= 0) {
              y = src[cls[r] * width + c];
            } else if (event[r] >= 0) {
              const int64_t e = event[r] * width + c;
              y = terms ? (item[e] + action[e]) + dt[e] : item[e];
            }
            want[r * width + c] = y;
          }
        }
        DeviceArray<float> d_src(src), d_item(item), d_action(action), d_dt(dt),
            d_out(std::vector<float>(static_cast<size_t>(rows * width + 1), -7.0f));
        DeviceArray<int32_t> d_cls(cls), d_event(event);
        const EventRows events = terms ? EventRows{d_item.ptr, d_action.ptr, d_dt.ptr} : EventRows{d_item.ptr};
        ASSERT_TRUE(AssembleSequenceRows(d_src.ptr, d_cls.ptr, events, d_event.ptr, rows, width, d_out.ptr + shift,
                                         nullptr)
                        .ok())
            << what;
        const std::vector<float> got = d_out.Get(static_cast<size_t>(rows * width + 1));
        int wrong = 0;
        for (size_t e = 0; e < want.size(); ++e) wrong += std::memcmp(&got[e + shift], &want[e], sizeof(float)) != 0;
        EXPECT_EQ(wrong, 0) << what;
        EXPECT_EQ(got[shift ? 0 : want.size()], -7.0f) << what << ": written outside the rows";
      }
    }
  }
  DeviceArray<float> one(std::vector<float>(4, 0.0f));
  DeviceArray<int32_t> index(std::vector<int32_t>(1, 0));
  const absl::Status rows = AssembleSequenceRows(one.ptr, index.ptr, EventRows{one.ptr}, index.ptr, -1, 4, one.ptr, nullptr);
  EXPECT_EQ(rows.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(rows.message().find("rows=-1"), std::string::npos) << rows.message();
  const absl::Status item =
      AssembleSequenceRows(one.ptr, index.ptr, EventRows{nullptr, one.ptr}, index.ptr, 1, 4, one.ptr, nullptr);
  EXPECT_EQ(item.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(item.message().find("events.item"), std::string::npos) << item.message();
}

// The kernels of gpu/train are launched as programmatic dependents (gpu/common/dependent_launch.cuh):
// each may be placed on the GPU while the kernel before it still runs, and must read that kernel's
// output only once it has finished. A chain of three on one stream, each reading what the one before
// wrote the moment it starts (AssembleSequenceRows summing 16 M values three times, ToBf16 of its
// result, ColumnSums of that), four
// rounds with no wait between them, against the host's values: a kernel that read its input before its
// predecessor finished would see the poisoned initial contents.
TEST(ModelKernelsTest, DependentLaunchesReadWhatTheKernelBeforeThemWrote) {
  if (!HaveSm90()) GTEST_SKIP() << "no sm_90 GPU";
  constexpr int64_t kCols = 128, kRows = int64_t{1} << 17, kCount = kRows * kCols;
  constexpr int kRounds = 4;
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> inputs(kRounds, std::vector<float>(static_cast<size_t>(kCount)));
  for (std::vector<float>& x : inputs)
    for (float& v : x) v = normal(rng);
  std::vector<std::unique_ptr<DeviceArray<float>>> d_x, d_y, d_out;
  std::vector<std::unique_ptr<DeviceArray<uint16_t>>> d_yb;
  for (int r = 0; r < kRounds; ++r) {
    d_x.push_back(std::make_unique<DeviceArray<float>>(inputs[r]));
    d_y.push_back(std::make_unique<DeviceArray<float>>(std::vector<float>(static_cast<size_t>(kCount), -7.0f)));
    d_yb.push_back(std::make_unique<DeviceArray<uint16_t>>(std::vector<uint16_t>(static_cast<size_t>(kCount), 0x7FC1)));
    d_out.push_back(std::make_unique<DeviceArray<float>>(std::vector<float>(kCols, -7.0f)));
  }
  std::vector<int32_t> event(static_cast<size_t>(kRows));
  for (int32_t r = 0; r < kRows; ++r) event[r] = r;
  DeviceArray<int32_t> d_cls(std::vector<int32_t>(static_cast<size_t>(kRows), -1)), d_event(event);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int r = 0; r < kRounds; ++r) {
    const float* x = d_x[r]->ptr;
    ASSERT_TRUE(
        AssembleSequenceRows(nullptr, d_cls.ptr, EventRows{x, x, x}, d_event.ptr, kRows, kCols, d_y[r]->ptr, nullptr)
            .ok());
    ASSERT_TRUE(ToBf16(d_y[r]->ptr, kCount, d_yb[r]->As<__nv_bfloat16>(), nullptr).ok());
    ASSERT_TRUE(ColumnSums(d_yb[r]->As<__nv_bfloat16>(), kRows, kCols, kCols, d_out[r]->ptr, false, nullptr).ok());
  }
  for (int r = 0; r < kRounds; ++r) {
    std::vector<float> rounded(static_cast<size_t>(kCount));
    std::vector<uint16_t> bits(static_cast<size_t>(kCount));
    for (size_t e = 0; e < rounded.size(); ++e) {
      const float x = inputs[r][e];
      bits[e] = numerics::DoubleToBf16BitsRne(static_cast<double>((x + x) + x));
      rounded[e] = numerics::Bf16BitsToFloat(bits[e]);
    }
    EXPECT_EQ(d_yb[r]->Get(bits.size()), bits) << "round " << r;
    EXPECT_EQ(d_out[r]->Get(kCols), HostColumnSums(rounded, kRows, kCols, std::vector<float>(kCols, 0.0f)))
        << "round " << r;
  }
}

}  // namespace
}  // namespace gemtb::gpu::train
