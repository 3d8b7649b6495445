// The CUDA attention kernels (gpu/attention/api.h): spec §9's GPU criteria on random cases of every
// family (through `gemtb check attention`'s own code; also with the warp-specialised forward
// everywhere, v5 and v4, and v5 bitwise equal to v4), bitwise determinism of the backward, the
// chained backward (v4) bitwise equal to v3, the stored-dS backward (v5, also through the check)
// against v3's recompute, backward v6 (dQ inside the dK/dV chain under broadcast_q) against v4, the
// small forward (v9, opt-in) through the check and against the split kernel,
// AttentionOptions::tanh_approx (through the check, and changing only silu and gelu_tanh), exact
// outputs of rows without keys, and rejection by name of what the kernels do not run. Tests that need a GPU skip (and show as skipped) without an sm_90 device; the rejection
// tests run anywhere.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <utility>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "gpu/attention/api.h"
#include "model/numerics/float_formats.h"
#include "tests/testing/attention_cases.h"
#include "tests/testing/status_matchers.h"
#include "tools/gemtb/command.h"
#include "tools/gemtb/gpu_case.h"

namespace gemtb {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

// Every test ends with the GEMTB_* variables as the process started with them. The tests below pick
// kernels through these variables and unset them at their end; a failed ASSERT returns before that,
// and the tests run after it in the same process (ctest runs one per process, the device scripts
// run several with --gtest_filter) would otherwise run on the wrong kernel.
class RestoreGemtbEnvironment : public ::testing::EmptyTestEventListener {
 public:
  RestoreGemtbEnvironment() : initial_(GemtbVariables()) {}
  void OnTestEnd(const ::testing::TestInfo&) override {
    for (const auto& [name, value] : GemtbVariables()) {
      if (initial_.count(name) == 0) unsetenv(name.c_str());
    }
    for (const auto& [name, value] : initial_) setenv(name.c_str(), value.c_str(), 1);
  }

 private:
  static std::map<std::string, std::string> GemtbVariables() {
    std::map<std::string, std::string> out;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry(*e);
      const size_t eq = entry.find('=');
      if (entry.rfind("GEMTB_", 0) == 0 && eq != std::string::npos) out[entry.substr(0, eq)] = entry.substr(eq + 1);
    }
    return out;
  }
  const std::map<std::string, std::string> initial_;
};
[[maybe_unused]] const bool kRestoreGemtbEnvironment = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new RestoreGemtbEnvironment);  // gtest owns it
  return true;
}();

// The listener's restore, driven directly (ctest runs each test in its own process, where a leak
// between tests could not show): a changed variable gets its first value back, a new one goes.
TEST(GpuTestEnvironment, RestoresTheGemtbVariablesOfTheSnapshot) {
  ASSERT_EQ(setenv("GEMTB_TEST_ENV_KEPT", "a", 1), 0);
  RestoreGemtbEnvironment restore;
  ASSERT_EQ(setenv("GEMTB_TEST_ENV_KEPT", "b", 1), 0);
  ASSERT_EQ(setenv("GEMTB_TEST_ENV_NEW", "1", 1), 0);
  ASSERT_EQ(setenv("OTHER_TEST_ENV_NEW", "1", 1), 0);
  restore.OnTestEnd(*::testing::UnitTest::GetInstance()->current_test_info());
  ASSERT_NE(std::getenv("GEMTB_TEST_ENV_KEPT"), nullptr);
  EXPECT_STREQ(std::getenv("GEMTB_TEST_ENV_KEPT"), "a");
  EXPECT_EQ(std::getenv("GEMTB_TEST_ENV_NEW"), nullptr);
  EXPECT_STREQ(std::getenv("OTHER_TEST_ENV_NEW"), "1");  // only GEMTB_ variables are its business
  unsetenv("GEMTB_TEST_ENV_KEPT");
  unsetenv("OTHER_TEST_ENV_NEW");
}

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

