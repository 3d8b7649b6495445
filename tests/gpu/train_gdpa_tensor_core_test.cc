// The tensor-core attention (gpu/train/gdpa_tensor_core.h) against the fp32 kernels of
// gpu/train/gdpa.h on the same device inputs: the model's three uses scaled down (self-attention with
// window 64, block 64 or no mask, plus windows and a block that cut 16x16 regions (window 17: a strip's
// first kept key is the last of a 16-key chunk, the edge of the kernels' chunk skipping); cross-
// attention to 4 keys; PMA's 4 queries over jagged keys) at heads x dh = 2x16, 4x32, 2x64 on samples of
// 0, 1, 63, 64, 65, 90, 100, 200 rows (partial tiles of 1 .. 16, 17 .. 32 and 33 .. 48 rows: each warp
// layout), and the "small" config's shapes at 2052 rows; post_scale != 1.
//
// Split walks: where the own side (queries for o and dq, keys for dk and dv) fits one 64-row tile and
// the host bounds let a tile's walk over the other side pass 4 steps of 64 rows (256 rows), the kernels
// split the walk into 4-step pieces on separate CTAs and add the pieces' fp32 partials in a second
// kernel. The PMA and cross cases with 2052-row samples (max 2052: 33 steps, 9 splits; a 300-row sample
// uses 2 of them, 256 or fewer rows 1, 0 rows none but the zeros of the first) split; those with 200
// rows at most (4 steps: no split) and the self-attention ones (own side > 64 rows, or window 64: a
// 192-row walk at most) do not. Split cases also cover jagged own sides (0 .. 64 rows: every warp
// layout), and window 250 / block 1000 masks whose walks split (a window-250 tile of 64 queries keeps
// up to 314 keys: 5 steps, 2 of its 3 splits; block 1000: 16 steps, 4 of 9 splits).
//
// Bound per output tensor (o, dq, dk, dv) over the rows of the samples: relative L2 error
// ||x - ref|| / ||ref|| <= 1e-2 and every element within 5e-2 max|ref| + 1e-6. q, k, v, do and the
// score-side factors are rounded to bf16 (relative error 2^-9) and every sum is fp32: a CPU emulation of
// the kernels' tiling and rounding on these shapes gives relative L2 errors of 3e-3 (o, dv) to 7e-3 (dq,
// dk) and element errors up to 1.3e-2 max|ref|. A dropped tile or chunk, or a wrong mask, moves whole
// terms (order 1 of the terms) and fails them. Rows outside every sample keep their sentinel bytes, and the input rows
// there hold 1e30 (an overflow if any kernel used them). Two runs give the same bytes; bad shapes are
// refused with InvalidArgument. On bf16 tensors holding the inputs rounded, the kernels give the fp32
// tensors' results rounded, bit for bit (the same bf16 tiles are staged either way).
#include "gpu/train/gdpa_tensor_core.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gpu/train/gdpa.h"
#include "gpu/train/head_rms_norm.h"
#include "gpu/train/qk_norm_rope.h"
#include "gtest/gtest.h"
#include "tests/gpu/head_norm_backward_reference.h"
#include "tests/gpu/train_test_util.h"

