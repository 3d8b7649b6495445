// The trainer's attention (gpu/train/gdpa.h) against the reference model's own GdpaForward /
// GdpaBackward (reference/model/gdpa.h) evaluated per sample in fp64 on the same fp32 inputs, RoPE
// applied around both (on the host in fp32 for the GPU's inputs and gradients; the GPU's own RoPE,
// fused with the QK-norm, is train_qk_norm_rope_test.cc's):
// the model's three uses (PMA's few seeds over jagged keys, cross-attention to n_s keys, windowed /
// block / unmasked self-attention with RoPE) at heads x dh = 2x16, 4x32, 2x64, batches with empty
// samples and one 2050-row sample, and the GEM shape at 4096 samples; the same bytes on a second run;
// bad shapes refused by name before any device memory is touched.
//
// Bound: |gpu - ref| <= 1e-4 |ref| + 1e-5 rms(ref over the element's sample) per element of o, dq,
// dk, dv. Each element is a sequential fp32 sum of up to 2050 terms whose scores are 16..64-term fp32
// dot products; their rounding errors grow with the sum's length, relative to the size of that
// sample's sums (hence the floor per sample: one long sample's rows are ~6x a short one's), and
// elements that cancel to near 0 fail any bound relative to themselves alone (hence the floor). On
// the H200 the largest error is 0.49 of this bound (PMA's dk at dh 64: two terms, each scaled by
// 64-term fp32 dot products), 0.35 or less elsewhere; relative L2 errors are below 1e-6. RoPE's
// rotated q and k (the host's fp32 RoPE): 1e-6 |ref| + 1e-6 rms (three rounded operations).
#include "gpu/train/gdpa.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "reference/model/gdpa.h"
#include "tests/gpu/train_test_util.h"

