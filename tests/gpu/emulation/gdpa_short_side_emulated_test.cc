// The short-side GDPA kernels (gpu/train/gdpa_short_side_kernels.cuh) run on the CPU by the fiber
// emulation, against a host model of their sums: a long row's output (a sum over the short rows) is
// gpu/train/gdpa.h's fp32 kernels' sum, its terms in increasing order, each product and sum rounded on
// its own, the terms from gdpa_exact.cuh's arithmetic; a short row's output (a sum over the long rows)
// sums each 64-row tile of the long side in that order and then 0 plus the tiles' sums in tile order.
// The kernels must give the model's bytes: cross-attention to up to 4 keys a sample and PMA's 4
// queries over jagged sides (0, 1, 17, 63, 64, 65 and 130 rows: tiles of 64 long rows, partial and
// whole), windows and blocks where both sides are short, head dims 16, 32 and 64, 16-byte units and
// element loads, v and dv rows wider than the heads, grids over a tile list and over every sample's
// tiles; fp32 tensors holding bf16 values, and bf16 tensors (whose results must be the fp32 ones
// rounded). Rows outside every sample keep their sentinel bytes.
#include "tests/gpu/emulation/cuda_shim.h"
// The shim must come first.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gpu/train/gdpa_short_side_kernels.cuh"
#include "gtest/gtest.h"
#include "model/numerics/float_formats.h"