namespace gemtb::gpu::train {
namespace {

using test::DeviceArray;
using test::HaveSm90;

constexpr int kLead = 3, kTrail = 5;        // rows before the first sample and after the last
constexpr uint32_t kSentinel = 0x7fc0dea1;  // a quiet NaN with a payload: what an untouched output row holds
constexpr float kOutsideInput = 1e30f;      // input rows outside every sample

struct Case {
  std::string name;
  int heads = 0, dh = 0, window = -1, block = 0;
  float post_scale = 1.0f;
  std::vector<int> lq, lk;  // per sample
};

struct Inputs {
  std::vector<int32_t> q_offsets, k_offsets;  // from kLead
  int32_t max_q = 0, max_k = 0;
  size_t q_rows = 0, k_rows = 0;  // including the rows outside every sample
  std::vector<float> q, k, v, d_o;
};

struct Outputs {
  std::vector<float> o, dq, dk, dv;
};

std::vector<int32_t> Offsets(const std::vector<int>& lengths, int32_t* max_len, size_t* rows) {
  std::vector<int32_t> offsets{kLead};
  *max_len = 0;
  for (int n : lengths) {
    offsets.push_back(offsets.back() + n);
    *max_len = std::max(*max_len, n);
  }
  *rows = static_cast<size_t>(offsets.back()) + kTrail;
  return offsets;
}

// Unit normal values in the samples' rows (as the QK-norm leaves q and k), kOutsideInput elsewhere.
std::vector<float> RandomRows(size_t rows, size_t width, const std::vector<int32_t>& offsets, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<float> x(rows * width, kOutsideInput);
  for (size_t e = offsets.front() * width; e < offsets.back() * width; ++e) x[e] = static_cast<float>(normal(rng));
  return x;
}

Inputs MakeInputs(const Case& c, uint64_t seed) {
  Inputs in;
  in.q_offsets = Offsets(c.lq, &in.max_q, &in.q_rows);
  in.k_offsets = Offsets(c.lk, &in.max_k, &in.k_rows);
  const size_t width = static_cast<size_t>(c.heads) * c.dh;
  in.q = RandomRows(in.q_rows, width, in.q_offsets, seed);
  in.k = RandomRows(in.k_rows, width, in.k_offsets, seed + 1);
  in.v = RandomRows(in.k_rows, width, in.k_offsets, seed + 2);
  in.d_o = RandomRows(in.q_rows, width, in.q_offsets, seed + 3);
  return in;
}

std::vector<float> Sentinels(size_t n) {
  float s = 0;
  std::memcpy(&s, &kSentinel, sizeof(s));
  return std::vector<float>(n, s);
}

// Forward and backward by the tensor-core kernels (tensor_core) or the fp32 ones, into outputs that
// start as sentinels.
Outputs RunAttention(const Case& c, const Inputs& in, bool tensor_core) {
  const size_t width = static_cast<size_t>(c.heads) * c.dh;
  const size_t nq = in.q_rows * width, nk = in.k_rows * width;
  DeviceArray<int32_t> q_offsets(in.q_offsets), k_offsets(in.k_offsets);
  DeviceArray<float> q(in.q), k(in.k), v(in.v), d_o(in.d_o);
  DeviceArray<float> o(Sentinels(nq)), dq(Sentinels(nq)), dk(Sentinels(nk)), dv(Sentinels(nk));
  GdpaBatch b;
  b.batch = static_cast<int64_t>(c.lq.size());
  b.heads = c.heads, b.dh = c.dh, b.window = c.window, b.block = c.block, b.post_scale = c.post_scale;
  b.q_offsets = q_offsets.ptr, b.k_offsets = k_offsets.ptr, b.max_q = in.max_q, b.max_k = in.max_k;
  if (tensor_core) {
    const absl::Status f = GdpaForwardTensorCore(b, q.ptr, k.ptr, v.ptr, o.ptr, nullptr);
    EXPECT_TRUE(f.ok()) << f;
    const absl::Status g = GdpaBackwardTensorCore(b, q.ptr, k.ptr, v.ptr, d_o.ptr, dq.ptr, dk.ptr, dv.ptr, nullptr);
    EXPECT_TRUE(g.ok()) << g;
  } else {
    const absl::Status f = GdpaForward(b, q.ptr, k.ptr, v.ptr, o.ptr, nullptr);
    EXPECT_TRUE(f.ok()) << f;
    const absl::Status g = GdpaBackward(b, q.ptr, k.ptr, v.ptr, d_o.ptr, dq.ptr, dk.ptr, dv.ptr, nullptr);
    EXPECT_TRUE(g.ok()) << g;
  }
  const cudaError_t e = cudaDeviceSynchronize();
  EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  return Outputs{o.Get(nq), dq.Get(nq), dk.Get(nk), dv.Get(nk)};
}

// Forward and backward by the tensor-core kernels on bf16 tensors holding the inputs rounded (RNE),
// into bf16 outputs that start as sentinels (their bits).
struct Bf16Outputs {
  std::vector<uint16_t> o, dq, dk, dv;
};

constexpr uint16_t kBf16Sentinel = 0x7fc1;

std::vector<uint16_t> RoundedBits(const std::vector<float>& x) {
  std::vector<uint16_t> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = numerics::FloatToBf16BitsRne(x[i]);
  return r;
}

// wide: v read from, and dv written into, rows three heads-widths wide, v's columns in the middle (the
// others 1e30, and dv's the sentinel); the returned dv is its columns, and *outside_dv counts the other
// columns' values that are no longer the sentinel.
// listed: the grids over tile lists that GdpaWriteTiles writes (checked against GdpaTilesOf's).
Bf16Outputs RunBf16Attention(const Case& c, const Inputs& in, bool wide = false, int* outside_dv = nullptr,
                             bool listed = false) {
  const size_t width = static_cast<size_t>(c.heads) * c.dh, ld = wide ? 3 * width : width, at = wide ? width : 0;
  const size_t nq = in.q_rows * width, nk = in.k_rows * width;
  DeviceArray<int32_t> q_offsets(in.q_offsets), k_offsets(in.k_offsets);
  const std::vector<uint16_t> v_bits = RoundedBits(in.v);
  std::vector<uint16_t> v_rows(in.k_rows * ld, numerics::FloatToBf16BitsRne(kOutsideInput));
  for (size_t r = 0; r < in.k_rows; ++r) {
    std::copy_n(v_bits.begin() + static_cast<std::ptrdiff_t>(r * width), width,
                v_rows.begin() + static_cast<std::ptrdiff_t>(r * ld + at));
  }
  DeviceArray<uint16_t> q(RoundedBits(in.q)), k(RoundedBits(in.k)), v(v_rows), d_o(RoundedBits(in.d_o));
  const std::vector<uint16_t> sq(nq, kBf16Sentinel), sk(nk, kBf16Sentinel);
  DeviceArray<uint16_t> o(sq), dq(sq), dk(sk), dv(std::vector<uint16_t>(in.k_rows * ld, kBf16Sentinel));
  GdpaBatch b;
  b.batch = static_cast<int64_t>(c.lq.size());
  b.heads = c.heads, b.dh = c.dh, b.window = c.window, b.block = c.block, b.post_scale = c.post_scale;
  b.q_offsets = q_offsets.ptr, b.k_offsets = k_offsets.ptr, b.max_q = in.max_q, b.max_k = in.max_k;
  b.v_ld = wide ? static_cast<int64_t>(ld) : 0;
  std::vector<std::unique_ptr<DeviceArray<int32_t>>> lists;
  if (listed) {
    for (const bool own_keys : {false, true}) {
      const std::vector<int32_t> want = GdpaTilesOf(in.q_offsets, in.k_offsets, own_keys);
      std::vector<int32_t> own = own_keys ? in.k_offsets : in.q_offsets;
      DeviceArray<int32_t> tile_offsets(GdpaTileOffsets(own));
      lists.push_back(std::make_unique<DeviceArray<int32_t>>(std::vector<int32_t>(want.size() + 1, -7)));
      const absl::Status w = GdpaWriteTiles(b.batch, q_offsets.ptr, k_offsets.ptr, tile_offsets.ptr,
                                            lists.back()->ptr, nullptr);
      EXPECT_TRUE(w.ok()) << w;
      std::vector<int32_t> got = lists.back()->Get(want.size());
      EXPECT_EQ(got, want) << c.name << (own_keys ? " key tiles" : " query tiles");
      GdpaTiles& tiles = own_keys ? b.k_tiles : b.q_tiles;
      tiles.entries = lists.back()->ptr;
      tiles.count = static_cast<int64_t>(want.size()) / kGdpaTileInts;
    }
  }
  __nv_bfloat16 *const v_at = v.bf16() + at, *const dv_at = dv.bf16() + at;
  const absl::Status f = GdpaForwardTensorCore(b, q.bf16(), k.bf16(), v_at, o.bf16(), nullptr);
  EXPECT_TRUE(f.ok()) << f;
  const absl::Status g =
      GdpaBackwardTensorCore(b, q.bf16(), k.bf16(), v_at, d_o.bf16(), dq.bf16(), dk.bf16(), dv_at, nullptr);
  EXPECT_TRUE(g.ok()) << g;
  const cudaError_t e = cudaDeviceSynchronize();
  EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  const std::vector<uint16_t> dv_rows = dv.Get(in.k_rows * ld);
  std::vector<uint16_t> dv_cols(nk);
  int outside = 0;
  for (size_t r = 0; r < in.k_rows; ++r) {
    for (size_t x = 0; x < ld; ++x) {
      if (x >= at && x < at + width) {
        dv_cols[r * width + x - at] = dv_rows[r * ld + x];
      } else {
        outside += dv_rows[r * ld + x] != kBf16Sentinel;
      }
    }
  }
  if (outside_dv != nullptr) *outside_dv = outside;
  return Bf16Outputs{o.Get(nq), dq.Get(nq), dk.Get(nk), dv_cols};
}

// got holds want rounded to bf16 in the samples' rows and the sentinel elsewhere; the first few
// misses are reported.
void ExpectRounded(const std::vector<uint16_t>& got, const std::vector<float>& want,
                   const std::vector<int32_t>& offsets, size_t width, const std::string& what) {
  const size_t first = offsets.front() * width, last = offsets.back() * width;
  int misses = 0;
  for (size_t e = 0; e < got.size(); ++e) {
    const uint16_t expect = e < first || e >= last ? kBf16Sentinel : numerics::FloatToBf16BitsRne(want[e]);
    if (got[e] != expect && ++misses <= 5) {
      ADD_FAILURE() << what << ": element " << e << " (row " << e / width << ") holds 0x" << std::hex << got[e]
                    << ", want 0x" << expect << std::dec;
    }
  }
  EXPECT_EQ(misses, 0) << what;
}

// The bound of the header comment on the samples' rows [offsets.front(), offsets.back()) of `width`
// values, and the sentinel on the others; prints the relative L2 error and the largest error over
// max|ref|.
void Compare(const std::vector<float>& got, const std::vector<float>& want, const std::vector<int32_t>& offsets,
             size_t width, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const size_t from = offsets.front() * width, to = offsets.back() * width;
  double max_ref = 0, err2 = 0, ref2 = 0, max_err = 0;
  for (size_t e = from; e < to; ++e) max_ref = std::max(max_ref, std::fabs(static_cast<double>(want[e])));
  const double bound = 5e-2 * max_ref + 1e-6;
  int bad = 0;
  for (size_t e = from; e < to; ++e) {
    const double d = std::fabs(static_cast<double>(got[e]) - want[e]);
    if (!(d <= bound) && bad++ < 5) {
      ADD_FAILURE() << what << "[row " << e / width << ", " << e % width << "]: " << got[e] << ", want " << want[e]
                    << " (bound " << bound << ")";
    }
    if (std::isfinite(d)) max_err = std::max(max_err, d);
    err2 += d * d;
    ref2 += static_cast<double>(want[e]) * want[e];
  }
  EXPECT_EQ(bad, 0) << what;
  const double rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : (err2 > 0 ? INFINITY : 0.0);
  EXPECT_LE(rel_l2, 1e-2) << what << ": relative L2 error";
  int touched = 0;
  for (size_t e = 0; e < got.size(); ++e) {
    if (e >= from && e < to) continue;
    uint32_t bits = 0;
    std::memcpy(&bits, &got[e], sizeof(bits));
    if (bits != kSentinel && touched++ < 5) {
      ADD_FAILURE() << what << "[row " << e / width << "] outside the samples written";
    }
  }
  EXPECT_EQ(touched, 0) << what;
  std::cout << what << ": relative L2 " << rel_l2 << ", max |x-ref|/max|ref| "
            << (max_ref > 0 ? max_err / max_ref : 0.0) << "\n";
}

bool SameBytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

Case Named(const std::string& name, int heads, int dh, float post_scale, std::vector<int> lq, std::vector<int> lk) {
  Case c;
  c.name = name + " heads=" + std::to_string(heads) + " dh=" + std::to_string(dh);
  c.heads = heads, c.dh = dh, c.post_scale = post_scale, c.lq = std::move(lq), c.lk = std::move(lk);
  return c;
}

std::vector<Case> Cases() {
  // Own tiles of every size class: 1 (65), 26 (90), 36 (100: the fourth strip empty), 8 (200), full.
  const std::vector<int> lengths{0, 1, 63, 64, 65, 90, 100, 200};
  std::vector<Case> cases;
  struct HeadShape {
    int heads, dh;
  };
  struct MaskShape {
    const char* name;
    int window, block;
  };
  for (const HeadShape hs : {HeadShape{2, 16}, HeadShape{4, 32}, HeadShape{2, 64}}) {
    for (const MaskShape m : {MaskShape{"window=64", 64, 0}, MaskShape{"block=64", 0, 64},
                              MaskShape{"unmasked", -1, 0}, MaskShape{"window=5", 5, 0},
                              MaskShape{"window=17", 17, 0}, MaskShape{"block=24", 0, 24}}) {
      Case c = Named(std::string("self ") + m.name, hs.heads, hs.dh, 1.0f / 16, lengths, lengths);
      c.window = m.window, c.block = m.block;
      cases.push_back(c);
    }
    // Cross-attention: jagged queries to 4 keys (one sample with queries and no keys: zeros).
    cases.push_back(Named("cross", hs.heads, hs.dh, 0.25f, lengths, {4, 4, 4, 4, 0, 4, 4, 4}));
    // PMA: 4 queries over jagged keys (one sample with keys and no queries: zero gradients).
    cases.push_back(Named("pma", hs.heads, hs.dh, 1.0f / 130, {4, 4, 4, 4, 4, 4, 0, 4}, lengths));
  }
  // Split walks (see the header comment): PMA's 4 queries over keys of 0 .. 2052 rows and cross-
  // attention's queries of those lengths to 4 keys, then jagged own sides of 0 .. 64 rows.
  const std::vector<int> split_lengths{0, 1, 63, 64, 65, 300, 2052, 257, 256};
  const std::vector<int> four(split_lengths.size(), 4);
  const std::vector<int> jagged_own{4, 1, 17, 0, 33, 64, 40, 4, 16};
  for (const HeadShape hs : {HeadShape{2, 16}, HeadShape{4, 32}, HeadShape{2, 64}}) {
    cases.push_back(Named("pma split", hs.heads, hs.dh, 1.0f / 130, four, split_lengths));
    cases.push_back(Named("cross split", hs.heads, hs.dh, 0.25f, split_lengths, four));
    cases.push_back(Named("pma split jagged", hs.heads, hs.dh, 1.0f / 130, jagged_own, split_lengths));
    cases.push_back(Named("cross split jagged", hs.heads, hs.dh, 0.25f, split_lengths, jagged_own));
  }
  // Masks whose walks split: queries (o, dq split) or keys (dk, dv split) of at most 64 rows.
  const std::vector<int> long_side{2052, 700, 300, 5, 260, 0}, short_side{64, 40, 4, 0, 17, 3};
  for (const MaskShape m : {MaskShape{"window=250", 250, 0}, MaskShape{"block=1000", 0, 1000}}) {
    Case few_queries = Named(std::string("split queries ") + m.name, 4, 32, 1.0f / 16, short_side, long_side);
    few_queries.window = m.window, few_queries.block = m.block;
    cases.push_back(few_queries);
    Case few_keys = Named(std::string("split keys ") + m.name, 2, 64, 1.0f / 16, long_side, short_side);
    few_keys.window = m.window, few_keys.block = m.block;
    cases.push_back(few_keys);
  }
  // The "small" config's shapes: heads 4, dh 32, samples up to 2052 rows.
  const std::vector<int> small{2052, 0, 700, 1, 130};
  Case self = Named("small self window=64", 4, 32, 1.0f / 16, small, small);
  self.window = 64;
  cases.push_back(self);
  cases.push_back(Named("small cross", 4, 32, 0.25f, small, {4, 4, 4, 4, 4}));
  cases.push_back(Named("small pma", 4, 32, 1.0f / 130, {4, 4, 4, 4, 4}, small));
  return cases;
}

// One test per case, named after it, so that a run (compute-sanitizer's racecheck, say) can take a
// subset with --gtest_filter.
class TrainGdpaTensorCoreCase : public ::testing::TestWithParam<size_t> {};

TEST_P(TrainGdpaTensorCoreCase, MatchesTheFp32KernelsAndRepeatsItsBytes) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const std::vector<Case> cases = Cases();
  const Case& c = cases[GetParam()];
  const Inputs in = MakeInputs(c, 510 + 10 * GetParam());
  const Outputs want = RunAttention(c, in, /*tensor_core=*/false);
  const Outputs got = RunAttention(c, in, /*tensor_core=*/true);
  const size_t width = static_cast<size_t>(c.heads) * c.dh;
  Compare(got.o, want.o, in.q_offsets, width, c.name + " o");
  Compare(got.dq, want.dq, in.q_offsets, width, c.name + " dq");
  Compare(got.dk, want.dk, in.k_offsets, width, c.name + " dk");
  Compare(got.dv, want.dv, in.k_offsets, width, c.name + " dv");
  const Outputs again = RunAttention(c, in, /*tensor_core=*/true);
  EXPECT_TRUE(SameBytes(again.o, got.o)) << c.name << " o";
  EXPECT_TRUE(SameBytes(again.dq, got.dq)) << c.name << " dq";
  EXPECT_TRUE(SameBytes(again.dk, got.dk)) << c.name << " dk";
  EXPECT_TRUE(SameBytes(again.dv, got.dv)) << c.name << " dv";
}

TEST_P(TrainGdpaTensorCoreCase, Bf16TensorsGiveTheFp32TensorsResultsRounded) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const std::vector<Case> cases = Cases();
  const Case& c = cases[GetParam()];
  const Inputs in = MakeInputs(c, 510 + 10 * GetParam());
  const Outputs fp32 = RunAttention(c, in, /*tensor_core=*/true);
  const Bf16Outputs got = RunBf16Attention(c, in);
  const size_t width = static_cast<size_t>(c.heads) * c.dh;
  ExpectRounded(got.o, fp32.o, in.q_offsets, width, c.name + " o");
  ExpectRounded(got.dq, fp32.dq, in.q_offsets, width, c.name + " dq");
  ExpectRounded(got.dk, fp32.dk, in.k_offsets, width, c.name + " dk");
  ExpectRounded(got.dv, fp32.dv, in.k_offsets, width, c.name + " dv");
}

