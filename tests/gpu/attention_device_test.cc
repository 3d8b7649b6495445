// The CUDA attention kernels (gpu/attention/api.h): the GPU criteria on random cases of every
// family (through `gemtb check attention`'s own code, with the kernels ChooseKernels picks) and on
// every head dim (16, 32, 64, 128) in both input types, every kernel an override can name against
// the mma.sync kernels on the shapes it takes, the kernels that replace each other on a shape
// against each other (stored dS against the recompute, the fused dQ against the chained
// recompute, the split and small forwards against the TMA and split ones), bitwise determinism of
// the backward, AttentionOptions::tanh_approx (through the check, and changing only silu and
// gelu_tanh), exact outputs of rows without keys, and rejection by name of what the kernels do
// not run. Tests that need a GPU skip (and show as skipped) without an sm_90
// device; the rejection tests run anywhere.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gpu/attention/api.h"
#include "gpu/attention/params.h"
#include "model/numerics/float_formats.h"
#include "tests/testing/attention_cases.h"
#include "tests/testing/status_matchers.h"
#include "tools/check/attention_check.h"
#include "tools/check/attention_gpu.h"
#include "tools/gemtb/command.h"
#include "tools/gemtb/gpu_case.h"

namespace gemtb {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

// Prints why there is no GPU (once per test) and returns false then.
bool HaveGpu() {
  const absl::Status s = gpu::DeviceAvailable();
  if (!s.ok()) std::cout << "no GPU: " << s << "\n";
  return s.ok();
}

// What the small and the Hopper shapes below share: GQA 4 query heads on 2 K/V heads, Dqk = Dv = d,
// bf16 inputs.
check::CaseShape GqaShape(Activation act, MaskKind mask, uint64_t seed, int64_t d) {
  check::CaseShape shape;
  shape.heads = 4;
  shape.kv_heads = 2;
  shape.dqk = shape.dv = d;
  shape.options.act = act;
  shape.options.mask = mask;
  shape.input_type = ElementType::kBFloat16;
  shape.value_seed = seed;
  return shape;
}

// Partial and multi-step tiles, an empty and a one-key sequence, kv_index, GQA.
check::CaseShape SmallShape(uint64_t seed, Activation act, MaskKind mask, int64_t d) {
  check::CaseShape shape = GqaShape(act, mask, seed, d);
  shape.q_lengths = {5, 70, 0, 130};
  shape.kv_lengths = {9, 1, 64};
  shape.kv_index = {2, 0, 1, 2};
  shape.options.window_left = 7;
  shape.options.window_right = 3;
  shape.options.block = 16;
  return shape;
}

check::AttentionCase SmallCase(uint64_t seed, Activation act, MaskKind mask, int64_t d = 64) {
  return check::BuildCase(SmallShape(seed, act, mask, d));
}

// The shape the Hopper kernels' comparison tests share (D = 128, GQA 4/2, bf16, a 150/20 window
// where the mask is one): two sequences with several partial K/V steps and tiles, one empty, one
// reading a one-key sequence. Tests of broadcast_q replace the lengths.
check::CaseShape HopperShape(Activation act, MaskKind mask, uint64_t seed) {
  check::CaseShape shape = GqaShape(act, mask, seed, 128);
  shape.q_lengths = {5, 300, 0, 130};
  shape.kv_lengths = {9, 1, 300};
  shape.kv_index = {2, 2, 1, 0};
  shape.options.window_left = 150;
  shape.options.window_right = 20;
  return shape;
}

// The GPU call of case c with cotangent d_o, under c's options or the ones given.
cli::GpuCall CallOf(const check::AttentionCase& c, const std::vector<double>& d_o, const AttentionOptions& options) {
  return cli::MakeGpuCall(c.View(), options, d_o, {check::OutputRows(c), c.heads(), c.dv()});
}
cli::GpuCall CallOf(const check::AttentionCase& c, const std::vector<double>& d_o) {
  return CallOf(c, d_o, c.options);
}

TEST(GpuAttention, CheckCommandPassesOnRandomCasesOfEveryFamily) {
  if (!HaveGpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  EXPECT_EQ(cli::RunCheckAttention({"--cases", "12", "--seed", "20", "--max-length", "200"}), 0);
}

// Every head dim the kernels are built for (16 and 32 run only in the mma.sync kernels, 128 in the
// Hopper ones by default), in both input types, on every mask and on softmax and pointwise acts:
// the check's criteria against the oracle, on the small shape (partial tiles, an empty and a
// one-key sequence, GQA, kv_index).
TEST(GpuAttention, EveryHeadDimPassesTheCriteriaInBothInputTypes) {
  if (!HaveGpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  const Activation acts[] = {Activation::kSoftmax, Activation::kSilu, Activation::kGeluTanh, Activation::kIdentity};
  const MaskKind masks[] = {MaskKind::kNone, MaskKind::kCausal, MaskKind::kWindow, MaskKind::kBlock};
  uint64_t seed = 70;
  for (const int d : gpu::kKernelHeadDims) {
    for (const ElementType type : {ElementType::kBFloat16, ElementType::kFloat16}) {
      for (const Activation act : acts) {
        for (const MaskKind mask : masks) {
          check::CaseShape shape = SmallShape(++seed, act, mask, d);
          shape.input_type = type;
          const check::AttentionCase c = check::BuildCase(shape);
          const std::vector<double> d_o = check::RandomCotangent(c, seed);
          const check::GpuOutputs got = check::RunGpu(c, d_o);
          const std::string what = check::Describe(c);
          ASSERT_TRUE(got.status.ok()) << what << ": " << got.status;
          const check::CaseResult r = check::Judge(c, d_o, got);
          EXPECT_TRUE(r.pass && !r.excused) << what << ": " << absl::StrJoin(r.failures, "; ");
        }
      }
    }
  }
}

double RelL2Bf16(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b);  // below

// The forward of `call` with the forward kernel `kernel` (kernel_policy.h).
absl::StatusOr<gpu::ForwardResult> ForwardWith(cli::GpuCall& call, gpu::ForwardKernelKind kernel) {
  call.args.kernels = {kernel, gpu::BackwardKernelKind::kAuto};
  return gpu::Forward(call.args);
}

// The largest |a - b| over LSE entries (float), +inf where one is infinite and the other is not.
double MaxLseDiff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] != b[i]) return std::numeric_limits<double>::infinity();
      continue;
    }
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return worst;
}