namespace gemtb::gpu::train::ss {

alignas(128) float smem_f[Layout<64>::kBytes / sizeof(float)];  // the kernel's `extern __shared__` array

namespace {

constexpr int kLead = 3, kTrail = 5;        // rows before the first sample and after the last
constexpr uint32_t kSentinel = 0x7fc0dea1;  // a quiet NaN with a payload: an untouched output row

struct Case {
  std::string name;
  int heads = 2, window = -1, block = 0;
  float post_scale = 1.0f;
  std::vector<int> lq, lk;
  bool vec = true;
  int v_pad = 0;       // v's and dv's rows are heads * dh + v_pad elements apart
  bool listed = true;  // the grid over the long side's tile list, else over every sample's tiles
};

struct Side {
  std::vector<int32_t> offsets;
  int64_t rows = 0;
  int32_t max = 0;
};

Side Offsets(const std::vector<int>& lengths) {
  Side s;
  s.offsets.push_back(kLead);
  for (int l : lengths) {
    s.offsets.push_back(s.offsets.back() + l);
    s.max = std::max(s.max, l);
  }
  s.rows = s.offsets.back() + kTrail;
  return s;
}

bool Keep(const Case& c, int i, int j) {
  if (c.block > 0) return i / c.block == j / c.block;
  if (c.window >= 0) return std::abs(i - j) <= c.window;
  return true;
}

struct Tensors4 {
  std::vector<float> q, k, v, d_o;
};
struct Outputs {
  std::vector<float> o, dq, dk, dv;
};

std::vector<float> Sentinels(int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (float& f : x) std::memcpy(&f, &kSentinel, sizeof(f));
  return x;
}

// A sum of terms x(0) .. x(n - 1) (absent terms skipped by x returning false): in order from 0, or
// (tiled) each 64-row tile's in order from 0 and then 0 plus the tiles' sums in tile order.
template <typename Term>
float SumOf(int n, bool tiled, Term x) {
  float total = 0.0f;
  for (int t0 = 0; t0 < n; t0 += (tiled ? kTile : n)) {
    float part = 0.0f;
    for (int i = t0; i < std::min(n, tiled ? t0 + kTile : n); ++i) {
      float term;
      if (x(i, &term)) part = part + term;
    }
    total = tiled ? total + part : part;
  }
  return total;
}

// The kernels' sums on the same values, from the definition in their order (above).
template <int kDh>
Outputs Model(const Case& c, const Side& qs, const Side& ks, const Tensors4& in) {
  const int width = c.heads * kDh, ld_v = width + c.v_pad;
  const bool short_keys = ks.max <= kMaxShort;
  Outputs out;
  out.o = Sentinels(qs.rows * width), out.dq = out.o;
  out.dk = Sentinels(ks.rows * width), out.dv = Sentinels(ks.rows * ld_v);
  for (size_t b = 0; b + 1 < qs.offsets.size(); ++b) {
    const int lq = qs.offsets[b + 1] - qs.offsets[b], lk = ks.offsets[b + 1] - ks.offsets[b];
    for (int h = 0; h < c.heads; ++h) {
      auto q_at = [&](const std::vector<float>& x, int i) { return &x[(qs.offsets[b] + i) * width + h * kDh]; };
      auto k_at = [&](const std::vector<float>& x, int j) { return &x[(ks.offsets[b] + j) * width + h * kDh]; };
      auto v_at = [&](const std::vector<float>& x, int j) { return &x[(ks.offsets[b] + j) * ld_v + h * kDh]; };
      // Pair (i, j)'s w and dz, false where the mask drops it.
      auto terms = [&](int i, int j, float* w, float* dz) {
        if (!Keep(c, i, j)) return false;
        const float z = gdpa::Dot<kDh>(q_at(in.q, i), k_at(in.k, j));
        const float dp = gdpa::Dot<kDh>(q_at(in.d_o, i), v_at(in.v, j));
        const float sg = gdpa::Sigmoid(z);
        *w = gdpa::Weight(z, sg, c.post_scale);
        *dz = gdpa::ScoreGrad(z, sg, dp, c.post_scale);
        return true;
      };
      for (int i = 0; i < lq; ++i) {
        for (int x = 0; x < kDh; ++x) {
          const_cast<float*>(q_at(out.o, i))[x] = SumOf(lk, !short_keys, [&](int j, float* term) {
            float w, dz;
            if (!terms(i, j, &w, &dz)) return false;
            *term = w * v_at(in.v, j)[x];
            return true;
          });
          const_cast<float*>(q_at(out.dq, i))[x] = SumOf(lk, !short_keys, [&](int j, float* term) {
            float w, dz;
            if (!terms(i, j, &w, &dz)) return false;
            *term = dz * k_at(in.k, j)[x];
            return true;
          });
        }
      }
      for (int j = 0; j < lk; ++j) {
        for (int x = 0; x < kDh; ++x) {
          const_cast<float*>(k_at(out.dk, j))[x] = SumOf(lq, short_keys, [&](int i, float* term) {
            float w, dz;
            if (!terms(i, j, &w, &dz)) return false;
            *term = dz * q_at(in.q, i)[x];
            return true;
          });
          const_cast<float*>(v_at(out.dv, j))[x] = SumOf(lq, short_keys, [&](int i, float* term) {
            float w, dz;
            if (!terms(i, j, &w, &dz)) return false;
            *term = w * q_at(in.d_o, i)[x];
            return true;
          });
        }
      }
    }
  }
  return out;
}

// The long side's tile list (gdpa_tensor_core.h's GdpaTilesOf entries): every 64-row tile that holds
// rows, sample by sample.
std::vector<int32_t> TileList(const Side& qs, const Side& ks, bool long_keys) {
  std::vector<int32_t> entries;
  for (size_t b = 0; b + 1 < qs.offsets.size(); ++b) {
    const int32_t lq = qs.offsets[b + 1] - qs.offsets[b], lk = ks.offsets[b + 1] - ks.offsets[b];
    for (int32_t t = 0; t * kTile < (long_keys ? lk : lq); ++t) {
      entries.insert(entries.end(), {qs.offsets[b], lq, ks.offsets[b], lk, t, static_cast<int32_t>(b), 0, 0});
    }
  }
  return entries;
}

// One pass of the kernels as gpu/train/gdpa_tensor_core.cu launches them: TileKernel over (long tile,
// head), then SumTilesKernel over (sample, element blocks) where the pass has short rows' sums.
template <int kDh, typename T, bool kBackward>
void RunPass(const Case& c, Params p, const Tensors<T>& t, const std::vector<int32_t>& list) {
  const int64_t batch = static_cast<int64_t>(c.lq.size());
  const int sums = (t.sum0 != nullptr ? 1 : 0) + (t.sum1 != nullptr ? 1 : 0);
  const size_t per_output = static_cast<size_t>(batch * p.long_tiles * p.heads * p.max_short * kDh);
  std::vector<float> part(per_output * static_cast<size_t>(sums), std::numeric_limits<float>::quiet_NaN());
  p.part0 = t.sum0 != nullptr ? part.data() : nullptr;
  p.part1 = t.sum1 != nullptr ? part.data() + (t.sum0 != nullptr ? per_output : 0) : nullptr;
  p.tiles = c.listed ? list.data() : nullptr;
  const auto tiles = static_cast<unsigned>(c.listed ? list.size() / kTileInts : batch * p.long_tiles);
  const auto heads = static_cast<unsigned>(p.heads);
  emu::SetGridDim({tiles, heads, 1});
  for (unsigned x = 0; x < tiles; ++x) {
    for (unsigned h = 0; h < heads; ++h) {
      std::memset(smem_f, 0xFF, sizeof(smem_f));
      emu::RunBlock({x, h, 0}, kThreads, [&] { TileKernel<kDh, T, kBackward>(p, t); });
    }
  }
  if (sums == 0) return;
  // Two blocks of elements a sample at most, so that the blocks' stride over the elements is taken.
  const int64_t elements = int64_t{p.heads} * p.max_short * kDh;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(2, (elements + kThreads - 1) / kThreads));
  emu::SetGridDim({static_cast<unsigned>(batch), blocks, 1});
  for (unsigned b = 0; b < batch; ++b) {
    for (unsigned y = 0; y < blocks; ++y) emu::RunBlock({b, y, 0}, kThreads, [&] { SumTilesKernel<kDh, T>(p, t); });
  }
}

// Forward and backward by the kernels, with the short side and the tensors' roles as
// gpu/train/gdpa_tensor_core.cu's launcher gives them.
template <int kDh, typename T>
void RunKernel(const Case& c, const Side& qs, const Side& ks, const T* q, const T* k, const T* v, const T* d_o, T* o,
               T* dq, T* dk, T* dv) {
  const int64_t width = int64_t{c.heads} * kDh, ld_v = width + c.v_pad;
  const bool short_keys = ks.max <= kMaxShort;
  const int max_long = short_keys ? qs.max : ks.max;
  const Params p{short_keys ? qs.offsets.data() : ks.offsets.data(),
                 short_keys ? ks.offsets.data() : qs.offsets.data(),
                 max_long,
                 short_keys ? ks.max : qs.max,
                 gdpa::Mask{c.window, c.block},
                 c.post_scale,
                 c.vec,
                 !short_keys,
                 nullptr,
                 (max_long + kTile - 1) / kTile,
                 c.heads,
                 nullptr,
                 nullptr};
  Tensors<T> fwd, bwd;
  if (short_keys) {
    fwd.la = q, fwd.ld_la = width, fwd.sa = k, fwd.ld_sa = width, fwd.sb = v, fwd.ld_sb = ld_v;
    fwd.row1 = o, fwd.ld_row1 = width;
    bwd.la = q, bwd.ld_la = width, bwd.lb = d_o, bwd.ld_lb = width, bwd.sa = k, bwd.ld_sa = width, bwd.sb = v;
    bwd.ld_sb = ld_v, bwd.row0 = dq, bwd.ld_row0 = width, bwd.sum0 = dk, bwd.ld_sum0 = width, bwd.sum1 = dv;
    bwd.ld_sum1 = ld_v;
  } else {
    fwd.la = k, fwd.ld_la = width, fwd.lb = v, fwd.ld_lb = ld_v, fwd.sa = q, fwd.ld_sa = width;
    fwd.sum1 = o, fwd.ld_sum1 = width;
    bwd.la = k, bwd.ld_la = width, bwd.lb = v, bwd.ld_lb = ld_v, bwd.sa = q, bwd.ld_sa = width, bwd.sb = d_o;
    bwd.ld_sb = width, bwd.row0 = dk, bwd.ld_row0 = width, bwd.row1 = dv, bwd.ld_row1 = ld_v, bwd.sum0 = dq;
    bwd.ld_sum0 = width;
  }
  const std::vector<int32_t> list = TileList(qs, ks, !short_keys);
  RunPass<kDh, T, false>(c, p, fwd, list);
  RunPass<kDh, T, true>(c, p, bwd, list);
}

// Inputs: bf16 values (normal, sd 0.5) in the samples' rows, 1e30 outside them (a kernel that used
// one would overflow). Unaligned cases read element by element (Params::vec false).
template <int kDh>
Tensors4 MakeInputs(const Case& c, const Side& qs, const Side& ks) {
  const int width = c.heads * kDh, ld_v = width + c.v_pad;
  std::mt19937 rng(static_cast<uint32_t>(c.name.size() * 131 + kDh));
  std::normal_distribution<float> normal(0.0f, 0.5f);
  auto filled = [&](const Side& side, int ld) {
    std::vector<float> x(static_cast<size_t>(side.rows * ld), 1e30f);
    for (int64_t r = side.offsets.front(); r < side.offsets.back(); ++r) {
      for (int e = 0; e < width; ++e) {
        x[r * ld + e] = numerics::Bf16BitsToFloat(numerics::FloatToBf16BitsRne(normal(rng)));
      }
    }
    return x;
  };
  Tensors4 in;
  in.q = filled(qs, width), in.d_o = filled(qs, width), in.k = filled(ks, width), in.v = filled(ks, ld_v);
  return in;
}

std::vector<uint16_t> Bf16(const std::vector<float>& x) {
  std::vector<uint16_t> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = numerics::FloatToBf16BitsRne(x[i]);
  return y;
}

void ExpectBytes(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, first = got.size();
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": first differing element " << first << " of " << got.size();
}

template <int kDh>
void Check(const Case& c) {
  const Side qs = Offsets(c.lq), ks = Offsets(c.lk);
  const int width = c.heads * kDh, ld_v = width + c.v_pad;
  const Tensors4 in = MakeInputs<kDh>(c, qs, ks);
  const Outputs want = Model<kDh>(c, qs, ks, in);
  const std::string name = c.name + " dh " + std::to_string(kDh);
  // fp32 tensors: the model's bytes.
  Outputs got;
  got.o = Sentinels(qs.rows * width), got.dq = got.o;
  got.dk = Sentinels(ks.rows * width), got.dv = Sentinels(ks.rows * ld_v);
  RunKernel<kDh, float>(c, qs, ks, in.q.data(), in.k.data(), in.v.data(), in.d_o.data(), got.o.data(), got.dq.data(),
                        got.dk.data(), got.dv.data());
  ExpectBytes(got.o, want.o, name + " o");
  ExpectBytes(got.dq, want.dq, name + " dq");
  ExpectBytes(got.dk, want.dk, name + " dk");
  ExpectBytes(got.dv, want.dv, name + " dv");
  // bf16 tensors holding the same values: the model's results rounded (sentinels round to themselves'
  // upper halves, which is what an untouched bf16 row of sentinels holds).
  const std::vector<uint16_t> q = Bf16(in.q), k = Bf16(in.k), v = Bf16(in.v), d_o = Bf16(in.d_o);
  std::vector<uint16_t> o = Bf16(Sentinels(qs.rows * width)), dq = o, dk = Bf16(Sentinels(ks.rows * width)),
                        dv = Bf16(Sentinels(ks.rows * ld_v));
  RunKernel<kDh, uint16_t>(c, qs, ks, q.data(), k.data(), v.data(), d_o.data(), o.data(), dq.data(), dk.data(),
                           dv.data());
  EXPECT_EQ(o, Bf16(want.o)) << name << " bf16 o";
  EXPECT_EQ(dq, Bf16(want.dq)) << name << " bf16 dq";
  EXPECT_EQ(dk, Bf16(want.dk)) << name << " bf16 dk";
  EXPECT_EQ(dv, Bf16(want.dv)) << name << " bf16 dv";
}

std::vector<Case> Cases() {
  const std::vector<int> jagged = {0, 1, 17, 63, 64, 65, 130};
  std::vector<Case> cases;
  // Cross-attention: every query over its sample's few keys (0 .. 4).
  cases.push_back({"cross", 2, -1, 0, 0.25f, jagged, {4, 4, 3, 4, 0, 4, 2}});
  // PMA: 4 queries (some samples none) over jagged keys.
  cases.push_back({"pma", 2, -1, 0, 1.0f / 130, {4, 4, 4, 0, 4, 4, 4}, jagged});
  Case unaligned = cases[0];
  unaligned.name = "cross, element loads", unaligned.vec = false;
  cases.push_back(unaligned);
  Case wide = cases[1];
  wide.name = "pma, wide v rows", wide.v_pad = 8;
  cases.push_back(wide);
  Case wide_cross = cases[0];
  wide_cross.name = "cross, wide v rows", wide_cross.v_pad = 24;
  cases.push_back(wide_cross);
  // Grids over every sample's tiles (the CTAs past a sample's rows find none).
  Case every_cross = cases[0];
  every_cross.name = "cross, every tile", every_cross.listed = false;
  cases.push_back(every_cross);
  Case every_pma = cases[1];
  every_pma.name = "pma, every tile", every_pma.listed = false;
  cases.push_back(every_pma);
  // Both sides short, with masks: the keys are the short side.
  cases.push_back({"window 2", 3, 2, 0, 0.5f, {8, 5, 1, 7}, {8, 5, 1, 7}});
  cases.push_back({"block 3", 1, -1, 3, 0.5f, {8, 6, 2}, {8, 6, 2}});
  // Short queries with a window over long keys: a mask on the long side.
  cases.push_back({"pma, window 40", 2, 40, 0, 1.0f, {8, 3, 8}, {130, 64, 17}});
  return cases;
}

TEST(GdpaShortSideEmulated, GivesItsHostModelsBytes) {
  for (const Case& c : Cases()) {
    Check<16>(c);
    Check<32>(c);
    Check<64>(c);
  }
}

}  // namespace
}  // namespace gemtb::gpu::train::ss