// v and dv in rows three times as wide (GdpaBatch::v_ld): the dense run's bytes, and nothing written
// outside dv's columns.
TEST_P(TrainGdpaTensorCoreCase, WideValueRowsGiveTheDenseBytes) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const std::vector<Case> cases = Cases();
  const Case& c = cases[GetParam()];
  const Inputs in = MakeInputs(c, 510 + 10 * GetParam());
  const Bf16Outputs dense = RunBf16Attention(c, in);
  int outside = -1;
  const Bf16Outputs wide = RunBf16Attention(c, in, /*wide=*/true, &outside);
  EXPECT_EQ(wide.o, dense.o) << c.name;
  EXPECT_EQ(wide.dq, dense.dq) << c.name;
  EXPECT_EQ(wide.dk, dense.dk) << c.name;
  EXPECT_EQ(wide.dv, dense.dv) << c.name;
  EXPECT_EQ(outside, 0) << c.name << ": values written outside dv's columns";
}

// Grids over the tile lists (only tiles with rows) give the grids over every sample's tiles their bytes.
TEST_P(TrainGdpaTensorCoreCase, TileListsGiveEverySamplesTilesBytes) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const std::vector<Case> cases = Cases();
  const Case& c = cases[GetParam()];
  const Inputs in = MakeInputs(c, 510 + 10 * GetParam());
  const Bf16Outputs every = RunBf16Attention(c, in);
  const Bf16Outputs listed = RunBf16Attention(c, in, /*wide=*/false, nullptr, /*listed=*/true);
  EXPECT_EQ(listed.o, every.o) << c.name;
  EXPECT_EQ(listed.dq, every.dq) << c.name;
  EXPECT_EQ(listed.dk, every.dk) << c.name;
  EXPECT_EQ(listed.dv, every.dv) << c.name;
}