check::AttentionCase SmallCase(uint64_t seed, Activation act, MaskKind mask, int64_t d = 64) {
  check::CaseShape shape = GqaShape(act, mask, seed, d);
  shape.q_lengths = {5, 70, 0, 130};
  shape.kv_lengths = {9, 1, 64};
  shape.kv_index = {2, 0, 1, 2};
  shape.options.window_left = 7;
  shape.options.window_right = 3;
  shape.options.block = 16;
  return check::BuildCase(shape);
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

// The warp-specialised Hopper forward (forward_hopper_ws_kernel.cuh) for every act and tile list,
// not only where kAuto takes it (softmax calls whose tiles average >= 2 K/V steps).
TEST(GpuAttention, CheckCommandPassesWithTheWarpSpecialisedForwardEverywhere) {
  if (!HaveGpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  ASSERT_EQ(setenv("GEMTB_FORWARD_KERNEL", "hopper_ws", 1), 0);
  const int rc = cli::RunCheckAttention({"--cases", "12", "--seed", "21", "--max-length", "300"});
  unsetenv("GEMTB_FORWARD_KERNEL");
  EXPECT_EQ(rc, 0);
}

// v4 of the warp-specialised forward (GEMTB_FORWARD_WS=v4; since v5 it runs only where the tensors
// do not suit TMA) for every act and tile list.
TEST(GpuAttention, CheckCommandPassesWithTheWarpSpecialisedForwardV4Everywhere) {
  if (!HaveGpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  ASSERT_EQ(setenv("GEMTB_FORWARD_KERNEL", "hopper_ws", 1), 0);
  ASSERT_EQ(setenv("GEMTB_FORWARD_WS", "v4", 1), 0);
  const int rc = cli::RunCheckAttention({"--cases", "12", "--seed", "22", "--max-length", "300"});
  unsetenv("GEMTB_FORWARD_WS");
  unsetenv("GEMTB_FORWARD_KERNEL");
  EXPECT_EQ(rc, 0);
}

// The opt-in forwards v5 (the TMA forward before v6's elementwise diet, GEMTB_FORWARD_WS=v5) and v6
// (the default v7 but softmax's epilogue as a division per output) for every act and tile list.
TEST(GpuAttention, CheckCommandPassesWithTheForwardV5AndV6Everywhere) {
  if (!HaveGpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  ASSERT_EQ(setenv("GEMTB_FORWARD_KERNEL", "hopper_ws", 1), 0);
  for (const char* version : {"v5", "v6"}) {
    ASSERT_EQ(setenv("GEMTB_FORWARD_WS", version, 1), 0);
    EXPECT_EQ(cli::RunCheckAttention({"--cases", "12", "--seed", "23", "--max-length", "300"}), 0) << version;
  }
  unsetenv("GEMTB_FORWARD_WS");
  unsetenv("GEMTB_FORWARD_KERNEL");
}

// v5 (persistent CTAs, TMA loads of full 128-row Q tiles and K/V steps) does v4's arithmetic in
// v4's order, so O and LSE are bitwise equal; the lengths give full and partial steps and tiles.
TEST(GpuAttention, WarpSpecialisedForwardV5MatchesV4Bitwise) {
  if (!HaveGpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  const std::pair<Activation, MaskKind> kinds[] = {{Activation::kSoftmax, MaskKind::kNone},
                                                  {Activation::kSoftmax, MaskKind::kCausal},
                                                  {Activation::kSilu, MaskKind::kWindow}};
  for (const auto& [act, mask] : kinds) {
    const check::AttentionCase c = check::BuildCase(HopperShape(act, mask, 5));
    const cli::GpuCall call = CallOf(c, check::RandomCotangent(c, 6));
    ASSERT_EQ(setenv("GEMTB_FORWARD_WS", "v4", 1), 0);
    absl::StatusOr<gpu::ForwardResult> v4 = gpu::Forward(call.args);
    ASSERT_EQ(setenv("GEMTB_FORWARD_WS", "v5", 1), 0);
    absl::StatusOr<gpu::ForwardResult> v5 = gpu::Forward(call.args);
    unsetenv("GEMTB_FORWARD_WS");
    ASSERT_TRUE(v4.ok()) << v4.status();
    ASSERT_TRUE(v5.ok()) << v5.status();
    EXPECT_EQ(v5->o, v4->o) << "act " << static_cast<int>(act) << " mask " << static_cast<int>(mask);
    EXPECT_EQ(v5->lse, v4->lse);
  }
}

// The split forward (forward_hopper_split_kernel.cuh: tiles of <= 64 query rows, pointwise acts;
// GEMTB_FORWARD_SPLIT=1 the consumers take alternate K/V steps, =2 64 keys each of every step, with
// and without the item ring, GEMTB_SPLIT_RING) for every act and tile list it takes (the check's
// short cases), and against v7 (GEMTB_FORWARD_SPLIT=0)
// on PMA-like shapes (broadcast_q, 40 query rows, one- to six-step key ranges): P is the same, O
// differs only by the fp32 summation order (two partial sums), so it lies within a bf16 rounding
// step or two of v7's.
TEST(GpuAttention, SplitForwardPassesTheCheckAndMatchesV7OnShortTiles) {
  if (!HaveGpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  // The small forward (on by default) would take the check's launches of <= 32-row tiles.
  ASSERT_EQ(setenv("GEMTB_FORWARD_SMALL", "0", 1), 0);
  // Split modes, with the ring's setting after a slash.
  const std::pair<const char*, const char*> variants[] = {{"1", "1"}, {"2", "0"}, {"2", "1"}};
  for (const auto& [mode, ring] : variants) {
    ASSERT_EQ(setenv("GEMTB_FORWARD_SPLIT", mode, 1), 0);
    ASSERT_EQ(setenv("GEMTB_SPLIT_RING", ring, 1), 0);
    EXPECT_EQ(cli::RunCheckAttention({"--cases", "12", "--seed", "24", "--max-length", "64"}), 0) << mode << "/" << ring;
  }
  unsetenv("GEMTB_FORWARD_SPLIT");
  unsetenv("GEMTB_SPLIT_RING");
  const auto value = [](uint16_t bits) { return static_cast<double>(numerics::Bf16BitsToFloat(bits)); };
  const std::pair<Activation, MaskKind> kinds[] = {{Activation::kSilu, MaskKind::kNone},
                                                  {Activation::kGeluTanh, MaskKind::kCausal},
                                                  {Activation::kRelu, MaskKind::kWindow}};
  for (const auto& [act, mask] : kinds) {
    check::CaseShape shape = HopperShape(act, mask, 9);
    shape.q_lengths = {40};
    shape.kv_lengths = {700, 9, 130, 0, 256, 1, 383};
    shape.kv_index = {};
    shape.options.broadcast_q = true;
    const check::AttentionCase c = check::BuildCase(shape);
    const cli::GpuCall call = CallOf(c, check::RandomCotangent(c, 10));
    ASSERT_EQ(setenv("GEMTB_FORWARD_SPLIT", "0", 1), 0);
    absl::StatusOr<gpu::ForwardResult> v7 = gpu::Forward(call.args);
    ASSERT_TRUE(v7.ok()) << v7.status();
    double max_abs = 0;
    for (uint16_t b : v7->o) max_abs = std::max(max_abs, std::fabs(value(b)));
    ASSERT_GT(max_abs, 0.0);
    for (const auto& [mode, ring] : variants) {
      ASSERT_EQ(setenv("GEMTB_FORWARD_SPLIT", mode, 1), 0);
      ASSERT_EQ(setenv("GEMTB_SPLIT_RING", ring, 1), 0);
      absl::StatusOr<gpu::ForwardResult> split = gpu::Forward(call.args);
      ASSERT_TRUE(split.ok()) << split.status();
      ASSERT_EQ(split->o.size(), v7->o.size());
      int64_t bad = 0;
      for (size_t i = 0; i < v7->o.size(); ++i) {
        const double a = value(v7->o[i]), b = value(split->o[i]);
        if (!(std::fabs(a - b) <= std::fabs(a) / 64 + 1e-4 * max_abs)) ++bad;
      }
      EXPECT_EQ(bad, 0) << "mode " << mode << "/" << ring << " act " << static_cast<int>(act) << " mask "
                        << static_cast<int>(mask);
    }
    unsetenv("GEMTB_FORWARD_SPLIT");
    unsetenv("GEMTB_SPLIT_RING");
  }
  unsetenv("GEMTB_FORWARD_SMALL");
}

// The small forward (forward_hopper_small_kernel.cuh, GEMTB_FORWARD_SMALL=1: tiles of <= 32 query
// rows, pointwise acts) for every act and tile list it takes (the check's cases of <= 32 keys and
// rows), and against the split kernel on PMA-like shapes (broadcast_q, 32 and 17 seeds, one- to
// eleven-step key ranges): P is rounded the same way, O differs by the fp32 summation order.
double RelL2Bf16(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b);  // below

TEST(GpuAttention, SmallForwardPassesTheCheckAndMatchesSplitOnSeedTiles) {
  if (!HaveGpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  ASSERT_EQ(setenv("GEMTB_FORWARD_SMALL", "1", 1), 0);
  for (const char* stages : {"3", "2"}) {
    ASSERT_EQ(setenv("GEMTB_FORWARD_SMALL_STAGES", stages, 1), 0);
    EXPECT_EQ(cli::RunCheckAttention({"--cases", "12", "--seed", "25", "--max-length", "32"}), 0) << stages;
  }
  unsetenv("GEMTB_FORWARD_SMALL_STAGES");
  unsetenv("GEMTB_FORWARD_SMALL");
  const auto value = [](uint16_t bits) { return static_cast<double>(numerics::Bf16BitsToFloat(bits)); };
  struct Kind {
    Activation act;
    MaskKind mask;
    int64_t seeds;
  };
  const Kind kinds[] = {{Activation::kSilu, MaskKind::kNone, 32},
                        {Activation::kGeluTanh, MaskKind::kCausal, 32},
                        {Activation::kRelu, MaskKind::kWindow, 17}};
  for (const Kind& k : kinds) {
    check::CaseShape shape = HopperShape(k.act, k.mask, 31);
    shape.q_lengths = {k.seeds};
    shape.kv_lengths = {700, 9, 130, 0, 256, 1, 383};
    shape.kv_index = {};
    shape.options.broadcast_q = true;
    const check::AttentionCase c = check::BuildCase(shape);
    const cli::GpuCall call = CallOf(c, check::RandomCotangent(c, 32));
    ASSERT_EQ(setenv("GEMTB_FORWARD_SMALL", "0", 1), 0);
    absl::StatusOr<gpu::ForwardResult> split = gpu::Forward(call.args);
    ASSERT_TRUE(split.ok()) << split.status();
    ASSERT_EQ(setenv("GEMTB_FORWARD_SMALL", "1", 1), 0);
    absl::StatusOr<gpu::ForwardResult> small = gpu::Forward(call.args);
    absl::StatusOr<gpu::ForwardResult> again = gpu::Forward(call.args);
    // Two stages (three CTAs per SM, Pᵀ over the K tile) run the same MMAs in the same order.
    ASSERT_EQ(setenv("GEMTB_FORWARD_SMALL_STAGES", "2", 1), 0);
    absl::StatusOr<gpu::ForwardResult> two_stages = gpu::Forward(call.args);
    unsetenv("GEMTB_FORWARD_SMALL_STAGES");
    unsetenv("GEMTB_FORWARD_SMALL");
    ASSERT_TRUE(small.ok()) << small.status();
    ASSERT_TRUE(again.ok()) << again.status();
    ASSERT_TRUE(two_stages.ok()) << two_stages.status();
    ASSERT_EQ(small->o.size(), split->o.size());
    double max_abs = 0;
    for (uint16_t b : split->o) max_abs = std::max(max_abs, std::fabs(value(b)));
    ASSERT_GT(max_abs, 0.0);
    int64_t bad = 0;
    for (size_t i = 0; i < split->o.size(); ++i) {
      const double a = value(split->o[i]), b = value(small->o[i]);
      if (!(std::fabs(a - b) <= std::fabs(a) / 64 + 1e-4 * max_abs)) ++bad;
    }
    const std::string what = absl::StrCat("act ", std::string(ActivationName(k.act)), " mask ",
                                          static_cast<int>(k.mask), " seeds ", k.seeds);
    std::cout << what << ": small vs split rel-L2 " << RelL2Bf16(split->o, small->o) << "\n";
    EXPECT_EQ(bad, 0) << what;
    EXPECT_EQ(again->o, small->o) << what;
    EXPECT_EQ(two_stages->o, small->o) << what;
  }
}

// v10 (GEMTB_FORWARD_SMALL_PERSISTENT=1: v9's CTAs persistent, the cp.async pipeline running on
// across items, Q reloaded at a boundary when it changes) runs every item's steps as v9 does, so O
// is bitwise v9's, for both stage counts: on thousands of items (more than the CTAs that fit), with
// broadcast seeds and with per-sequence query tiles of 1 to 32 rows (the reload path).
TEST(GpuAttention, PersistentSmallForwardMatchesV9Bitwise) {
  if (!HaveGpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  std::mt19937_64 rng(41);
  const auto draw = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (const bool broadcast : {true, false}) {
    check::CaseShape shape = HopperShape(Activation::kSilu, broadcast ? MaskKind::kNone : MaskKind::kCausal, 43);
    shape.q_lengths.clear();
    shape.kv_lengths.clear();
    shape.kv_index = {};
    const int n = broadcast ? 1500 : 900;
    for (int i = 0; i < n; ++i) {
      shape.kv_lengths.push_back(draw(0, 3) == 0 ? draw(0, 8) : draw(1, 400));
      if (!broadcast) shape.q_lengths.push_back(draw(1, 32));
    }
    if (broadcast) shape.q_lengths = {32};
    shape.options.broadcast_q = broadcast;
    const check::AttentionCase c = check::BuildCase(shape);
    const cli::GpuCall call = CallOf(c, check::RandomCotangent(c, 32));
    ASSERT_EQ(setenv("GEMTB_FORWARD_SMALL", "1", 1), 0);
    for (const char* stages : {"3", "2"}) {
      ASSERT_EQ(setenv("GEMTB_FORWARD_SMALL_STAGES", stages, 1), 0);
      ASSERT_EQ(setenv("GEMTB_FORWARD_SMALL_PERSISTENT", "0", 1), 0);
      absl::StatusOr<gpu::ForwardResult> v9 = gpu::Forward(call.args);
      ASSERT_EQ(setenv("GEMTB_FORWARD_SMALL_PERSISTENT", "1", 1), 0);
      absl::StatusOr<gpu::ForwardResult> v10 = gpu::Forward(call.args);
      ASSERT_TRUE(v9.ok()) << v9.status();
      ASSERT_TRUE(v10.ok()) << v10.status();
      double max_abs = 0;
      for (uint16_t b : v9->o) max_abs = std::max(max_abs, std::fabs(static_cast<double>(numerics::Bf16BitsToFloat(b))));
      EXPECT_GT(max_abs, 0.0);
      EXPECT_EQ(v10->o, v9->o) << "broadcast " << broadcast << " stages " << stages;
    }
    unsetenv("GEMTB_FORWARD_SMALL_PERSISTENT");
    unsetenv("GEMTB_FORWARD_SMALL_STAGES");
    unsetenv("GEMTB_FORWARD_SMALL");
  }
  ASSERT_EQ(setenv("GEMTB_FORWARD_SMALL", "1", 1), 0);
  ASSERT_EQ(setenv("GEMTB_FORWARD_SMALL_PERSISTENT", "1", 1), 0);
  EXPECT_EQ(cli::RunCheckAttention({"--cases", "12", "--seed", "26", "--max-length", "32"}), 0);
  unsetenv("GEMTB_FORWARD_SMALL_PERSISTENT");
  unsetenv("GEMTB_FORWARD_SMALL");
}

// Backward v4 (gpu/attention/backward_hopper_chain_launch.cuh: chains of tiles per CTA, outputs
// through shared memory, head-minor CTA order) runs v3's steps in v3's order for every tile, so dQ,
// dK and dV are bitwise v3's whatever the chain length and order; the shapes give one- and
// multi-step tiles, partial tiles, masks and split dQ tiles (broadcast_q, five readers).
TEST(GpuAttention, ChainedBackwardMatchesV3Bitwise) {
  if (!HaveGpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  struct Kind {
    Activation act;
    MaskKind mask;
    bool broadcast_q;
  };
  const Kind kinds[] = {{Activation::kSoftmax, MaskKind::kNone, false},
                        {Activation::kSilu, MaskKind::kWindow, false},
                        {Activation::kGeluTanh, MaskKind::kCausal, false},
                        {Activation::kSilu, MaskKind::kNone, true}};
  const auto backward = [](const cli::GpuCall& call, const gpu::ForwardResult& fwd, const char* chain,
                           const char* head_minor) {
    EXPECT_EQ(setenv("GEMTB_DKDV_CHAIN", chain, 1), 0);
    EXPECT_EQ(setenv("GEMTB_DQ_CHAIN", chain, 1), 0);
    EXPECT_EQ(setenv("GEMTB_BWD_HEAD_MINOR", head_minor, 1), 0);
    EXPECT_EQ(setenv("GEMTB_BWD_DQ", "recompute", 1), 0);  // v5's stored dS runs no chain
    absl::StatusOr<gpu::BackwardResult> r = gpu::Backward(call.args, call.DoView(), fwd);
    unsetenv("GEMTB_DKDV_CHAIN");
    unsetenv("GEMTB_DQ_CHAIN");
    unsetenv("GEMTB_BWD_HEAD_MINOR");
    unsetenv("GEMTB_BWD_DQ");
    return r;
  };
  for (const Kind& k : kinds) {
    check::CaseShape shape = HopperShape(k.act, k.mask, 7);
    if (k.broadcast_q) {
      shape.q_lengths = {40};
      shape.kv_lengths = {300, 9, 130, 64, 1};
      shape.kv_index = {};
      shape.options.broadcast_q = true;
    }
    const check::AttentionCase c = check::BuildCase(shape);
    const cli::GpuCall call = CallOf(c, check::RandomCotangent(c, 8));
    absl::StatusOr<gpu::ForwardResult> fwd = gpu::Forward(call.args);
    ASSERT_TRUE(fwd.ok()) << fwd.status();
    absl::StatusOr<gpu::BackwardResult> v3 = backward(call, *fwd, "0", "1");
    ASSERT_TRUE(v3.ok()) << v3.status();
    for (const char* chain : {"1", "3"}) {
      for (const char* head_minor : {"0", "1"}) {
        absl::StatusOr<gpu::BackwardResult> v4 = backward(call, *fwd, chain, head_minor);
        ASSERT_TRUE(v4.ok()) << v4.status();
        const std::string what = absl::StrCat("act ", static_cast<int>(k.act), " mask ", static_cast<int>(k.mask),
                                              " broadcast_q ", k.broadcast_q, " chain ", chain, " head_minor ",
                                              head_minor);
        EXPECT_EQ(v4->dq, v3->dq) << what;
        EXPECT_EQ(v4->dk, v3->dk) << what;
        EXPECT_EQ(v4->dv, v3->dv) << what;
      }
    }
  }
}

// The stored-dS backward (GEMTB_BWD_DQ=stored; the default where it applies) on every family but
// broadcast_q, where it applies.
TEST(GpuAttention, CheckCommandPassesWithTheStoredDsBackward) {
  if (!HaveGpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  ASSERT_EQ(setenv("GEMTB_BWD_DQ", "stored", 1), 0);
  const int rc = cli::RunCheckAttention({"--cases", "12", "--seed", "21", "--max-length", "200"});
  unsetenv("GEMTB_BWD_DQ");
  EXPECT_EQ(rc, 0);
}

// AttentionOptions::tanh_approx: the GPU evaluates silu and gelu_tanh through tanh.approx while
// the oracle keeps the exact act; spec §9's criteria must still hold, on every mask, on the
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

// Backward v5 (GEMTB_BWD_DQ=stored: the dK/dV kernel stores dS, the dQ pass multiplies it by K)
// against v3 (GEMTB_BWD_DQ=recompute). dQ multiplies the same rounded dS in the same key order but
// the two kernels form S with the operands swapped (Sᵀ = K Qᵀ against S = Q Kᵀ), so a dS element can
// round one ulp apart: rel-L2 within 4e-3 (bf16's ulp). dK/dV come from the same kernel: bitwise
// where no dK/dV segment's first row moved to a block boundary (no mask: every segment starts at
// row 0), within 4e-3 elsewhere (other row grouping over the steps). The stored path also repeats
// its bits run to run. Shapes: one- and multi-step tiles, partial blocks, GQA, a window whose
// segments start off the 64-row grid.
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
  const auto backward = [](const cli::GpuCall& call, const gpu::ForwardResult& fwd, const char* mode) {
    EXPECT_EQ(setenv("GEMTB_BWD_DQ", mode, 1), 0);
    absl::StatusOr<gpu::BackwardResult> r = gpu::Backward(call.args, call.DoView(), fwd);
    unsetenv("GEMTB_BWD_DQ");
    return r;
  };
  for (const Kind& k : kinds) {
    const check::AttentionCase c = check::BuildCase(HopperShape(k.act, k.mask, 11));
    const cli::GpuCall call = CallOf(c, check::RandomCotangent(c, 12));
    absl::StatusOr<gpu::ForwardResult> fwd = gpu::Forward(call.args);
    ASSERT_TRUE(fwd.ok()) << fwd.status();
    absl::StatusOr<gpu::BackwardResult> v3 = backward(call, *fwd, "recompute");
    ASSERT_TRUE(v3.ok()) << v3.status();
    absl::StatusOr<gpu::BackwardResult> v5 = backward(call, *fwd, "stored");
    ASSERT_TRUE(v5.ok()) << v5.status();
    absl::StatusOr<gpu::BackwardResult> again = backward(call, *fwd, "stored");
    ASSERT_TRUE(again.ok()) << again.status();
    const std::string what = absl::StrCat("act ", static_cast<int>(k.act), " mask ", static_cast<int>(k.mask));
    EXPECT_LE(RelL2Bf16(v3->dq, v5->dq), 4e-3) << what;
    EXPECT_LE(RelL2Bf16(v3->dk, v5->dk), 4e-3) << what;
    EXPECT_LE(RelL2Bf16(v3->dv, v5->dv), 4e-3) << what;
    std::cout << what << ": rel-L2 stored vs recompute dq " << RelL2Bf16(v3->dq, v5->dq) << " dk "
              << RelL2Bf16(v3->dk, v5->dk) << " dv " << RelL2Bf16(v3->dv, v5->dv) << "\n";
    if (k.mask == MaskKind::kNone) {
      EXPECT_EQ(v5->dk, v3->dk) << what;
      EXPECT_EQ(v5->dv, v3->dv) << what;
    }
    EXPECT_EQ(again->dq, v5->dq) << what;
    EXPECT_EQ(again->dk, v5->dk) << what;
    EXPECT_EQ(again->dv, v5->dv) << what;
  }
}

// Backward v6 (gpu/attention/backward_hopper_fused_dq.cuh: broadcast_q, no GQA, <= 32 seeds; dQ
// from the dK/dV chain's dSᵀ, summed over the chains) against v4 (the chained dK/dV, then the dQ pass
// that recomputes S and dP; bitwise v3 by ChainedBackwardMatchesV3Bitwise): dK and dV from the same
// pairs at 32 rows instead of 64 (rel-L2 printed, within 1e-5), dQ summed in another order (within
// 2e-3), and v6 repeats its bits run to run. Shapes: 1, 17 and 32 seeds; one- and multi-tile K/V
// sequences, partial tiles, an empty one; masks with and without full steps; chains of 1 and 3.
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
  const auto backward = [](const cli::GpuCall& call, const gpu::ForwardResult& fwd, const char* fused,
                           const char* chain) {
    EXPECT_EQ(setenv("GEMTB_BWD_FUSED_DQ", fused, 1), 0);
    EXPECT_EQ(setenv("GEMTB_DKDV_CHAIN", chain, 1), 0);
    absl::StatusOr<gpu::BackwardResult> r = gpu::Backward(call.args, call.DoView(), fwd);
    unsetenv("GEMTB_BWD_FUSED_DQ");
    unsetenv("GEMTB_DKDV_CHAIN");
    return r;
  };
  for (const Kind& k : kinds) {
    check::CaseShape shape = HopperShape(k.act, k.mask, 21);
    shape.kv_heads = shape.heads;
    shape.q_lengths = {k.seeds};
    shape.kv_lengths = {300, 9, 130, 64, 0, 1, 200};
    shape.kv_index = {};
    shape.options.broadcast_q = true;
    shape.options.tanh_approx = k.tanh_approx;
    const check::AttentionCase c = check::BuildCase(shape);
    const cli::GpuCall call = CallOf(c, check::RandomCotangent(c, 22));
    absl::StatusOr<gpu::ForwardResult> fwd = gpu::Forward(call.args);
    ASSERT_TRUE(fwd.ok()) << fwd.status();
    absl::StatusOr<gpu::BackwardResult> v4 = backward(call, *fwd, "0", "3");
    ASSERT_TRUE(v4.ok()) << v4.status();
    for (const char* chain : {"1", "3"}) {
      absl::StatusOr<gpu::BackwardResult> v6 = backward(call, *fwd, "1", chain);
      ASSERT_TRUE(v6.ok()) << v6.status();
      absl::StatusOr<gpu::BackwardResult> again = backward(call, *fwd, "1", chain);
      ASSERT_TRUE(again.ok()) << again.status();
      const std::string what = absl::StrCat("act ", std::string(ActivationName(k.act)), " mask ",
                                            static_cast<int>(k.mask), " seeds ", k.seeds, " tanh_approx ",
                                            k.tanh_approx, " chain ", chain);
      const double dq = RelL2Bf16(v4->dq, v6->dq), dk = RelL2Bf16(v4->dk, v6->dk), dv = RelL2Bf16(v4->dv, v6->dv);
      std::cout << what << ": rel-L2 v6 vs v4 dq " << dq << " dk " << dk << " dv " << dv << "\n";
      EXPECT_LE(dq, 2e-3) << what;
      EXPECT_LE(dk, 1e-5) << what;
      EXPECT_LE(dv, 1e-5) << what;
      EXPECT_EQ(again->dq, v6->dq) << what;
      EXPECT_EQ(again->dk, v6->dk) << what;
      EXPECT_EQ(again->dv, v6->dv) << what;
    }
  }
}

TEST(GpuAttention, BackwardIsBitwiseIdenticalAcrossRuns) {
  if (!HaveGpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (Activation act : {Activation::kSoftmax, Activation::kSilu}) {
    const check::AttentionCase c = SmallCase(3, act, MaskKind::kCausal, 128);
    const std::vector<double> d_o = check::RandomCotangent(c, 4);
    const cli::GpuCall call = CallOf(c, d_o);
    absl::StatusOr<gpu::ForwardResult> fwd = gpu::Forward(call.args);
    ASSERT_TRUE(fwd.ok()) << fwd.status();
    absl::StatusOr<gpu::BackwardResult> first = gpu::Backward(call.args, call.DoView(), *fwd);
    ASSERT_TRUE(first.ok()) << first.status();
    for (int rep = 0; rep < 3; ++rep) {
      absl::StatusOr<gpu::ForwardResult> fwd2 = gpu::Forward(call.args);
      ASSERT_TRUE(fwd2.ok()) << fwd2.status();
      EXPECT_EQ(fwd2->o, fwd->o);
      EXPECT_EQ(fwd2->lse, fwd->lse);
      absl::StatusOr<gpu::BackwardResult> again = gpu::Backward(call.args, call.DoView(), *fwd);
      ASSERT_TRUE(again.ok()) << again.status();
      EXPECT_EQ(again->dq, first->dq);
      EXPECT_EQ(again->dk, first->dk);
      EXPECT_EQ(again->dv, first->dv);
    }
  }
}

// Causal + bottom_right with Lq > Lk leaves the first Lq - Lk rows without keys: O = 0, LSE = -inf,
// zero gradients, no NaN (spec §9 "fully masked rows").
TEST(GpuAttention, RowsWithoutKeysGiveZeroOutputsAndMinusInfinityLse) {
  if (!HaveGpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  check::CaseShape shape;
  shape.q_lengths = {100};
  shape.kv_lengths = {30};
  shape.dqk = shape.dv = 64;
  shape.options.mask = MaskKind::kCausal;
  shape.input_type = ElementType::kFloat16;
  shape.value_seed = 9;
  const check::AttentionCase c = check::BuildCase(shape);
  const std::vector<double> d_o = check::RandomCotangent(c, 10);
  const cli::GpuCall call = CallOf(c, d_o);
  absl::StatusOr<gpu::ForwardResult> fwd = gpu::Forward(call.args);
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  absl::StatusOr<gpu::BackwardResult> bwd = gpu::Backward(call.args, call.DoView(), *fwd);
  ASSERT_TRUE(bwd.ok()) << bwd.status();
  const std::vector<double> o = cli::BitsToValues(fwd->o, c.input_type);
  const std::vector<double> dq = cli::BitsToValues(bwd->dq, c.input_type);
  for (int64_t i = 0; i < 100; ++i) {
    const bool empty = i < 70;
    EXPECT_EQ(std::isinf(fwd->lse[i]) && fwd->lse[i] < 0, empty) << "row " << i;
    for (int64_t d = 0; d < 64; ++d) {
      ASSERT_FALSE(std::isnan(o[i * 64 + d]));
      ASSERT_FALSE(std::isnan(dq[i * 64 + d]));
      if (empty) {
        EXPECT_EQ(o[i * 64 + d], 0.0) << "row " << i;
        EXPECT_EQ(dq[i * 64 + d], 0.0) << "row " << i;
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

TEST(GpuAttentionCanRun, RejectsUnsupportedDimsAndTypesByName) {
  {
    const check::AttentionCase c = SmallCase(1, Activation::kSoftmax, MaskKind::kNone, 32);
    EXPECT_THAT(gpu::CanRun(CallOf(c, {}).args),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("Dqk=32")));
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