namespace gemtb::gpu::train {
namespace {

using test::DeviceArray;
using test::HaveSm90;

constexpr int kLong = 2050;  // the long sample's rows

struct Case {
  std::string name;
  int heads = 0, dh = 0, window = -1, block = 0;
  float post_scale = 1.0f;
  bool rope = false;
  std::vector<int> lq, lk;  // per sample
};

struct Inputs {
  std::vector<int32_t> q_offsets, k_offsets;
  int32_t max_q = 0, max_k = 0;
  std::vector<float> q, k, v, d_o, table;
};

// What a run yields: q and k after RoPE (as read by the attention), o, and the inputs' gradients.
template <typename T>
struct Outputs {
  std::vector<T> q_rot, k_rot, o, dq, dk, dv;
};

std::vector<float> RandomFloats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(normal(rng));
  return v;
}

std::vector<int32_t> Offsets(const std::vector<int>& lengths, int32_t* max_len) {
  std::vector<int32_t> offsets{0};
  *max_len = 0;
  for (int n : lengths) {
    offsets.push_back(offsets.back() + n);
    *max_len = std::max(*max_len, n);
  }
  return offsets;
}

Inputs MakeInputs(const Case& c, uint64_t seed) {
  Inputs in;
  in.q_offsets = Offsets(c.lq, &in.max_q);
  in.k_offsets = Offsets(c.lk, &in.max_k);
  const size_t width = static_cast<size_t>(c.heads) * c.dh;
  const size_t nq = in.q_offsets.back() * width, nk = in.k_offsets.back() * width;
  // Unit-RMS q and k per head, as the QK-norm leaves them.
  in.q = RandomFloats(nq, seed);
  in.k = RandomFloats(nk, seed + 1);
  in.v = RandomFloats(nk, seed + 2);
  in.d_o = RandomFloats(nq, seed + 3);
  in.table = reference::model::RopeTable<float>(std::max(1, std::max(in.max_q, in.max_k)), c.dh);
  return in;
}

// Per sample, in fp64: RoPE on q and k (where the case has it), GdpaForward, GdpaBackward from zeros,
// RoPE's transpose on dq and dk.
Outputs<double> Reference(const Case& c, const Inputs& in) {
  const size_t width = static_cast<size_t>(c.heads) * c.dh;
  std::vector<double> q(in.q.begin(), in.q.end()), k(in.k.begin(), in.k.end()), v(in.v.begin(), in.v.end()),
      d_o(in.d_o.begin(), in.d_o.end()), table(in.table.begin(), in.table.end());
  std::vector<double> o(q.size()), dq(q.size(), 0.0), dk(k.size(), 0.0), dv(k.size(), 0.0);
  for (size_t b = 0; b < c.lq.size(); ++b) {
    const size_t qa = in.q_offsets[b] * width, ka = in.k_offsets[b] * width;
    reference::model::GdpaShape s;
    s.lq = c.lq[b], s.lk = c.lk[b], s.heads = c.heads, s.dh = c.dh, s.window = c.window, s.block = c.block;
    s.post_scale = c.post_scale;
    if (c.rope) {
      reference::model::RopeForward(table.data(), s.lq, s.heads, s.dh, q.data() + qa);
      reference::model::RopeForward(table.data(), s.lk, s.heads, s.dh, k.data() + ka);
    }
    reference::model::GdpaForward(s, q.data() + qa, k.data() + ka, v.data() + ka, o.data() + qa);
    reference::model::GdpaBackward(s, q.data() + qa, k.data() + ka, v.data() + ka, d_o.data() + qa, dq.data() + qa,
                                   dk.data() + ka, dv.data() + ka);
    if (c.rope) {
      reference::model::RopeBackward(table.data(), s.lq, s.heads, s.dh, dq.data() + qa);
      reference::model::RopeBackward(table.data(), s.lk, s.heads, s.dh, dk.data() + ka);
    }
  }
  return Outputs<double>{q, k, o, dq, dk, dv};
}

// The same chain on the device; o, dq, dk, dv start as NaN so that a row left unwritten shows.
struct DeviceRun {
  Outputs<float> out;
  bool ok = true;
};

// RoPE (or its transpose) in fp32 on the host, per sample, in place on rows of heads x dh.
void HostRope(const Case& c, const Inputs& in, const std::vector<int32_t>& offsets, bool transpose,
              std::vector<float>& x) {
  const size_t width = static_cast<size_t>(c.heads) * c.dh;
  for (size_t b = 0; b + 1 < offsets.size(); ++b) {
    float* at = x.data() + offsets[b] * width;
    const int n = offsets[b + 1] - offsets[b];
    if (transpose) {
      reference::model::RopeBackward(in.table.data(), n, c.heads, c.dh, at);
    } else {
      reference::model::RopeForward(in.table.data(), n, c.heads, c.dh, at);
    }
  }
}

DeviceRun RunGpu(const Case& c, const Inputs& in) {
  const size_t nq = in.q.size(), nk = in.k.size();
  const std::vector<float> nan_q(nq, std::numeric_limits<float>::quiet_NaN());
  const std::vector<float> nan_k(nk, std::numeric_limits<float>::quiet_NaN());
  std::vector<float> q_in = in.q, k_in = in.k;
  if (c.rope) {
    HostRope(c, in, in.q_offsets, false, q_in);
    HostRope(c, in, in.k_offsets, false, k_in);
  }
  DeviceArray<int32_t> q_offsets(in.q_offsets), k_offsets(in.k_offsets);
  DeviceArray<float> q(q_in), k(k_in), v(in.v), d_o(in.d_o);
  DeviceArray<float> o(nan_q), dq(nan_q), dk(nan_k), dv(nan_k);
  GdpaBatch b;
  b.batch = static_cast<int64_t>(c.lq.size());
  b.heads = c.heads, b.dh = c.dh, b.window = c.window, b.block = c.block, b.post_scale = c.post_scale;
  b.q_offsets = q_offsets.ptr, b.k_offsets = k_offsets.ptr, b.max_q = in.max_q, b.max_k = in.max_k;
  DeviceRun run;
  auto check = [&run](const absl::Status& s, const char* what) {
    EXPECT_TRUE(s.ok()) << what << ": " << s;
    run.ok = run.ok && s.ok();
  };
  check(GdpaForward(b, q.ptr, k.ptr, v.ptr, o.ptr, nullptr), "GdpaForward");
  check(GdpaBackward(b, q.ptr, k.ptr, v.ptr, d_o.ptr, dq.ptr, dk.ptr, dv.ptr, nullptr), "GdpaBackward");
  const cudaError_t e = cudaDeviceSynchronize();
  EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  run.ok = run.ok && e == cudaSuccess;
  run.out.q_rot = q.Get(nq);
  run.out.k_rot = k.Get(nk);
  run.out.o = o.Get(nq);
  run.out.dq = dq.Get(nq);
  run.out.dk = dk.Get(nk);
  run.out.dv = dv.Get(nk);
  if (c.rope) {
    HostRope(c, in, in.q_offsets, true, run.out.dq);
    HostRope(c, in, in.k_offsets, true, run.out.dk);
  }
  return run;
}

// The bound of the header comment, the floor from each sample's own rows (rows [offsets[b],
// offsets[b+1]) of `width` values), and what was seen: the largest |gpu - ref| over its sample's rms
// and over its bound, and the relative L2 error of the whole tensor.
void Compare(const std::vector<float>& got, const std::vector<double>& want, const std::vector<int32_t>& offsets,
             size_t width, double rel, double of_rms, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  double max_of_rms = 0, max_of_bound = 0, err2 = 0, ref2 = 0;
  for (size_t b = 0; b + 1 < offsets.size(); ++b) {
    const size_t from = offsets[b] * width, to = offsets[b + 1] * width;
    double sum2 = 0;
    for (size_t e = from; e < to; ++e) sum2 += want[e] * want[e];
    const double rms = to > from ? std::sqrt(sum2 / static_cast<double>(to - from)) : 0.0;
    for (size_t e = from; e < to; ++e) {
      const double d = std::fabs(got[e] - want[e]), bound = rel * std::fabs(want[e]) + of_rms * rms;
      if (!(d <= bound) && bad++ < 5) {
        ADD_FAILURE() << what << "[" << e << "] (sample " << b << "): " << got[e] << ", want " << want[e];
      }
      if (rms > 0) max_of_rms = std::max(max_of_rms, d / rms);
      if (bound > 0) max_of_bound = std::max(max_of_bound, d / bound);
      err2 += d * d;
      ref2 += want[e] * want[e];
    }
  }
  EXPECT_EQ(bad, 0) << what;
  std::cout << what << ": max |gpu-ref|/rms(sample) " << max_of_rms << ", max |gpu-ref|/bound " << max_of_bound
            << ", relative L2 " << (ref2 > 0 ? std::sqrt(err2 / ref2) : 0.0) << "\n";
}

bool SameBytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Lengths drawn uniformly from [lo, hi], sample 3 empty, sample 7 kLong.
std::vector<int> Jagged(int samples, int lo, int hi, int long_len, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> len(lo, hi);
  std::vector<int> lengths(samples);
  for (int& n : lengths) n = len(rng);
  lengths[3] = 0;
  if (long_len > 0) lengths[7] = long_len;
  return lengths;
}

Case Named(const std::string& name, int heads, int dh) {
  Case c;
  c.name = name;
  c.heads = heads;
  c.dh = dh;
  return c;
}

std::vector<Case> Cases() {
  struct HeadShape {
    int heads, dh;
  };
  std::vector<Case> cases;
  constexpr int kSamples = 40;
  int seed = 10;
  int n_s = 1;  // 2, 3, 4 in turn
  for (const HeadShape hs : {HeadShape{2, 16}, HeadShape{4, 32}, HeadShape{2, 64}}) {
    ++n_s;
    const std::string shape = " heads=" + std::to_string(hs.heads) + " dh=" + std::to_string(hs.dh);
    for (int seeds : {2, 4}) {  // PMA: the same few query rows per sample (one with no keys), keys jagged
      Case c = Named("pma lq=" + std::to_string(seeds) + shape, hs.heads, hs.dh);
      c.post_scale = 1.0f / 130;
      c.lk = Jagged(kSamples, 2, 130, kLong, ++seed);
      c.lq.assign(kSamples, seeds);
      cases.push_back(c);
    }
    {  // cross-attention: jagged queries (one empty, one long) to n_s keys
      Case c = Named("cross" + shape, hs.heads, hs.dh);
      c.post_scale = 1.0f / static_cast<float>(n_s);
      c.lq = Jagged(kSamples, 1, 130, kLong, ++seed);
      c.lk.assign(kSamples, n_s);
      cases.push_back(c);
    }
    for (const auto& [mask, window, block] : {std::tuple<const char*, int, int>{"window=16", 16, 0},
                                              std::tuple<const char*, int, int>{"block=8", 0, 8},
                                              std::tuple<const char*, int, int>{"unmasked", -1, 0}}) {
      Case c = Named(std::string("self rope ") + mask + shape, hs.heads, hs.dh);
      c.window = window;
      c.block = block;
      c.post_scale = 1.0f / 16;
      c.rope = true;
      c.lq = Jagged(kSamples, 1, 130, kLong, ++seed);
      c.lk = c.lq;
      cases.push_back(c);
    }
  }
  Case gem = Named("pma lq=2 heads=2 dh=16 x4096 samples", 2, 16);
  gem.post_scale = 1.0f / 130;
  gem.lk = Jagged(4096, 2, 130, 0, ++seed);
  gem.lq.assign(4096, 2);
  cases.push_back(gem);
  return cases;
}

TEST(TrainGdpa, ShapesItCannotTakeAreRefusedByNameBeforeTouchingTheDevice) {
  // Pointers no kernel may read: a refused call must return before any launch or copy.
  const auto* bogus_offsets = reinterpret_cast<const int32_t*>(uintptr_t{64});
  auto* bogus = reinterpret_cast<float*>(uintptr_t{128});
  GdpaBatch good;
  good.batch = 3, good.heads = 2, good.dh = 16, good.max_q = 4, good.max_k = 130;
  good.q_offsets = bogus_offsets, good.k_offsets = bogus_offsets;
  EXPECT_TRUE(ValidateGdpaBatch(good).ok());
  auto refused = [&](GdpaBatch b, const std::string& name) {
    const absl::Status v = ValidateGdpaBatch(b);
    EXPECT_EQ(v.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_NE(v.message().find(name), std::string::npos) << v;
    const absl::Status f = GdpaForward(b, bogus, bogus, bogus, bogus, nullptr);
    EXPECT_NE(f.message().find(name), std::string::npos) << f;
    const absl::Status g = GdpaBackward(b, bogus, bogus, bogus, bogus, bogus, bogus, bogus, nullptr);
    EXPECT_NE(g.message().find(name), std::string::npos) << g;
  };
  GdpaBatch b = good;
  b.dh = 24;
  refused(b, "dh=24");
  b = good, b.dh = 128;
  refused(b, "dh=128");
  b = good, b.heads = 0;
  refused(b, "heads=0");
  b = good, b.heads = 65536;
  refused(b, "heads=65536");
  b = good, b.batch = -1;
  refused(b, "batch=-1");
  b = good, b.batch = int64_t{1} << 31;
  refused(b, "batch=2147483648");
  b = good, b.window = -2;
  refused(b, "window=-2");
  b = good, b.block = -1;
  refused(b, "block=-1");
  b = good, b.max_q = -1;
  refused(b, "max_q=-1");
  b = good, b.max_k = (1 << 20) + 1;
  refused(b, "max_k=1048577");
  b = good, b.v_ld = 31;  // narrower than heads * dh = 32
  refused(b, "v_ld=31");
  b = good, b.k_tiles.entries = bogus_offsets, b.k_tiles.count = -1;
  refused(b, "k_tiles.count=-1");
  b = good, b.q_tiles.entries = reinterpret_cast<const int32_t*>(uintptr_t{68}), b.q_tiles.count = 3;
  refused(b, "q_tiles.entries");
  // A wider v row is the tensor-core kernels' layout; the fp32 kernels refuse it by name.
  b = good, b.v_ld = 64;
  EXPECT_TRUE(ValidateGdpaBatch(b).ok());
  EXPECT_NE(GdpaForward(b, bogus, bogus, bogus, bogus, nullptr).message().find("v_ld=64"), std::string::npos);
  EXPECT_NE(GdpaBackward(b, bogus, bogus, bogus, bogus, bogus, bogus, bogus, nullptr).message().find("v_ld=64"),
            std::string::npos);
  b = good, b.post_scale = std::numeric_limits<float>::infinity();
  refused(b, "post_scale=inf");
  b = good, b.q_offsets = nullptr;
  refused(b, "q_offsets=null");
  b = good, b.k_offsets = nullptr;
  refused(b, "k_offsets=null");
  // Null tensors, named.
  EXPECT_NE(GdpaForward(good, nullptr, bogus, bogus, bogus, nullptr).message().find("q=null"), std::string::npos);
  EXPECT_NE(GdpaForward(good, bogus, bogus, nullptr, bogus, nullptr).message().find("v=null"), std::string::npos);
  EXPECT_NE(GdpaBackward(good, bogus, bogus, bogus, nullptr, bogus, bogus, bogus, nullptr).message().find("d_o=null"),
            std::string::npos);
  EXPECT_NE(GdpaBackward(good, bogus, bogus, bogus, bogus, bogus, nullptr, bogus, nullptr).message().find("dk=null"),
            std::string::npos);
}

TEST(TrainGdpa, MatchesTheReferenceInFp64AndRepeatsItsBytes) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  uint64_t seed = 100;
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    const Inputs in = MakeInputs(c, seed += 10);
    const Outputs<double> want = Reference(c, in);
    const DeviceRun first = RunGpu(c, in);
    ASSERT_TRUE(first.ok);
    const Outputs<float>& got = first.out;
    const size_t width = static_cast<size_t>(c.heads) * c.dh;
    if (c.rope) {
      Compare(got.q_rot, want.q_rot, in.q_offsets, width, 1e-6, 1e-6, c.name + " rope q");
      Compare(got.k_rot, want.k_rot, in.k_offsets, width, 1e-6, 1e-6, c.name + " rope k");
    }
    Compare(got.o, want.o, in.q_offsets, width, 1e-4, 1e-5, c.name + " o");
    Compare(got.dq, want.dq, in.q_offsets, width, 1e-4, 1e-5, c.name + " dq");
    Compare(got.dk, want.dk, in.k_offsets, width, 1e-4, 1e-5, c.name + " dk");
    Compare(got.dv, want.dv, in.k_offsets, width, 1e-4, 1e-5, c.name + " dv");

    const DeviceRun second = RunGpu(c, in);
    ASSERT_TRUE(second.ok);
    EXPECT_TRUE(SameBytes(second.out.o, got.o)) << c.name << " o";
    EXPECT_TRUE(SameBytes(second.out.dq, got.dq)) << c.name << " dq";
    EXPECT_TRUE(SameBytes(second.out.dk, got.dk)) << c.name << " dk";
    EXPECT_TRUE(SameBytes(second.out.dv, got.dv)) << c.name << " dv";
  }
}

}  // namespace
}  // namespace gemtb::gpu::train