INSTANTIATE_TEST_SUITE_P(Cases, TrainGdpaTensorCoreCase, ::testing::Range<size_t>(0, Cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& param) {
                           std::string name = Cases()[param.param].name;
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

// GdpaHeadNorm: the keys (then the queries) given as a head RMS norm's output, bf16(x * inv) per row
// and head, x bf16 in rows twice as wide as the side's (the other columns 1e30); dk (dq) written as
// dL/dx into rows of that stride. Against the fp64 norm backward, inv (g - y mean(g y)) with
// y = x * inv in fp32, of the tensor-core kernels' own gradient rounded to bf16 (g: the fp32 overload
// on the same bf16 values, its sums rounded as the bf16 overload's output holds them): within one bf16
// rounding plus fp32's error on the row's terms. The other gradients are the plain run's bytes; nothing
// is written outside the gradient's columns and the samples' rows. Each side also with RoPE (a table
// of any values; the gradient through RoPE's transpose first). Cases with split walks are left out
// (a norm keeps its side's walks whole, so the fp32 run would add in another order). A bad stride is
// refused by name.
void RunHeadNormCase(const Case& c, bool own_keys, bool rope, uint64_t seed) {
  const std::string what = c.name + (own_keys ? " key norm" : " query norm") + (rope ? " with RoPE" : "");
  Inputs in = MakeInputs(c, seed);
  const size_t width = static_cast<size_t>(c.heads) * c.dh, ld = 2 * width;
  const size_t nq = in.q_rows * width, nk = in.k_rows * width;
  const size_t own_rows = own_keys ? in.k_rows : in.q_rows;
  const std::vector<int32_t>& own_offsets = own_keys ? in.k_offsets : in.q_offsets;
  // Every input as bf16 values; x = the side's values, inv = 1 / rms of x's row and head.
  auto to_bf16 = [](std::vector<float>& v) {
    for (float& e : v) e = numerics::Bf16BitsToFloat(numerics::FloatToBf16BitsRne(e));
  };
  to_bf16(in.q), to_bf16(in.k), to_bf16(in.v), to_bf16(in.d_o);
  std::vector<float>& side = own_keys ? in.k : in.q;
  const std::vector<float> x = side;
  std::vector<float> inv(own_rows * c.heads, 1.0f);
  const size_t first = own_offsets.front(), last = own_offsets.back();
  for (size_t r = first; r < last; ++r) {
    for (int h = 0; h < c.heads; ++h) {
      double sq = 0;
      for (int i = 0; i < c.dh; ++i) sq += double{x[r * width + h * c.dh + i]} * x[r * width + h * c.dh + i];
      inv[r * c.heads + h] = static_cast<float>(1.0 / std::sqrt(sq / c.dh + 1e-6));
      for (int i = 0; i < c.dh; ++i) {
        const size_t e = r * width + h * c.dh + i;
        side[e] = numerics::Bf16BitsToFloat(numerics::FloatToBf16BitsRne(x[e] * inv[r * c.heads + h]));
      }
    }
  }
  const Outputs ref = RunAttention(c, in, /*tensor_core=*/true);
  const Bf16Outputs plain = RunBf16Attention(c, in);
  // RoPE's table (with `rope`): sin in columns [0, dh / 2), cos in [dh / 2, dh), any values a position.
  const int32_t own_max = own_keys ? in.max_k : in.max_q;
  std::vector<float> table(static_cast<size_t>(std::max(own_max, 1)) * c.dh);
  std::mt19937_64 rng(seed * 7 + 1);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (float& e : table) e = unit(rng);
  DeviceArray<float> table_d(table);

  std::vector<uint16_t> x_rows(own_rows * ld, numerics::FloatToBf16BitsRne(kOutsideInput));
  for (size_t r = 0; r < own_rows; ++r) {
    for (size_t i = 0; i < width; ++i) x_rows[r * ld + i] = numerics::FloatToBf16BitsRne(x[r * width + i]);
  }
  DeviceArray<int32_t> q_offsets(in.q_offsets), k_offsets(in.k_offsets);
  DeviceArray<uint16_t> q(RoundedBits(in.q)), k(RoundedBits(in.k)), v(RoundedBits(in.v)), d_o(RoundedBits(in.d_o)),
      x_d(x_rows), dq(std::vector<uint16_t>(own_keys ? nq : in.q_rows * ld, kBf16Sentinel)),
      dv(std::vector<uint16_t>(nk, kBf16Sentinel)),
      dk(std::vector<uint16_t>(own_keys ? in.k_rows * ld : nk, kBf16Sentinel));
  DeviceArray<float> inv_d(inv);
  GdpaBatch b;
  b.batch = static_cast<int64_t>(c.lq.size());
  b.heads = c.heads, b.dh = c.dh, b.window = c.window, b.block = c.block, b.post_scale = c.post_scale;
  b.q_offsets = q_offsets.ptr, b.k_offsets = k_offsets.ptr, b.max_q = in.max_q, b.max_k = in.max_k;
  const GdpaHeadNorm norm{x_d.bf16(), inv_d.ptr, static_cast<int64_t>(ld), rope ? table_d.ptr : nullptr};
  const absl::Status g =
      GdpaBackwardTensorCore(b, q.bf16(), k.bf16(), v.bf16(), d_o.bf16(), dq.bf16(), dk.bf16(), dv.bf16(), nullptr,
                             own_keys ? &norm : nullptr, own_keys ? nullptr : &norm);
  ASSERT_TRUE(g.ok()) << what << ": " << g;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
  EXPECT_EQ(dv.Get(nk), plain.dv) << what << ": dv";
  if (own_keys) {
    EXPECT_EQ(dq.Get(nq), plain.dq) << what << ": dq";
  } else {
    EXPECT_EQ(dk.Get(nk), plain.dk) << what << ": dk";
  }
  const std::vector<uint16_t> got = (own_keys ? dk : dq).Get(own_rows * ld);
  const std::vector<float>& ref_grad = own_keys ? ref.dk : ref.dq;
  int misses = 0, outside = 0;
  double worst = 0;
  size_t sample = 0;
  for (size_t r = 0; r < own_rows; ++r) {
    for (size_t col = 0; col < ld; ++col) {
      if (r < first || r >= last || col >= width) outside += got[r * ld + col] != kBf16Sentinel;
    }
    if (r < first || r >= last) continue;
    while (static_cast<size_t>(own_offsets[sample + 1]) <= r) ++sample;
    const float* trow = rope ? table.data() + (r - own_offsets[sample]) * c.dh : nullptr;
    for (int h = 0; h < c.heads; ++h) {
      const size_t e0 = r * width + h * c.dh;
      const test::HeadNormBackward want_row =
          test::HeadNormBackwardOf(ref_grad.data() + e0, x.data() + e0, inv[r * c.heads + h], c.dh, trow);
      for (int i = 0; i < c.dh; ++i) {
        const double want = want_row.dx[i];
        const double have = numerics::Bf16BitsToFloat(got[r * ld + h * c.dh + i]);
        const double bound = std::ldexp(std::fabs(want), -8) + 1e-5 * want_row.scale;
        worst = std::max(worst, std::fabs(have - want) / bound);
        if (!(std::fabs(have - want) <= bound) && ++misses <= 5) {
          ADD_FAILURE() << what << ": row " << r << " head " << h << " column " << i << ": " << have << ", want "
                        << want << " (bound " << bound << ")";
        }
      }
    }
  }
  EXPECT_EQ(misses, 0) << what << ": worst error over its bound " << worst;
  EXPECT_EQ(outside, 0) << what << ": values written outside the gradient's columns or the samples' rows";
}

// One sample of 4 rows, 4 heads of dh 32, over zeroed bf16 rows 128 wide: the inputs of the checks
// that a norm's row stride narrower than its side's rows is refused by name.
struct NarrowStrideInputs {
  DeviceArray<int32_t> offsets{std::vector<int32_t>{0, 4}};
  DeviceArray<uint16_t> some{std::vector<uint16_t>(4 * 128, 0)};
  DeviceArray<float> inv{std::vector<float>(16, 1.0f)};
  GdpaBatch Batch() const {
    GdpaBatch b;
    b.batch = 1, b.heads = 4, b.dh = 32, b.q_offsets = offsets.ptr, b.k_offsets = offsets.ptr, b.max_q = 4, b.max_k = 4;
    return b;
  }
};

TEST(TrainGdpaTensorCore, NormedSidesGiveTheNormsBackwardOfTheirGradient) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  int checked = 0;
  for (const Case& c : Cases()) {
    if (c.name.find("split") != std::string::npos || c.name.find("small cross") != std::string::npos ||
        c.name.find("small pma") != std::string::npos) {
      continue;
    }
    ++checked;
    for (const bool rope : {false, true}) {
      RunHeadNormCase(c, /*own_keys=*/true, rope, 910 + checked);
      RunHeadNormCase(c, /*own_keys=*/false, rope, 1910 + checked);
    }
  }
  EXPECT_GT(checked, 10);
  // A stride narrower than the side's rows is refused by name.
  const NarrowStrideInputs n;
  const GdpaBatch b = n.Batch();
  const GdpaHeadNorm narrow{n.some.bf16(), n.inv.ptr, 126};
  for (const bool keys : {true, false}) {
    const absl::Status bad =
        GdpaBackwardTensorCore(b, n.some.bf16(), n.some.bf16(), n.some.bf16(), n.some.bf16(), n.some.bf16(),
                               n.some.bf16(), n.some.bf16(), nullptr, keys ? &narrow : nullptr, keys ? nullptr : &narrow);
    EXPECT_NE(bad.message().find(keys ? "key_norm.ld=126" : "query_norm.ld=126"), std::string::npos) << bad;
  }
}

// GdpaQueryNorm: the forward's queries given as x (bf16, rows twice as wide as the queries', the other
// columns 1e30): the normed queries and inverse RMS it writes are HeadRmsNormForward's bytes (with
// RoPE, a table of any values: QkNormRopeForward's), o is the plain forward's bytes on those queries,
// and nothing is written outside the samples' rows.
void RunQueryNormForwardCase(const Case& c, bool rope, uint64_t seed) {
  const std::string what = c.name + (rope ? " query norm and RoPE" : " query norm") + " forward";
  const Inputs in = MakeInputs(c, seed);
  const size_t width = static_cast<size_t>(c.heads) * c.dh, ld = 2 * width;
  const size_t first = in.q_offsets.front(), last = in.q_offsets.back(), rows = last - first;
  std::vector<uint16_t> x_rows(in.q_rows * ld, numerics::FloatToBf16BitsRne(kOutsideInput));
  for (size_t r = 0; r < in.q_rows; ++r) {
    for (size_t i = 0; i < width; ++i) x_rows[r * ld + i] = numerics::FloatToBf16BitsRne(in.q[r * width + i]);
  }
  std::vector<float> table(static_cast<size_t>(std::max(in.max_q, 1)) * c.dh);
  std::mt19937_64 rng(seed * 5 + 3);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (float& e : table) e = unit(rng);
  DeviceArray<float> table_d(table);
  DeviceArray<int32_t> q_offsets(in.q_offsets), k_offsets(in.k_offsets);
  DeviceArray<uint16_t> x(x_rows), k(RoundedBits(in.k)), v(RoundedBits(in.v)),
      y_ref(std::vector<uint16_t>(in.q_rows * width, kBf16Sentinel)),
      y(std::vector<uint16_t>(in.q_rows * width, kBf16Sentinel)),
      o_plain(std::vector<uint16_t>(in.q_rows * width, kBf16Sentinel)),
      o(std::vector<uint16_t>(in.q_rows * width, kBf16Sentinel));
  DeviceArray<float> inv_ref(std::vector<float>(in.q_rows * c.heads, -1.0f)),
      inv(std::vector<float>(in.q_rows * c.heads, -1.0f));
  GdpaBatch b;
  b.batch = static_cast<int64_t>(c.lq.size());
  b.heads = c.heads, b.dh = c.dh, b.window = c.window, b.block = c.block, b.post_scale = c.post_scale;
  b.q_offsets = q_offsets.ptr, b.k_offsets = k_offsets.ptr, b.max_q = in.max_q, b.max_k = in.max_k;
  // The norm kernels over the samples' rows, then the plain forward on their output.
  const absl::Status normed =
      rope ? QkNormRopeForward(RopeRows{b.batch, q_offsets.ptr, in.max_q, c.heads, c.dh, table_d.ptr,
                                        static_cast<int64_t>(ld)},
                               x.bf16(), y_ref.bf16(), inv_ref.ptr, nullptr)
           : HeadRmsNormForward<__nv_bfloat16>(
                 HeadRowsShape{static_cast<int64_t>(rows) * c.heads, c.dh, c.heads, static_cast<int64_t>(ld)},
                 x.bf16() + first * ld, y_ref.bf16() + first * width, inv_ref.ptr + first * c.heads, nullptr);
  ASSERT_TRUE(normed.ok()) << what << ": " << normed;
  ASSERT_TRUE(GdpaForwardTensorCore(b, y_ref.bf16(), k.bf16(), v.bf16(), o_plain.bf16(), nullptr).ok()) << what;
  const GdpaQueryNorm query_norm{static_cast<int64_t>(ld), rope ? table_d.ptr : nullptr, y.bf16(), inv.ptr};
  const absl::Status f = GdpaForwardTensorCore(b, x.bf16(), k.bf16(), v.bf16(), o.bf16(), nullptr, &query_norm);
  ASSERT_TRUE(f.ok()) << what << ": " << f;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
  EXPECT_EQ(y.Get(in.q_rows * width), y_ref.Get(in.q_rows * width)) << what << ": the normed queries";
  EXPECT_EQ(inv.Get(in.q_rows * c.heads), inv_ref.Get(in.q_rows * c.heads)) << what << ": inv";
  EXPECT_EQ(o.Get(in.q_rows * width), o_plain.Get(in.q_rows * width)) << what << ": o";
}

TEST(TrainGdpaTensorCore, ForwardNormsItsQueriesAsTheNormKernelsDo) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  int checked = 0;
  for (const Case& c : Cases()) {
    ++checked;
    for (const bool rope : {false, true}) RunQueryNormForwardCase(c, rope, 2910 + checked);
    if (HasFailure()) return;
  }
  EXPECT_GT(checked, 10);
  // A stride narrower than the queries' rows is refused by name.
  const NarrowStrideInputs n;
  const GdpaBatch b = n.Batch();
  const GdpaQueryNorm narrow{126, nullptr, n.some.bf16(), n.inv.ptr};
  const absl::Status bad =
      GdpaForwardTensorCore(b, n.some.bf16(), n.some.bf16(), n.some.bf16(), n.some.bf16(), nullptr, &narrow);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
  EXPECT_NE(bad.message().find("query_norm.ld=126"), std::string::npos) << bad;
}