// PMA-like lengths under broadcast_q: `rows` query rows shared by one- to six-step key ranges, an
// empty and a one-key sequence among them.
check::CaseShape BroadcastShape(Activation act, MaskKind mask, uint64_t seed, int64_t rows) {
  check::CaseShape shape = HopperShape(act, mask, seed);
  shape.q_lengths = {rows};
  shape.kv_lengths = {700, 9, 130, 0, 256, 1, 383};
  shape.kv_index = {};
  shape.options.broadcast_q = true;
  return shape;
}

// Every Hopper forward against the mma.sync forward, on every act family and mask: on full 128-row
// tiles (GQA, partial steps and tiles, an empty sequence) the cp.async and TMA kernels, and on
// broadcast_q's short tiles of 40 and 32 rows also the split and small kernels (pointwise acts).
// The kernels round P to the input type at different points of the same sums, so O agrees to a
// rel-L2 below 1e-2 and LSE to 1e-2 (a wrong tile, mask or row gives O(1)); each repeats its bits.
TEST(GpuAttention, EveryHopperForwardMatchesTheMmaSyncForward) {
  if (!HaveGpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  using gpu::ForwardKernelKind;
  const Activation acts[] = {Activation::kSoftmax, Activation::kSilu, Activation::kGeluTanh, Activation::kGelu,
                             Activation::kRelu};
  const MaskKind masks[] = {MaskKind::kNone, MaskKind::kCausal, MaskKind::kWindow, MaskKind::kBlock};
  for (const Activation act : acts) {
    for (const MaskKind mask : masks) {
      struct Shape {
        check::CaseShape shape;
        std::vector<ForwardKernelKind> kernels;
      };
      std::vector<Shape> shapes;
      shapes.push_back({HopperShape(act, mask, 51),
                        {ForwardKernelKind::kAuto, ForwardKernelKind::kHopperWs, ForwardKernelKind::kHopperTma}});
      if (act != Activation::kSoftmax) {
        shapes.push_back({BroadcastShape(act, mask, 52, 40),
                          {ForwardKernelKind::kAuto, ForwardKernelKind::kHopperSplit, ForwardKernelKind::kHopperTma}});
        shapes.push_back({BroadcastShape(act, mask, 53, 32),
                          {ForwardKernelKind::kAuto, ForwardKernelKind::kHopperSmall, ForwardKernelKind::kHopperSplit,
                           ForwardKernelKind::kHopperWs}});
      }
      for (Shape& sh : shapes) {
        sh.shape.options.block = 48;
        const check::AttentionCase c = check::BuildCase(sh.shape);
        cli::GpuCall call = CallOf(c, check::RandomCotangent(c, 54));
        absl::StatusOr<gpu::ForwardResult> ref = ForwardWith(call, ForwardKernelKind::kMmaSync);
        ASSERT_TRUE(ref.ok()) << ref.status();
        double max_abs = 0;
        for (uint16_t b : ref->o) max_abs = std::max(max_abs, std::fabs(static_cast<double>(numerics::Bf16BitsToFloat(b))));
        ASSERT_GT(max_abs, 0.0);
        for (const ForwardKernelKind k : sh.kernels) {
          const std::string what =
              absl::StrCat(std::string(ActivationName(act)), " mask ", static_cast<int>(mask), " q rows ",
                           sh.shape.q_lengths[0], " kernel ", gpu::ForwardKernelName(k));
          absl::StatusOr<gpu::ForwardResult> got = ForwardWith(call, k);
          ASSERT_TRUE(got.ok()) << what << ": " << got.status();
          absl::StatusOr<gpu::ForwardResult> again = ForwardWith(call, k);
          ASSERT_TRUE(again.ok()) << what << ": " << again.status();
          const double rel = RelL2Bf16(ref->o, got->o);
          std::cout << what << ": O rel-L2 vs mma_sync " << rel << "\n";
          EXPECT_LT(rel, 1e-2) << what;
          EXPECT_LE(MaxLseDiff(ref->lse, got->lse), 1e-2) << what;
          EXPECT_EQ(again->o, got->o) << what;
          EXPECT_EQ(again->lse, got->lse) << what;
        }
      }
    }
  }
}

// A named kernel that cannot run the call is an error naming it, not a substitute.
TEST(GpuAttention, OverrideThatCannotRunTheCallIsAnError) {
  if (!HaveGpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  {
    const check::AttentionCase c = SmallCase(1, Activation::kSilu, MaskKind::kNone, 64);
    cli::GpuCall call = CallOf(c, check::RandomCotangent(c, 2));
    EXPECT_THAT(ForwardWith(call, gpu::ForwardKernelKind::kHopperTma),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("forward kernel=hopper_tma")));
  }
  {
    const check::AttentionCase c = check::BuildCase(HopperShape(Activation::kSoftmax, MaskKind::kNone, 3));
    cli::GpuCall call = CallOf(c, check::RandomCotangent(c, 4));
    EXPECT_THAT(ForwardWith(call, gpu::ForwardKernelKind::kHopperSplit),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("forward kernel=hopper_split")));
    absl::StatusOr<gpu::ForwardResult> fwd = ForwardWith(call, gpu::ForwardKernelKind::kAuto);
    ASSERT_TRUE(fwd.ok()) << fwd.status();
    call.args.kernels.backward = gpu::BackwardKernelKind::kHopperFusedDq;  // needs broadcast_q
    EXPECT_THAT(gpu::Backward(call.args, call.DoView(), *fwd),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("backward kernel=hopper_fused_dq")));
  }
}

