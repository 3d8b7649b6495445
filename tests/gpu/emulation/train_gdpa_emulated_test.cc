// The trainer's tensor-core GDPA kernels (gpu/train/gdpa_tensor_core_kernels.cuh) run on the CPU by
// the fiber emulation, against GDPA evaluated here in fp64 from its definition (gpu/train/gdpa.h):
// self-attention unmasked, with windows 5, 17 (a strip's first kept key the last of a 16-key chunk) and
// 30 (the chunks every row of a strip keeps end one key inside the strip's kept range, the mask's
// boundary a key past a chunk's edge) and block 24; cross-attention to 4 keys; PMA's 4 queries over jagged keys; and walks split over CTAs
// (PMA over 300 keys, cross-attention from 300 queries) with their partial rows added by
// SumSplitsKernel. Head dims 16, 32 and 64; samples of 0, 1, 17, 64, 65 and 100 rows (partial tiles,
// every warp layout); 16-byte rows (float4) and, once, unaligned ones. The same kernels on bf16
// tensors holding the fp32 inputs rounded give the fp32 kernels' outputs rounded, bit for bit. With
// the keys (queries) given as a head RMS norm's output, the dK/dV (dQ) kernel writes the norm's
// backward of its sums.
//
// The kernels' own source runs, so this checks their indexing, masks, warp roles, splits, fragment
// layouts (mma.sync and ldmatrix as the PTX ISA defines them) and synchronisation counts, not the
// tensor cores' rounding: the same bounds as the device test (tests/gpu/train_gdpa_tensor_core_test.cc),
// relative L2 <= 1e-2 and every element within 5e-2 max|ref|, hold for bf16 operands. Rows outside
// every sample must keep their sentinel bytes.
#include "tests/gpu/emulation/cuda_shim.h"
// The shim must come first.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "gpu/train/gdpa_tensor_core_kernels.cuh"
#include "model/numerics/float_formats.h"
#include "tests/gpu/head_norm_backward_reference.h"
#include "tests/gpu/qk_norm_rope_host_model.h"
#include "gtest/gtest.h"