TEST(TrainGdpaTensorCore, BadShapesAreRefusedAndAnEmptyBatchIsANoOp) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  // Pointers no kernel may read: a refused call must return before any launch.
  const auto* bogus_offsets = reinterpret_cast<const int32_t*>(uintptr_t{64});
  auto* bogus = reinterpret_cast<float*>(uintptr_t{128});
  GdpaBatch good;
  good.batch = 3, good.heads = 2, good.dh = 16, good.max_q = 4, good.max_k = 130;
  good.q_offsets = bogus_offsets, good.k_offsets = bogus_offsets;
  auto refused = [&](const GdpaBatch& b, const std::string& name) {
    const absl::Status f = GdpaForwardTensorCore(b, bogus, bogus, bogus, bogus, nullptr);
    EXPECT_EQ(f.code(), absl::StatusCode::kInvalidArgument) << name << ": " << f;
    EXPECT_NE(f.message().find(name), std::string::npos) << f;
    const absl::Status g = GdpaBackwardTensorCore(b, bogus, bogus, bogus, bogus, bogus, bogus, bogus, nullptr);
    EXPECT_EQ(g.code(), absl::StatusCode::kInvalidArgument) << name << ": " << g;
    EXPECT_NE(g.message().find(name), std::string::npos) << g;
  };
  GdpaBatch b = good;
  b.dh = 24;
  refused(b, "dh=24");
  b = good, b.q_offsets = nullptr;
  refused(b, "q_offsets=null");
  b = good, b.k_offsets = nullptr;
  refused(b, "k_offsets=null");
  b = good, b.heads = 65536;
  refused(b, "heads=65536");
  b = good, b.v_ld = 31;  // narrower than heads * dh = 32
  refused(b, "v_ld=31");
  EXPECT_EQ(GdpaForwardTensorCore(good, nullptr, bogus, bogus, bogus, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GdpaBackwardTensorCore(good, bogus, bogus, bogus, bogus, bogus, nullptr, bogus, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  // No samples: nothing is read or written.
  GdpaBatch empty;
  empty.heads = 4, empty.dh = 32;
  float* none = nullptr;
  __nv_bfloat16* none16 = nullptr;
  EXPECT_TRUE(GdpaForwardTensorCore(empty, none, none, none, none, nullptr).ok());
  EXPECT_TRUE(GdpaBackwardTensorCore(empty, none, none, none, none, none, none, none, nullptr).ok());
  EXPECT_TRUE(GdpaForwardTensorCore(empty, none16, none16, none16, none16, nullptr).ok());
  EXPECT_TRUE(GdpaBackwardTensorCore(empty, none16, none16, none16, none16, none16, none16, none16, nullptr).ok());
  // bf16 tensors are checked as the fp32 ones are.
  __nv_bfloat16* bogus16 = reinterpret_cast<__nv_bfloat16*>(bogus);
  EXPECT_EQ(GdpaForwardTensorCore(good, none16, bogus16, bogus16, bogus16, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace gemtb::gpu::train