// The split forward (tiles of <= 64 query rows, pointwise acts: both consumers on every step, 64
// keys each) against the TMA forward on PMA-like shapes (40 query rows, one- to six-step key
// ranges): P is the same, O differs only by the fp32 summation order (two partial sums), so it lies
// within a bf16 rounding step or two of the TMA forward's.
TEST(GpuAttention, SplitForwardMatchesTheTmaForwardOnShortTiles) {
  if (!HaveGpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  const auto value = [](uint16_t bits) { return static_cast<double>(numerics::Bf16BitsToFloat(bits)); };
  const std::pair<Activation, MaskKind> kinds[] = {{Activation::kSilu, MaskKind::kNone},
                                                  {Activation::kGeluTanh, MaskKind::kCausal},
                                                  {Activation::kRelu, MaskKind::kWindow}};
  for (const auto& [act, mask] : kinds) {
    const check::AttentionCase c = check::BuildCase(BroadcastShape(act, mask, 9, 40));
    cli::GpuCall call = CallOf(c, check::RandomCotangent(c, 10));
    absl::StatusOr<gpu::ForwardResult> tma = ForwardWith(call, gpu::ForwardKernelKind::kHopperTma);
    ASSERT_TRUE(tma.ok()) << tma.status();
    absl::StatusOr<gpu::ForwardResult> split = ForwardWith(call, gpu::ForwardKernelKind::kHopperSplit);
    ASSERT_TRUE(split.ok()) << split.status();
    double max_abs = 0;
    for (uint16_t b : tma->o) max_abs = std::max(max_abs, std::fabs(value(b)));
    ASSERT_GT(max_abs, 0.0);
    ASSERT_EQ(split->o.size(), tma->o.size());
    int64_t bad = 0;
    for (size_t i = 0; i < tma->o.size(); ++i) {
      const double a = value(tma->o[i]), b = value(split->o[i]);
      if (!(std::fabs(a - b) <= std::fabs(a) / 64 + 1e-4 * max_abs)) ++bad;
    }
    EXPECT_EQ(bad, 0) << "act " << static_cast<int>(act) << " mask " << static_cast<int>(mask);
  }
}

// The small forward (tiles of <= 32 query rows, pointwise acts) against the split kernel on
// PMA-like shapes (broadcast_q, 32 and 17 seeds, one- to eleven-step key ranges) and on
// per-sequence query tiles of 1 to 32 rows over many items: P is rounded the same way, O differs by
// the fp32 summation order; the small forward repeats its bits.
TEST(GpuAttention, SmallForwardMatchesTheSplitForwardOnSeedTiles) {
  if (!HaveGpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  const auto value = [](uint16_t bits) { return static_cast<double>(numerics::Bf16BitsToFloat(bits)); };
  std::vector<std::pair<std::string, check::CaseShape>> shapes;
  shapes.emplace_back("silu none 32 seeds", BroadcastShape(Activation::kSilu, MaskKind::kNone, 31, 32));
  shapes.emplace_back("gelu_tanh causal 32 seeds", BroadcastShape(Activation::kGeluTanh, MaskKind::kCausal, 31, 32));
  shapes.emplace_back("relu window 17 seeds", BroadcastShape(Activation::kRelu, MaskKind::kWindow, 31, 17));
  {
    std::mt19937_64 rng(41);
    const auto draw = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
    check::CaseShape shape = HopperShape(Activation::kSilu, MaskKind::kCausal, 43);
    shape.q_lengths.clear();
    shape.kv_lengths.clear();
    shape.kv_index = {};
    for (int i = 0; i < 900; ++i) {
      shape.kv_lengths.push_back(draw(0, 3) == 0 ? draw(0, 8) : draw(1, 400));
      shape.q_lengths.push_back(draw(1, 32));
    }
    shapes.emplace_back("silu causal 900 sequences of 1..32 rows", shape);
  }
  for (const auto& [what, shape] : shapes) {
    const check::AttentionCase c = check::BuildCase(shape);
    cli::GpuCall call = CallOf(c, check::RandomCotangent(c, 32));
    absl::StatusOr<gpu::ForwardResult> split = ForwardWith(call, gpu::ForwardKernelKind::kHopperSplit);
    ASSERT_TRUE(split.ok()) << split.status();
    absl::StatusOr<gpu::ForwardResult> small = ForwardWith(call, gpu::ForwardKernelKind::kHopperSmall);
    ASSERT_TRUE(small.ok()) << small.status();
    absl::StatusOr<gpu::ForwardResult> again = ForwardWith(call, gpu::ForwardKernelKind::kHopperSmall);
    ASSERT_TRUE(again.ok()) << again.status();
    ASSERT_EQ(small->o.size(), split->o.size());
    double max_abs = 0;
    for (uint16_t b : split->o) max_abs = std::max(max_abs, std::fabs(value(b)));
    ASSERT_GT(max_abs, 0.0);
    int64_t bad = 0;
    for (size_t i = 0; i < split->o.size(); ++i) {
      const double a = value(split->o[i]), b = value(small->o[i]);
      if (!(std::fabs(a - b) <= std::fabs(a) / 64 + 1e-4 * max_abs)) ++bad;
    }
    std::cout << what << ": small vs split rel-L2 " << RelL2Bf16(split->o, small->o) << "\n";
    EXPECT_EQ(bad, 0) << what;
    EXPECT_EQ(again->o, small->o) << what;
  }
}

// AttentionOptions::tanh_approx: the GPU evaluates silu and gelu_tanh through tanh.approx while
// the oracle keeps the exact act; the GPU criteria must still hold, on every mask, on the
// persistent TMA forward, the split forward (short tiles) and the Hopper backward.
TEST(GpuAttention, CheckCommandPassesWithTanhApprox) {
  if (!HaveGpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  EXPECT_EQ(cli::RunCheckAttention({"--cases", "12", "--seed", "25", "--max-length", "300", "--family",
                                    "silu/none,silu/causal,silu/window,silu/block,gelu_tanh/none,"
                                    "gelu_tanh/causal,gelu_tanh/window,gelu_tanh/block",
                                    "--tanh-approx"}),
            0);
}

// rel-L2 of b against a (bf16 bit patterns); a NaN or inf anywhere gives +inf.
double RelL2Bf16(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = numerics::Bf16BitsToFloat(a[i]), y = numerics::Bf16BitsToFloat(b[i]);
    if (!std::isfinite(x) || !std::isfinite(y)) return std::numeric_limits<double>::infinity();
    num += (x - y) * (x - y);
    den += x * x;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// The knob reaches the kernels: with tanh_approx, silu and gelu_tanh give other bits than without
// (close: rel-L2 of O and of every gradient below 1e-2), on full 128-row tiles (the TMA forward) and
// on broadcast_q's 32-row tiles (the split forward); softmax and gelu (erf) ignore it, bit for bit.
TEST(GpuAttention, TanhApproxChangesOnlySiluAndGeluTanh) {
  if (!HaveGpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (const bool broadcast : {false, true}) {
    for (const Activation act : {Activation::kSilu, Activation::kGeluTanh, Activation::kSoftmax, Activation::kGelu}) {
      check::CaseShape shape = HopperShape(act, MaskKind::kNone, 31);
      if (broadcast) {
        shape.q_lengths = {32};
        shape.kv_lengths = {300, 129, 64};
        shape.kv_index = {};
        shape.options.broadcast_q = true;
      }
      const check::AttentionCase c = check::BuildCase(shape);
      const std::vector<double> d_o = check::RandomCotangent(c, 32);
      std::vector<uint16_t> out[2][4];  // [tanh_approx][O, dQ, dK, dV]
      for (const bool approx : {false, true}) {
        AttentionOptions options = c.options;
        options.tanh_approx = approx;
        const cli::GpuCall call = CallOf(c, d_o, options);
        absl::StatusOr<gpu::ForwardResult> fwd = gpu::Forward(call.args);
        ASSERT_TRUE(fwd.ok()) << fwd.status();
        absl::StatusOr<gpu::BackwardResult> bwd = gpu::Backward(call.args, call.DoView(), *fwd);
        ASSERT_TRUE(bwd.ok()) << bwd.status();
        out[approx][0] = fwd->o;
        out[approx][1] = bwd->dq;
        out[approx][2] = bwd->dk;
        out[approx][3] = bwd->dv;
      }
      const bool applies = act == Activation::kSilu || act == Activation::kGeluTanh;
      const char* names[4] = {"O", "dQ", "dK", "dV"};
      for (int t = 0; t < 4; ++t) {
        const std::string what =
            absl::StrCat("act ", std::string(ActivationName(act)), broadcast ? " broadcast_q " : " ", names[t]);
        const double rel = RelL2Bf16(out[0][t], out[1][t]);
        std::cout << what << ": rel-L2 tanh.approx vs exact " << rel << "\n";
        if (applies) {
          EXPECT_NE(out[0][t], out[1][t]) << what;
          EXPECT_LT(rel, 1e-2) << what;
        } else {
          EXPECT_EQ(out[0][t], out[1][t]) << what;
        }
      }
    }
  }
}

// The backward of `call` (forward result `fwd`) with the backward kernel `kernel` (kernel_policy.h).
absl::StatusOr<gpu::BackwardResult> BackwardWith(cli::GpuCall& call, const gpu::ForwardResult& fwd,
                                                 gpu::BackwardKernelKind kernel) {
  call.args.kernels = {gpu::ForwardKernelKind::kAuto, kernel};
  return gpu::Backward(call.args, call.DoView(), fwd);
}

// Every Hopper backward against the mma.sync backward on the same forward outputs, on every act
// family and mask: without broadcast_q (GQA) the recompute and the stored-dS kernels; under
// broadcast_q the chained recompute (GQA, 40 seeds; no GQA, 32 seeds) and the fused dQ (no GQA, 32
// seeds). dQ, dK and dV agree to a rel-L2 below 2e-2 (P and dS rounded at other points; a wrong
// tile, mask or sum gives O(1)).
TEST(GpuAttention, EveryHopperBackwardMatchesTheMmaSyncBackward) {
  if (!HaveGpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  using gpu::BackwardKernelKind;
  const Activation acts[] = {Activation::kSoftmax, Activation::kSilu, Activation::kGeluTanh, Activation::kRelu};
  const MaskKind masks[] = {MaskKind::kNone, MaskKind::kCausal, MaskKind::kWindow, MaskKind::kBlock};
  for (const Activation act : acts) {
    for (const MaskKind mask : masks) {
      struct Shape {
        std::string name;
        check::CaseShape shape;
        std::vector<BackwardKernelKind> kernels;
      };
      std::vector<Shape> shapes;
      shapes.push_back({"gqa", HopperShape(act, mask, 61),
                        {BackwardKernelKind::kAuto, BackwardKernelKind::kHopperRecompute, BackwardKernelKind::kHopperStoredDs}});
      shapes.push_back({"broadcast_q gqa 40 seeds", BroadcastShape(act, mask, 62, 40),
                        {BackwardKernelKind::kAuto, BackwardKernelKind::kHopperRecompute}});
      Shape fused{"broadcast_q 32 seeds", BroadcastShape(act, mask, 63, 32),
                  {BackwardKernelKind::kAuto, BackwardKernelKind::kHopperRecompute, BackwardKernelKind::kHopperFusedDq}};
      fused.shape.kv_heads = fused.shape.heads;
      shapes.push_back(fused);
      for (Shape& sh : shapes) {
        sh.shape.options.block = 48;
        const check::AttentionCase c = check::BuildCase(sh.shape);
        cli::GpuCall call = CallOf(c, check::RandomCotangent(c, 64));
        absl::StatusOr<gpu::ForwardResult> fwd = ForwardWith(call, gpu::ForwardKernelKind::kAuto);
        ASSERT_TRUE(fwd.ok()) << fwd.status();
        absl::StatusOr<gpu::BackwardResult> ref = BackwardWith(call, *fwd, BackwardKernelKind::kMmaSync);
        ASSERT_TRUE(ref.ok()) << ref.status();
        for (const BackwardKernelKind k : sh.kernels) {
          const std::string what = absl::StrCat(std::string(ActivationName(act)), " mask ", static_cast<int>(mask),
                                                " ", sh.name, " kernel ", gpu::BackwardKernelName(k));
          absl::StatusOr<gpu::BackwardResult> got = BackwardWith(call, *fwd, k);
          ASSERT_TRUE(got.ok()) << what << ": " << got.status();
          const double dq = RelL2Bf16(ref->dq, got->dq), dk = RelL2Bf16(ref->dk, got->dk),
                       dv = RelL2Bf16(ref->dv, got->dv);
          std::cout << what << ": rel-L2 vs mma_sync dq " << dq << " dk " << dk << " dv " << dv << "\n";
          EXPECT_LT(dq, 2e-2) << what;
          EXPECT_LT(dk, 2e-2) << what;
          EXPECT_LT(dv, 2e-2) << what;
        }
      }
    }
  }
}

// The stored-dS backward against the recompute backward. dQ multiplies the same rounded dS in the
// same key order but the two kernels form S with the operands swapped (Sᵀ = K Qᵀ against S = Q Kᵀ),
// so a dS element can round one ulp apart: rel-L2 within 4e-3 (bf16's ulp). dK/dV come from the
// same kernel: bitwise where no dK/dV segment's first row moved to a block boundary (no mask: every
// segment starts at row 0), within 4e-3 elsewhere (other row grouping over the steps). The stored
// path also repeats its bits run to run. Shapes: one- and multi-step tiles, partial blocks, GQA, a
// window whose segments start off the 64-row grid.
TEST(GpuAttention, StoredDsBackwardMatchesRecompute) {
  if (!HaveGpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  struct Kind {
    Activation act;
    MaskKind mask;
  };
  const Kind kinds[] = {{Activation::kSoftmax, MaskKind::kNone},
                        {Activation::kSilu, MaskKind::kWindow},
                        {Activation::kGeluTanh, MaskKind::kCausal},
                        {Activation::kSoftmax, MaskKind::kCausal}};
  for (const Kind& k : kinds) {
    const check::AttentionCase c = check::BuildCase(HopperShape(k.act, k.mask, 11));
    cli::GpuCall call = CallOf(c, check::RandomCotangent(c, 12));
    absl::StatusOr<gpu::ForwardResult> fwd = gpu::Forward(call.args);
    ASSERT_TRUE(fwd.ok()) << fwd.status();
    absl::StatusOr<gpu::BackwardResult> recompute = BackwardWith(call, *fwd, gpu::BackwardKernelKind::kHopperRecompute);
    ASSERT_TRUE(recompute.ok()) << recompute.status();
    absl::StatusOr<gpu::BackwardResult> stored = BackwardWith(call, *fwd, gpu::BackwardKernelKind::kHopperStoredDs);
    ASSERT_TRUE(stored.ok()) << stored.status();
    absl::StatusOr<gpu::BackwardResult> again = BackwardWith(call, *fwd, gpu::BackwardKernelKind::kHopperStoredDs);
    ASSERT_TRUE(again.ok()) << again.status();
    const std::string what = absl::StrCat("act ", static_cast<int>(k.act), " mask ", static_cast<int>(k.mask));
    EXPECT_LE(RelL2Bf16(recompute->dq, stored->dq), 4e-3) << what;
    EXPECT_LE(RelL2Bf16(recompute->dk, stored->dk), 4e-3) << what;
    EXPECT_LE(RelL2Bf16(recompute->dv, stored->dv), 4e-3) << what;
    std::cout << what << ": rel-L2 stored vs recompute dq " << RelL2Bf16(recompute->dq, stored->dq) << " dk "
              << RelL2Bf16(recompute->dk, stored->dk) << " dv " << RelL2Bf16(recompute->dv, stored->dv) << "\n";
    if (k.mask == MaskKind::kNone) {
      EXPECT_EQ(stored->dk, recompute->dk) << what;
      EXPECT_EQ(stored->dv, recompute->dv) << what;
    }
    EXPECT_EQ(again->dq, stored->dq) << what;
    EXPECT_EQ(again->dk, stored->dk) << what;
    EXPECT_EQ(again->dv, stored->dv) << what;
  }
}

// The fused-dQ backward (backward_hopper_fused_dq.cuh: broadcast_q, no GQA, <= 32 seeds; dQ from
// the dK/dV chain's dSᵀ, summed over the chains) against the chained recompute backward: dK and dV
// from the same pairs at 32 rows instead of 64 (rel-L2 printed, within 1e-5), dQ summed in another
// order (within 2e-3), and the fused kernel repeats its bits run to run. Shapes: 1, 17 and 32
// seeds; one- and multi-tile K/V sequences, partial tiles, an empty one; masks with and without
// full steps.
TEST(GpuAttention, FusedDqBackwardMatchesTheChainedBackward) {
  if (!HaveGpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  struct Kind {
    Activation act;
    MaskKind mask;
    int64_t seeds;
    bool tanh_approx;
  };
  const Kind kinds[] = {{Activation::kSilu, MaskKind::kNone, 32, false},
                        {Activation::kSoftmax, MaskKind::kNone, 17, false},
                        {Activation::kGeluTanh, MaskKind::kCausal, 32, false},
                        {Activation::kSilu, MaskKind::kWindow, 1, false},
                        {Activation::kSilu, MaskKind::kNone, 32, true}};
  for (const Kind& k : kinds) {
    check::CaseShape shape = HopperShape(k.act, k.mask, 21);
    shape.kv_heads = shape.heads;
    shape.q_lengths = {k.seeds};
    shape.kv_lengths = {300, 9, 130, 64, 0, 1, 200};
    shape.kv_index = {};
    shape.options.broadcast_q = true;
    shape.options.tanh_approx = k.tanh_approx;
    const check::AttentionCase c = check::BuildCase(shape);
    cli::GpuCall call = CallOf(c, check::RandomCotangent(c, 22));
    absl::StatusOr<gpu::ForwardResult> fwd = gpu::Forward(call.args);
    ASSERT_TRUE(fwd.ok()) << fwd.status();
    absl::StatusOr<gpu::BackwardResult> chained = BackwardWith(call, *fwd, gpu::BackwardKernelKind::kHopperRecompute);
    ASSERT_TRUE(chained.ok()) << chained.status();
    absl::StatusOr<gpu::BackwardResult> fused = BackwardWith(call, *fwd, gpu::BackwardKernelKind::kHopperFusedDq);
    ASSERT_TRUE(fused.ok()) << fused.status();
    absl::StatusOr<gpu::BackwardResult> again = BackwardWith(call, *fwd, gpu::BackwardKernelKind::kHopperFusedDq);
    ASSERT_TRUE(again.ok()) << again.status();
    const std::string what = absl::StrCat("act ", std::string(ActivationName(k.act)), " mask ",
                                          static_cast<int>(k.mask), " seeds ", k.seeds, " tanh_approx ",
                                          k.tanh_approx);
    const double dq = RelL2Bf16(chained->dq, fused->dq), dk = RelL2Bf16(chained->dk, fused->dk),
                 dv = RelL2Bf16(chained->dv, fused->dv);
    std::cout << what << ": rel-L2 fused vs chained dq " << dq << " dk " << dk << " dv " << dv << "\n";
    EXPECT_LE(dq, 2e-3) << what;
    EXPECT_LE(dk, 1e-5) << what;
    EXPECT_LE(dv, 1e-5) << what;
    EXPECT_EQ(again->dq, fused->dq) << what;
    EXPECT_EQ(again->dk, fused->dk) << what;
    EXPECT_EQ(again->dv, fused->dv) << what;
  }
}

TEST(GpuAttention, BackwardIsBitwiseIdenticalAcrossRuns) {
  if (!HaveGpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (const int d : gpu::kKernelHeadDims) {
    for (Activation act : {Activation::kSoftmax, Activation::kSilu}) {
      const check::AttentionCase c = SmallCase(3, act, MaskKind::kCausal, d);
      const std::string what = absl::StrCat("D=", d, " ", std::string(ActivationName(act)));
      const std::vector<double> d_o = check::RandomCotangent(c, 4);
      const cli::GpuCall call = CallOf(c, d_o);
      absl::StatusOr<gpu::ForwardResult> fwd = gpu::Forward(call.args);
      ASSERT_TRUE(fwd.ok()) << what << ": " << fwd.status();
      absl::StatusOr<gpu::BackwardResult> first = gpu::Backward(call.args, call.DoView(), *fwd);
      ASSERT_TRUE(first.ok()) << what << ": " << first.status();
      for (int rep = 0; rep < 3; ++rep) {
        absl::StatusOr<gpu::ForwardResult> fwd2 = gpu::Forward(call.args);
        ASSERT_TRUE(fwd2.ok()) << what << ": " << fwd2.status();
        EXPECT_EQ(fwd2->o, fwd->o) << what;
        EXPECT_EQ(fwd2->lse, fwd->lse) << what;
        absl::StatusOr<gpu::BackwardResult> again = gpu::Backward(call.args, call.DoView(), *fwd);
        ASSERT_TRUE(again.ok()) << what << ": " << again.status();
        EXPECT_EQ(again->dq, first->dq) << what;
        EXPECT_EQ(again->dk, first->dk) << what;
        EXPECT_EQ(again->dv, first->dv) << what;
      }
    }
  }
}

// Causal + bottom_right with Lq > Lk leaves the first Lq - Lk rows without keys: O = 0, LSE = -inf,
// zero gradients, no NaN (fully masked rows), at every head dim (128 takes the Hopper kernels).
TEST(GpuAttention, RowsWithoutKeysGiveZeroOutputsAndMinusInfinityLse) {
  if (!HaveGpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (const int d : gpu::kKernelHeadDims) {
    check::CaseShape shape;
    shape.q_lengths = {100};
    shape.kv_lengths = {30};
    shape.dqk = shape.dv = d;
    shape.options.mask = MaskKind::kCausal;
    shape.input_type = ElementType::kFloat16;
    shape.value_seed = 9;
    const check::AttentionCase c = check::BuildCase(shape);
    const std::vector<double> d_o = check::RandomCotangent(c, 10);
    const cli::GpuCall call = CallOf(c, d_o);
    absl::StatusOr<gpu::ForwardResult> fwd = gpu::Forward(call.args);
    ASSERT_TRUE(fwd.ok()) << "D=" << d << ": " << fwd.status();
    absl::StatusOr<gpu::BackwardResult> bwd = gpu::Backward(call.args, call.DoView(), *fwd);
    ASSERT_TRUE(bwd.ok()) << "D=" << d << ": " << bwd.status();
    const std::vector<double> o = cli::BitsToValues(fwd->o, c.input_type);
    const std::vector<double> dq = cli::BitsToValues(bwd->dq, c.input_type);
    for (int64_t i = 0; i < 100; ++i) {
      const bool empty = i < 70;
      EXPECT_EQ(std::isinf(fwd->lse[i]) && fwd->lse[i] < 0, empty) << "D=" << d << " row " << i;
      for (int64_t e = 0; e < d; ++e) {
        ASSERT_FALSE(std::isnan(o[i * d + e])) << "D=" << d << " row " << i;
        ASSERT_FALSE(std::isnan(dq[i * d + e])) << "D=" << d << " row " << i;
        if (empty) {
          EXPECT_EQ(o[i * d + e], 0.0) << "D=" << d << " row " << i;
          EXPECT_EQ(dq[i * d + e], 0.0) << "D=" << d << " row " << i;
        }
      }
    }
  }
}

// --- rejection (no GPU needed) ------------------------------------------------------------------

gpu::AttentionArgs ValidArgs(const cli::GpuCall& call) { return call.args; }

TEST(GpuAttentionCanRun, AcceptsTheSupportedFamily) {
  const check::AttentionCase c = SmallCase(1, Activation::kGeluTanh, MaskKind::kWindow);
  const cli::GpuCall call = CallOf(c, {});
  EXPECT_TRUE(gpu::CanRun(call.args).ok()) << gpu::CanRun(call.args);
}

TEST(GpuAttentionCanRun, RejectsBiasAndRopeByName) {
  const check::AttentionCase c = SmallCase(1, Activation::kSoftmax, MaskKind::kNone);
  const cli::GpuCall call = CallOf(c, {});
  const std::vector<float> table(10, 0.f);
  const struct {
    const char* name;
    gpu::HostTensor<float> gpu::AttentionArgs::*field;
  } cases[] = {{"bias_dense", &gpu::AttentionArgs::bias_dense}, {"bias_rel", &gpu::AttentionArgs::bias_rel},
               {"bias_ts", &gpu::AttentionArgs::bias_ts},       {"rope_q", &gpu::AttentionArgs::rope_q},
               {"rope_k", &gpu::AttentionArgs::rope_k},         {"rope_v", &gpu::AttentionArgs::rope_v}};
  for (const auto& x : cases) {
    gpu::AttentionArgs args = ValidArgs(call);
    args.*(x.field) = {table, {10}};
    EXPECT_THAT(gpu::CanRun(args), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(x.name)));
    EXPECT_THAT(gpu::Forward(args), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(x.name)));
  }
}

TEST(GpuAttentionCanRun, AcceptsEveryKernelHeadDimInBothInputTypes) {
  for (const int d : gpu::kKernelHeadDims) {
    for (const ElementType type : {ElementType::kBFloat16, ElementType::kFloat16}) {
      check::CaseShape shape = SmallShape(1, Activation::kSoftmax, MaskKind::kCausal, d);
      shape.input_type = type;
      const check::AttentionCase c = check::BuildCase(shape);
      EXPECT_TRUE(gpu::CanRun(CallOf(c, {}).args).ok()) << "D=" << d << ": " << gpu::CanRun(CallOf(c, {}).args);
    }
  }
}

// The check draws exactly the head dims the kernels run, so that every drawn case runs.
TEST(GpuAttentionCanRun, TheCheckDrawsTheKernelsHeadDims) {
  EXPECT_THAT(check::kCheckHeadDims, ::testing::ElementsAreArray(gpu::kKernelHeadDims));
}

TEST(GpuAttentionCanRun, RejectsUnsupportedDimsAndTypesByName) {
  for (const int d : {8, 48, 96, 256}) {
    const check::AttentionCase c = SmallCase(1, Activation::kSoftmax, MaskKind::kNone, d);
    EXPECT_THAT(gpu::CanRun(CallOf(c, {}).args),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         absl::StrCat("q: Dqk=", d, " is not supported by the GPU kernels (16, 32, 64 or 128)")));
  }
  {
    check::CaseShape shape;
    shape.q_lengths = shape.kv_lengths = {3};
    shape.dqk = 64;
    shape.dv = 128;
    shape.input_type = ElementType::kBFloat16;
    const check::AttentionCase c = check::BuildCase(shape);
    EXPECT_THAT(gpu::CanRun(CallOf(c, {}).args),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("Dv=128")));
  }
  {
    check::CaseShape shape;
    shape.q_lengths = shape.kv_lengths = {3};
    shape.dqk = shape.dv = 64;
    shape.input_type = ElementType::kFloat32;
    const check::AttentionCase c = check::BuildCase(shape);
    EXPECT_THAT(gpu::CanRun(CallOf(c, {}).args),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dtype: float32")));
  }
}

TEST(GpuAttentionCanRun, RejectsBadOffsetsAndIndicesLikeTheOracle) {
  const check::AttentionCase c = SmallCase(1, Activation::kSoftmax, MaskKind::kNone);
  const cli::GpuCall call = CallOf(c, {});
  {
    gpu::AttentionArgs args = ValidArgs(call);
    const std::vector<int64_t> kv_index = {0, 1, 3, 0};
    args.kv_index = {kv_index, {4}};
    EXPECT_THAT(gpu::CanRun(args), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("kv_index[2]=3")));
  }
  {
    gpu::AttentionArgs args = ValidArgs(call);
    args.max_lq = 100;
    EXPECT_THAT(gpu::CanRun(args), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_lq=100")));
  }
  {
    gpu::AttentionArgs args = ValidArgs(call);
    const std::vector<int64_t> offsets = {0, 9, 8, 74};
    args.kv_offsets = {offsets, {4}};
    EXPECT_THAT(gpu::CanRun(args), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("kv_offsets[2]")));
  }
}

}  // namespace
}  // namespace gemtb