namespace gemtb::gpu::train::tc {

alignas(128) unsigned char smem[size_t{1} << 16];  // the kernels' `extern __shared__` array

namespace {

constexpr int kLead = 3, kTrail = 5;        // rows before the first sample and after the last
constexpr uint32_t kSentinel = 0x7fc0dea1;  // a quiet NaN with a payload: an untouched output row

struct Case {
  std::string name;
  int heads = 2, window = -1, block = 0;
  float post_scale = 1.0f;
  std::vector<int> lq, lk;
  bool vec = true;
};

// Rows [kLead, kLead + sum) hold the samples; every row holds heads * dh floats.
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

// The sample whose rows hold row r (r within the samples).
size_t SampleOf(const Side& side, int64_t r) {
  size_t b = 0;
  while (side.offsets[b + 1] <= r) ++b;
  return b;
}

bool Keep(const Case& c, int i, int j) {
  if (c.block > 0) return i / c.block == j / c.block;
  if (c.window >= 0) return std::abs(i - j) <= c.window;
  return true;
}

struct Grads {
  std::vector<double> o, dq, dk, dv;
};

// GDPA and its gradients in fp64 from the definition.
Grads Reference(const Case& c, int dh, const Side& qs, const Side& ks, const std::vector<float>& q, const std::vector<float>& k,
                const std::vector<float>& v, const std::vector<float>& d_o) {
  const int width = c.heads * dh;
  Grads g;
  g.o.assign(q.size(), 0.0), g.dq.assign(q.size(), 0.0), g.dk.assign(k.size(), 0.0), g.dv.assign(v.size(), 0.0);
  for (size_t b = 0; b + 1 < qs.offsets.size(); ++b) {
    const int lq = qs.offsets[b + 1] - qs.offsets[b], lk = ks.offsets[b + 1] - ks.offsets[b];
    for (int h = 0; h < c.heads; ++h) {
      for (int i = 0; i < lq; ++i) {
        const int64_t qi = (qs.offsets[b] + i) * int64_t{width} + h * dh;
        for (int j = 0; j < lk; ++j) {
          if (!Keep(c, i, j)) continue;
          const int64_t kj = (ks.offsets[b] + j) * int64_t{width} + h * dh;
          double z = 0, dp = 0;
          for (int x = 0; x < dh; ++x) z += double{q[qi + x]} * k[kj + x], dp += double{d_o[qi + x]} * v[kj + x];
          const double sg = 1.0 / (1.0 + std::exp(-z));
          const double w = c.post_scale * z * sg, dz = c.post_scale * sg * (1.0 + z * (1.0 - sg)) * dp;
          for (int x = 0; x < dh; ++x) {
            g.o[qi + x] += w * v[kj + x];
            g.dv[kj + x] += w * d_o[qi + x];
            g.dq[qi + x] += dz * k[kj + x];
            g.dk[kj + x] += dz * q[qi + x];
          }
        }
      }
    }
  }
  return g;
}

// Runs body on every block of grid (x, y, z) as kThreads fibers, shared memory poisoned first.
template <typename Body>
void RunGrid(unsigned x, unsigned y, unsigned z, const Body& body) {
  emu::SetGridDim({x, y, z});
  for (unsigned bz = 0; bz < z; ++bz) {
    for (unsigned by = 0; by < y; ++by) {
      for (unsigned bx = 0; bx < x; ++bx) {
        std::memset(smem, 0xFF, sizeof(smem));
        emu::RunBlock({bx, by, bz}, kThreads, body);
      }
    }
  }
}

// The splits a walk of up to `other` rows takes when the own side fits one tile (as the launcher
// decides them, without its workspace cap).
int Splits(int32_t max_own, int32_t max_other) {
  if (max_own > kTile) return 1;
  return std::max(1, (max_other + kSplitRows - 1) / kSplitRows);
}

std::vector<float> Sentinels(int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (float& f : x) std::memcpy(&f, &kSentinel, sizeof(f));
  return x;
}

// Launches `launch(sp, out0, out1)` split as Splits says: unsplit into out0/out1, or into a workspace
// whose partial rows SumSplitsKernel adds into them. The grid's tiles: the own side's tile list in p
// where it has one, else every sample's.
template <typename T, typename Launch>
void SplitRun(const Params& p, int64_t batch, int heads, int dh, int32_t max_own, int32_t max_other, bool own_keys,
              T* out0, T* out1, const Launch& launch, int64_t listed_tiles = -1) {
  Split sp;
  sp.splits = Splits(max_own, max_other);
  const auto tiles = static_cast<unsigned>(listed_tiles >= 0 ? listed_tiles : batch * ((max_own + kTile - 1) / kTile));
  const auto splits = static_cast<unsigned>(sp.splits);
  if (sp.splits == 1) {
    RunGrid(tiles, static_cast<unsigned>(heads), splits, [&] { launch(sp, out0, out1); });
    return;
  }
  sp.max_own = max_own;
  sp.split_stride = batch * max_own * heads * dh;
  std::vector<float> part(static_cast<size_t>((out1 != nullptr ? 2 : 1) * sp.splits * sp.split_stride),
                          std::nanf(""));
  sp.part0 = part.data();
  sp.part1 = out1 != nullptr ? part.data() + sp.splits * sp.split_stride : nullptr;
  RunGrid(tiles, static_cast<unsigned>(heads), splits, [&] { launch(sp, out0, out1); });
  RunGrid(static_cast<unsigned>(batch), 1, 1, [&] { SumSplitsKernel<T>(p, sp, dh, own_keys, out0, out1); });
}

// The four kernels of one case on q, k, v, d_o (fp32 or bf16 rows): o, dq, dk, dv written as T; v and
// dv rows ld_v apart (0: dense); with `listed`, the grids over the sides' tile lists (TileList).
template <int kDh, typename T>
void RunKernels(const Case& c, const Side& qs, const Side& ks, const T* q, const T* k, const T* v, const T* d_o, T* o,
                T* dq, T* dk, T* dv, int ld_v = 0, bool listed = false) {
  const std::vector<int32_t> q_list = TileList(qs.offsets, ks.offsets, false),
                             k_list = TileList(qs.offsets, ks.offsets, true);
  const auto tiles = [](int32_t rows) { return (rows + kTile - 1) / kTile; };
  const Params p{qs.offsets.data(),
                 ks.offsets.data(),
                 c.heads,
                 Mask{c.window, c.block},
                 c.post_scale,
                 c.vec,
                 ld_v > 0 ? ld_v : c.heads * kDh,
                 listed ? q_list.data() : nullptr,
                 listed ? k_list.data() : nullptr,
                 tiles(qs.max),
                 tiles(ks.max),
                 NormSide{},
                 NormSide{}};
  const int64_t batch = static_cast<int64_t>(c.lq.size());
  const int64_t q_tiles = listed ? static_cast<int64_t>(q_list.size()) / kTileInts : -1,
                k_tiles = listed ? static_cast<int64_t>(k_list.size()) / kTileInts : -1;
  SplitRun(
      p, batch, c.heads, kDh, qs.max, ks.max, false, o, static_cast<T*>(nullptr),
      [&](const Split& sp, T* out, T*) { ForwardKernel<kDh, T>(p, sp, q, k, v, out); }, q_tiles);
  SplitRun(
      p, batch, c.heads, kDh, qs.max, ks.max, false, dq, static_cast<T*>(nullptr),
      [&](const Split& sp, T* out, T*) { BackwardDqKernel<kDh, T>(p, sp, q, k, v, d_o, out); }, q_tiles);
  SplitRun(
      p, batch, c.heads, kDh, ks.max, qs.max, true, dk, dv,
      [&](const Split& sp, T* out0, T* out1) { BackwardDkDvKernel<kDh, T>(p, sp, q, k, v, d_o, out0, out1); },
      k_tiles);
}

// Rows of the samples within the bounds; rows outside them still sentinels.
void ExpectClose(const std::string& what, const Side& side, int width, const std::vector<float>& got,
                 const std::vector<double>& ref) {
  const int64_t first = side.offsets.front(), last = side.offsets.back();
  double err2 = 0, ref2 = 0, ref_max = 0, err_max = 0;
  for (int64_t r = 0; r < side.rows; ++r) {
    for (int x = 0; x < width; ++x) {
      const size_t e = static_cast<size_t>(r * width + x);
      if (r < first || r >= last) {
        uint32_t bits = 0;
        std::memcpy(&bits, &got[e], sizeof(bits));
        ASSERT_EQ(bits, kSentinel) << what << ": row " << r << " outside every sample was written";
        continue;
      }
      const double d = got[e] - ref[e];
      err2 += d * d, ref2 += ref[e] * ref[e];
      ref_max = std::max(ref_max, std::abs(ref[e]));
      err_max = std::max(err_max, std::abs(d));
    }
  }
  if (ref2 == 0) {
    EXPECT_EQ(err_max, 0.0) << what;
    return;
  }
  EXPECT_LE(std::sqrt(err2 / ref2), 1e-2) << what;
  EXPECT_LE(err_max, 5e-2 * ref_max + 1e-6) << what;
}

// A case's inputs: rows outside every sample hold 1e30 (a kernel that used one would overflow the
// results); unaligned rows: every array one element past a 16-byte boundary.
struct Inputs {
  int shift = 0;
  std::vector<float> q, k, v, d_o;
};

template <int kDh>
Inputs MakeInputs(const Case& c, const Side& qs, const Side& ks) {
  const int width = c.heads * kDh;
  Inputs in;
  in.shift = c.vec ? 0 : 1;
  std::mt19937 rng(static_cast<uint32_t>(c.name.size() * 131 + kDh));
  std::normal_distribution<float> normal(0.0f, 0.5f);
  auto filled = [&](const Side& side) {
    std::vector<float> x(static_cast<size_t>(side.rows * width + in.shift), 1e30f);
    for (int64_t e = side.offsets.front() * width; e < side.offsets.back() * width; ++e) x[e + in.shift] = normal(rng);
    return x;
  };
  in.q = filled(qs), in.d_o = filled(qs), in.k = filled(ks), in.v = filled(ks);
  return in;
}

struct Outputs {
  std::vector<float> o, dq, dk, dv;
};

template <int kDh>
Outputs RunFp32(const Case& c, const Side& qs, const Side& ks, const Inputs& in) {
  const int width = c.heads * kDh, shift = in.shift;
  Outputs out;
  out.o = Sentinels(qs.rows * width + shift), out.dq = out.o, out.dk = Sentinels(ks.rows * width + shift);
  out.dv = out.dk;
  RunKernels<kDh, float>(c, qs, ks, in.q.data() + shift, in.k.data() + shift, in.v.data() + shift,
                         in.d_o.data() + shift, out.o.data() + shift, out.dq.data() + shift, out.dk.data() + shift,
                         out.dv.data() + shift);
  auto unshift = [&](std::vector<float>& x) { x.erase(x.begin(), x.begin() + shift); };
  unshift(out.o), unshift(out.dq), unshift(out.dk), unshift(out.dv);
  return out;
}

template <int kDh>
void RunCase(const Case& c) {
  const Side qs = Offsets(c.lq), ks = Offsets(c.lk);
  const int width = c.heads * kDh;
  const Inputs in = MakeInputs<kDh>(c, qs, ks);
  auto unshift = [&](const std::vector<float>& x) { return std::vector<float>(x.begin() + in.shift, x.end()); };
  const Grads ref = Reference(c, kDh, qs, ks, unshift(in.q), unshift(in.k), unshift(in.v), unshift(in.d_o));
  const Outputs got = RunFp32<kDh>(c, qs, ks, in);
  const std::string name = c.name + " dh=" + std::to_string(kDh);
  ExpectClose(name + " o", qs, width, got.o, ref.o);
  ExpectClose(name + " dq", qs, width, got.dq, ref.dq);
  ExpectClose(name + " dk", ks, width, got.dk, ref.dk);
  ExpectClose(name + " dv", ks, width, got.dv, ref.dv);
}

constexpr uint16_t kBf16Sentinel = 0x7fc1;  // a bf16 quiet NaN with a payload

std::vector<uint16_t> RoundedBits(const std::vector<float>& x) {
  std::vector<uint16_t> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = numerics::FloatToBf16BitsRne(x[i]);
  return r;
}

// Every row of a sample holds the fp32 kernels' value rounded (RNE) to bf16, bit for bit; rows
// outside every sample keep the sentinel.
void ExpectRoundedBits(const std::string& what, const Side& side, int width, const std::vector<uint16_t>& got,
                       const std::vector<float>& fp32) {
  const int64_t first = side.offsets.front(), last = side.offsets.back();
  for (int64_t r = 0; r < side.rows; ++r) {
    for (int x = 0; x < width; ++x) {
      const size_t e = static_cast<size_t>(r * width + x);
      const uint16_t want = r < first || r >= last ? kBf16Sentinel : numerics::FloatToBf16BitsRne(fp32[e]);
      ASSERT_EQ(got[e], want) << what << ": row " << r << " column " << x;
    }
  }
}

// The kernels on bf16 rows holding the fp32 inputs rounded: the fp32 kernels' outputs rounded.
template <int kDh>
void RunBf16Case(const Case& c) {
  const Side qs = Offsets(c.lq), ks = Offsets(c.lk);
  const int width = c.heads * kDh;
  const Inputs in = MakeInputs<kDh>(c, qs, ks);
  const Outputs fp32 = RunFp32<kDh>(c, qs, ks, in);
  const std::vector<uint16_t> q = RoundedBits(in.q), k = RoundedBits(in.k), v = RoundedBits(in.v),
                              d_o = RoundedBits(in.d_o);
  const int shift = in.shift;
  std::vector<uint16_t> o(static_cast<size_t>(qs.rows * width + shift), kBf16Sentinel), dq = o;
  std::vector<uint16_t> dk(static_cast<size_t>(ks.rows * width + shift), kBf16Sentinel), dv = dk;
  RunKernels<kDh, bf16>(c, qs, ks, q.data() + shift, k.data() + shift, v.data() + shift, d_o.data() + shift,
                        o.data() + shift, dq.data() + shift, dk.data() + shift, dv.data() + shift);
  auto unshift = [&](const std::vector<uint16_t>& x) { return std::vector<uint16_t>(x.begin() + shift, x.end()); };
  const std::string name = c.name + " dh=" + std::to_string(kDh) + " bf16";
  ExpectRoundedBits(name + " o", qs, width, unshift(o), fp32.o);
  ExpectRoundedBits(name + " dq", qs, width, unshift(dq), fp32.dq);
  ExpectRoundedBits(name + " dk", ks, width, unshift(dk), fp32.dk);
  ExpectRoundedBits(name + " dv", ks, width, unshift(dv), fp32.dv);
}

// v read from, and dv written into, rows three times as wide (v's columns in the middle, the others
// holding 1e30 or the sentinel): the dense run's bytes, and nothing written outside dv's columns.
template <int kDh, typename T>
void RunWideValueCase(const Case& c) {
  const Side qs = Offsets(c.lq), ks = Offsets(c.lk);
  const int width = c.heads * kDh, ld = 3 * width;
  const Inputs in = MakeInputs<kDh>(c, qs, ks);
  auto as_t = [](const std::vector<float>& x) {
    if constexpr (std::is_same_v<T, float>) {
      return x;
    } else {
      return RoundedBits(x);
    }
  };
  const T sentinel = [] {
    if constexpr (std::is_same_v<T, float>) {
      float f;
      std::memcpy(&f, &kSentinel, sizeof(f));
      return f;
    } else {
      return kBf16Sentinel;
    }
  }();
  const int shift = in.shift;
  const std::vector<T> q = as_t(in.q), k = as_t(in.k), v = as_t(in.v), d_o = as_t(in.d_o);
  std::vector<T> wide_v(static_cast<size_t>(ks.rows * ld + shift), as_t({1e30f})[0]);
  for (int64_t r = 0; r < ks.rows; ++r) {
    for (int x = 0; x < width; ++x) wide_v[r * ld + width + x + shift] = v[r * width + x + shift];
  }
  std::vector<T> o(static_cast<size_t>(qs.rows * width + shift), sentinel), dq = o;
  std::vector<T> dk(static_cast<size_t>(ks.rows * width + shift), sentinel), dv = dk;
  RunKernels<kDh, T>(c, qs, ks, q.data() + shift, k.data() + shift, v.data() + shift, d_o.data() + shift,
                     o.data() + shift, dq.data() + shift, dk.data() + shift, dv.data() + shift);
  std::vector<T> wide_o(o.size(), sentinel), wide_dq = wide_o, wide_dk = dk;
  std::vector<T> wide_dv(static_cast<size_t>(ks.rows * ld + shift), sentinel);
  RunKernels<kDh, T>(c, qs, ks, q.data() + shift, k.data() + shift, wide_v.data() + width + shift, d_o.data() + shift,
                     wide_o.data() + shift, wide_dq.data() + shift, wide_dk.data() + shift,
                     wide_dv.data() + width + shift, ld);
  const std::string name = c.name + " dh=" + std::to_string(kDh) + (sizeof(T) == 2 ? " bf16" : " fp32") + " wide v";
  auto same = [](T a, T b) { return std::memcmp(&a, &b, sizeof(T)) == 0; };
  for (size_t e = 0; e < o.size(); ++e) {
    ASSERT_TRUE(same(wide_o[e], o[e]) && same(wide_dq[e], dq[e])) << name << ": o or dq at " << e;
  }
  for (size_t e = 0; e < dk.size(); ++e) ASSERT_TRUE(same(wide_dk[e], dk[e])) << name << ": dk at " << e;
  for (int64_t r = 0; r < ks.rows; ++r) {
    for (int x = 0; x < ld; ++x) {
      const bool in_dv = x >= width && x < 2 * width;
      const T want = in_dv ? dv[r * width + (x - width) + shift] : sentinel;
      ASSERT_TRUE(same(wide_dv[r * ld + x + shift], want)) << name << ": dv row " << r << " column " << x;
    }
  }
}

std::vector<Case> Cases() {
  const std::vector<int> lengths = {0, 1, 17, 64, 65, 100};
  std::vector<Case> cases;
  for (auto [name, window, block] : {std::tuple{"self unmasked", -1, 0}, std::tuple{"self window=5", 5, 0},
                                     std::tuple{"self window=17", 17, 0}, std::tuple{"self window=30", 30, 0},
                                     std::tuple{"self block=24", -1, 24}}) {
    Case c;
    c.name = name, c.window = window, c.block = block, c.post_scale = 1.0f / 16, c.lq = lengths, c.lk = lengths;
    cases.push_back(c);
  }
  Case cross;
  cross.name = "cross", cross.post_scale = 0.25f, cross.lq = lengths, cross.lk = {4, 4, 0, 4, 4, 4};
  cases.push_back(cross);
  Case pma;
  pma.name = "pma", pma.post_scale = 1.0f / 130, pma.lq = {4, 4, 4, 0, 4, 4}, pma.lk = lengths;
  cases.push_back(pma);
  Case pma_split = pma;
  pma_split.name = "pma split", pma_split.lq = {4, 3, 0}, pma_split.lk = {300, 40, 290};
  cases.push_back(pma_split);
  Case cross_split = cross;
  cross_split.name = "cross split", cross_split.lq = {300, 40, 290}, cross_split.lk = {4, 3, 0};
  cases.push_back(cross_split);
  Case unaligned = cases[1];
  unaligned.name = "self window=5 unaligned rows", unaligned.vec = false;
  cases.push_back(unaligned);
  return cases;
}

TEST(TrainGdpaEmulated, KernelsMatchTheDefinitionInFp64) {
  for (const Case& c : Cases()) {
    RunCase<16>(c);
    RunCase<32>(c);
    RunCase<64>(c);
    if (HasFatalFailure()) return;
  }
}

TEST(TrainGdpaEmulated, Bf16TensorsGiveTheFp32TensorsResultsRounded) {
  for (const Case& c : Cases()) {
    RunBf16Case<16>(c);
    RunBf16Case<32>(c);
    RunBf16Case<64>(c);
    if (HasFatalFailure()) return;
  }
}

// The dK/dV kernel with the keys as a head RMS norm's output (Params::key_norm; gdpa_tensor_core.h's
// GdpaHeadNorm), and the dQ kernel with the queries as one (query_norm), fp32 tensors: dk (dq),
// written rows 2 * width apart, is the norm's backward inv (g - y mean(g y)), y = x * inv in fp32, of
// the plain run's dk (dq) rounded to bf16 (g), within fp32's rounding of the row's terms; dv is the
// plain run's bytes; nothing is written outside the gradient's columns or the samples' rows. Cases
// whose walks over the other side split are left out (the launcher keeps them whole with a norm);
// tiles of 32 rows or fewer, whose strips are shared by groups of warps, are in.
template <int kDh>
bool RunNormCase(const Case& c, bool keys, bool rope) {
  const Side qs = Offsets(c.lq), ks = Offsets(c.lk);
  const Side& own = keys ? ks : qs;
  const Side& other = keys ? qs : ks;
  if (!c.vec || Splits(own.max, other.max) > 1) return false;
  const int width = c.heads * kDh, ld = 2 * width;
  const Inputs in = MakeInputs<kDh>(c, qs, ks);
  const Outputs plain = RunFp32<kDh>(c, qs, ks, in);
  // x: bf16 rows ld apart (the other columns 1e30); inv: any positive value per row and head.
  std::vector<uint16_t> x(static_cast<size_t>(own.rows * ld), numerics::FloatToBf16BitsRne(1e30f));
  std::vector<float> inv(static_cast<size_t>(own.rows * c.heads), 1.0f);
  std::mt19937 rng(static_cast<uint32_t>(kDh * 7 + c.name.size() + (keys ? 0 : 1000) + (rope ? 2000 : 0)));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> scale(0.25f, 4.0f);
  for (int64_t r = own.offsets.front(); r < own.offsets.back(); ++r) {
    for (int e = 0; e < width; ++e) x[static_cast<size_t>(r * ld + e)] = numerics::FloatToBf16BitsRne(normal(rng));
    for (int h = 0; h < c.heads; ++h) inv[static_cast<size_t>(r * c.heads + h)] = scale(rng);
  }
  // RoPE's table: sin in columns [0, dh / 2), cos in [dh / 2, dh), any values per position.
  std::vector<float> table(static_cast<size_t>(std::max(own.max, 1) * kDh));
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (float& e : table) e = unit(rng);
  Params p{qs.offsets.data(), ks.offsets.data(), c.heads, Mask{c.window, c.block}, c.post_scale, true,
           width,             nullptr,           nullptr, (qs.max + kTile - 1) / kTile, (ks.max + kTile - 1) / kTile,
           NormSide{},        NormSide{}};
  if (keys) {
    p.key_norm = NormSide{x.data(), inv.data(), ld, rope ? table.data() : nullptr};
  } else {
    p.query_norm = NormSide{x.data(), inv.data(), ld, rope ? table.data() : nullptr};
  }
  std::vector<float> grad = Sentinels(own.rows * ld), dv = Sentinels(ks.rows * width);
  const int64_t batch = static_cast<int64_t>(c.lq.size());
  const float *q = in.q.data(), *k = in.k.data(), *v = in.v.data(), *d_o = in.d_o.data();
  const auto tiles = static_cast<unsigned>(batch * ((own.max + kTile - 1) / kTile));
  if (keys) {
    RunGrid(tiles, static_cast<unsigned>(c.heads), 1,
            [&] { BackwardDkDvKernel<kDh, float, true>(p, Split{}, q, k, v, d_o, grad.data(), dv.data()); });
  } else {
    RunGrid(tiles, static_cast<unsigned>(c.heads), 1,
            [&] { BackwardDqKernel<kDh, float, true>(p, Split{}, q, k, v, d_o, grad.data()); });
  }
  const std::string name =
      c.name + " dh=" + std::to_string(kDh) + (keys ? " key norm" : " query norm") + (rope ? " with RoPE" : "");
  if (keys) {
    EXPECT_EQ(std::memcmp(dv.data(), plain.dv.data(), dv.size() * sizeof(float)), 0) << name << ": dv";
  }
  const std::vector<float>& plain_grad = keys ? plain.dk : plain.dq;
  const int64_t first = own.offsets.front(), last = own.offsets.back();
  for (int64_t r = 0; r < own.rows; ++r) {
    for (int col = 0; col < ld; ++col) {
      if (r >= first && r < last && col < width) continue;
      uint32_t bits = 0;
      std::memcpy(&bits, &grad[static_cast<size_t>(r * ld + col)], sizeof(bits));
      EXPECT_EQ(bits, kSentinel) << name << ": row " << r << " column " << col << " written";
      if (bits != kSentinel) return true;
    }
    if (r < first || r >= last) continue;
    const float* trow = rope ? table.data() + (r - own.offsets[SampleOf(own, r)]) * kDh : nullptr;
    for (int h = 0; h < c.heads; ++h) {
      float xr[kDh];
      for (int i = 0; i < kDh; ++i) xr[i] = numerics::Bf16BitsToFloat(x[static_cast<size_t>(r * ld + h * kDh + i)]);
      const test::HeadNormBackward ref = test::HeadNormBackwardOf(
          plain_grad.data() + r * width + h * kDh, xr, inv[static_cast<size_t>(r * c.heads + h)], kDh, trow);
      for (int i = 0; i < kDh; ++i) {
        const double want = ref.dx[i], got = grad[static_cast<size_t>(r * ld + h * kDh + i)];
        EXPECT_LE(std::abs(got - want), 1e-5 * ref.scale + 1e-30)
            << name << ": row " << r << " head " << h << " column " << i << ": " << got << ", want " << want;
        if (!(std::abs(got - want) <= 1e-5 * ref.scale + 1e-30)) return true;
      }
    }
  }
  return true;
}

// The forward with its queries given as a head RMS norm's input (ForwardKernel's kQueryNorm instance,
// NormForward; fp32 tensors): the normed queries it writes (bf16) and their inverse RMS are the norm
// kernels' bytes (tests/gpu/qk_norm_rope_host_model.h's HostForward: RoPE with any table, or the
// identity rotation for the plain norm), o is the plain forward's bytes on those queries, and nothing
// is written outside the samples' rows.
template <int kDh>
bool RunNormForwardCase(const Case& c, bool rope) {
  if (!c.vec) return false;
  const Side qs = Offsets(c.lq), ks = Offsets(c.lk);
  const int width = c.heads * kDh, ld = 2 * width;
  const Inputs in = MakeInputs<kDh>(c, qs, ks);
  std::mt19937 rng(static_cast<uint32_t>(kDh * 11 + c.name.size() + (rope ? 500 : 0)));
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  // x: bf16 values in rows ld apart (the other columns, and the rows outside the samples, 1e30).
  std::vector<float> x(static_cast<size_t>(qs.rows * ld), 1e30f);
  for (int64_t r = qs.offsets.front(); r < qs.offsets.back(); ++r) {
    for (int e = 0; e < width; ++e) {
      x[static_cast<size_t>(r * ld + e)] = numerics::Bf16BitsToFloat(numerics::FloatToBf16BitsRne(normal(rng)));
    }
  }
  // RoPE's table (sin in columns [0, dh / 2), cos in [dh / 2, dh)): any values, or the identity.
  std::vector<float> table(static_cast<size_t>(std::max(qs.max, 1) * kDh));
  for (int64_t t = 0; t < std::max(qs.max, 1); ++t) {
    for (int m = 0; m < kDh / 2; ++m) {
      table[static_cast<size_t>(t * kDh + m)] = rope ? unit(rng) : 0.0f;
      table[static_cast<size_t>(t * kDh + kDh / 2 + m)] = rope ? unit(rng) : 1.0f;
    }
  }
  // The host model's normed queries: bf16 bits, and as floats for the plain forward.
  std::vector<uint16_t> y_want(static_cast<size_t>(qs.rows * width), kBf16Sentinel);
  std::vector<float> inv_want = Sentinels(qs.rows * c.heads), q_normed(static_cast<size_t>(qs.rows * width), 1e30f);
  for (size_t b = 0; b + 1 < qs.offsets.size(); ++b) {
    for (int32_t r = qs.offsets[b]; r < qs.offsets[b + 1]; ++r) {
      const float* trow = table.data() + static_cast<size_t>(r - qs.offsets[b]) * kDh;
      for (int h = 0; h < c.heads; ++h) {
        float yv[kDh];
        test::HostForward(x.data() + static_cast<size_t>(r) * ld + h * kDh, kDh, trow, yv,
                          &inv_want[static_cast<size_t>(r) * c.heads + h]);
        for (int i = 0; i < kDh; ++i) {
          const size_t e = static_cast<size_t>(r) * width + h * kDh + i;
          y_want[e] = numerics::FloatToBf16BitsRne(yv[i]);
          q_normed[e] = numerics::Bf16BitsToFloat(y_want[e]);
        }
      }
    }
  }
  const Params p{qs.offsets.data(),
                 ks.offsets.data(),
                 c.heads,
                 Mask{c.window, c.block},
                 c.post_scale,
                 true,
                 width,
                 nullptr,
                 nullptr,
                 (qs.max + kTile - 1) / kTile,
                 (ks.max + kTile - 1) / kTile,
                 NormSide{},
                 NormSide{}};
  const int64_t batch = static_cast<int64_t>(c.lq.size());
  const float *k = in.k.data(), *v = in.v.data();
  std::vector<float> o_plain = Sentinels(qs.rows * width), o = Sentinels(qs.rows * width);
  SplitRun(p, batch, c.heads, kDh, qs.max, ks.max, false, o_plain.data(), static_cast<float*>(nullptr),
           [&](const Split& sp, float* out, float*) { ForwardKernel<kDh, float>(p, sp, q_normed.data(), k, v, out); });
  std::vector<uint16_t> y(static_cast<size_t>(qs.rows * width), kBf16Sentinel);
  std::vector<float> inv = Sentinels(qs.rows * c.heads);
  const NormForward qn{ld, rope ? table.data() : nullptr, y.data(), inv.data()};
  SplitRun(p, batch, c.heads, kDh, qs.max, ks.max, false, o.data(), static_cast<float*>(nullptr),
           [&](const Split& sp, float* out, float*) { ForwardKernel<kDh, float, true>(p, sp, x.data(), k, v, out, qn); });
  const std::string name = c.name + " dh=" + std::to_string(kDh) + (rope ? " norm and RoPE" : " norm");
  EXPECT_EQ(y, y_want) << name << ": the normed queries";
  EXPECT_EQ(std::memcmp(inv.data(), inv_want.data(), inv.size() * sizeof(float)), 0) << name << ": inv";
  EXPECT_EQ(std::memcmp(o.data(), o_plain.data(), o.size() * sizeof(float)), 0) << name << ": o";
  return true;
}

TEST(TrainGdpaEmulated, ForwardNormsItsQueriesAsTheNormKernelsDo) {
  int checked = 0;
  for (const Case& c : Cases()) {
    for (const bool rope : {false, true}) {
      checked += RunNormForwardCase<16>(c, rope);
      checked += RunNormForwardCase<32>(c, rope);
      checked += RunNormForwardCase<64>(c, rope);
      if (HasFailure()) return;
    }
  }
  EXPECT_GT(checked, 30);
}

TEST(TrainGdpaEmulated, HeadNormsGiveTheNormsBackwardOfTheSums) {
  int keys = 0, queries = 0;
  for (const Case& c : Cases()) {
    for (const bool own_keys : {true, false}) {
      int& checked = own_keys ? keys : queries;
      for (const bool rope : {false, true}) {
        checked += RunNormCase<16>(c, own_keys, rope);
        checked += RunNormCase<32>(c, own_keys, rope);
        checked += RunNormCase<64>(c, own_keys, rope);
      }
      if (HasFailure()) return;
    }
  }
  EXPECT_GE(keys, 42);
  EXPECT_GE(queries, 42);
}

// Grids over the tile lists (only the tiles that hold rows) give the grids over every sample's tiles
// their bytes, rows outside every sample untouched.
template <int kDh>
void RunListedCase(const Case& c) {
  const Side qs = Offsets(c.lq), ks = Offsets(c.lk);
  const int width = c.heads * kDh;
  const Inputs in = MakeInputs<kDh>(c, qs, ks);
  const std::vector<uint16_t> q = RoundedBits(in.q), k = RoundedBits(in.k), v = RoundedBits(in.v),
                              d_o = RoundedBits(in.d_o);
  const int shift = in.shift;
  std::vector<std::vector<uint16_t>> outs[2];
  for (const bool listed : {false, true}) {
    std::vector<uint16_t> o(static_cast<size_t>(qs.rows * width + shift), kBf16Sentinel), dq = o;
    std::vector<uint16_t> dk(static_cast<size_t>(ks.rows * width + shift), kBf16Sentinel), dv = dk;
    RunKernels<kDh, bf16>(c, qs, ks, q.data() + shift, k.data() + shift, v.data() + shift, d_o.data() + shift,
                          o.data() + shift, dq.data() + shift, dk.data() + shift, dv.data() + shift, 0, listed);
    outs[listed] = {o, dq, dk, dv};
  }
  const char* names[4] = {"o", "dq", "dk", "dv"};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(outs[1][i], outs[0][i]) << c.name << " dh=" << kDh << " " << names[i];
}

TEST(TrainGdpaEmulated, TileListsGiveEverySamplesTilesBytes) {
  for (const Case& c : Cases()) {
    RunListedCase<32>(c);
    RunListedCase<16>(c);
    if (HasFatalFailure()) return;
  }
  // The lists hold only tiles with rows: the "self" cases' lengths {0, 1, 17, 64, 65, 100} make 7 of the
  // 12 tiles a grid over every sample would take.
  const Side side = Offsets({0, 1, 17, 64, 65, 100});
  EXPECT_EQ(TileList(side.offsets, side.offsets, false).size(), size_t{7} * kTileInts);
}

// WriteTilesKernel writes TileList's entries from the offsets and the per-sample tile prefix.
TEST(TrainGdpaEmulated, WriteTilesKernelWritesTheTileList) {
  const Side seq = Offsets({0, 1, 17, 64, 65, 100, 300}), four = Offsets({4, 4, 4, 4, 4, 4, 4});
  for (const auto& [q, k, own_keys] : {std::tuple{&seq, &seq, false}, std::tuple{&seq, &four, false},
                                       std::tuple{&four, &seq, true}}) {
    const std::vector<int32_t> want = TileList(q->offsets, k->offsets, own_keys);
    const std::vector<int32_t>& own = own_keys ? k->offsets : q->offsets;
    std::vector<int32_t> prefix(own.size(), 0);
    for (size_t b = 0; b + 1 < own.size(); ++b) prefix[b + 1] = prefix[b] + (own[b + 1] - own[b] + kTile - 1) / kTile;
    std::vector<int32_t> got(want.size(), -7);
    RunGrid(static_cast<unsigned>(own.size() - 1), 1, 1,
            [&] { WriteTilesKernel(q->offsets.data(), k->offsets.data(), prefix.data(), got.data()); });
    EXPECT_EQ(got, want) << (own_keys ? "keys" : "queries");
  }
}

TEST(TrainGdpaEmulated, WideValueRowsGiveTheDenseResults) {
  for (const Case& c : Cases()) {
    RunWideValueCase<32, float>(c);
    RunWideValueCase<16, bf16>(c);
    RunWideValueCase<64, bf16>(c);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace gemtb::gpu::train::tc
