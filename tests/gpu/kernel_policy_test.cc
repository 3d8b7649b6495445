// The kernel policy (gpu/attention/kernel_policy.h): which kernels ChooseKernels picks for a shape,
// what an override asks for, and the errors naming an overridden kernel that cannot run the call.
// Host code only: runs without a GPU.
#include "gpu/attention/kernel_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tests/testing/status_matchers.h"

namespace gemtb::gpu {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

// A head-dim-128 call on an sm_90a build with full 128-row tiles and a backward.
KernelShape Hopper128() {
  KernelShape s;
  s.head_dim = 128;
  s.hopper_built = true;
  s.max_tile_rows = 128;
  s.with_backward = true;
  s.heads = s.kv_heads = 4;
  s.dkv_tiles = 10;
  s.stored_ds_bytes = 1 << 20;
  return s;
}

KernelPlan Choose(const KernelShape& s, const KernelOverride& o = {}) {
  absl::StatusOr<KernelPlan> plan = ChooseKernels(s, o);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : KernelPlan{};
}

// Head dims 16, 32 and 64 have no Hopper kernel; the emulation has none at all.
TEST(KernelPolicy, MmaSyncWithoutTheHopperKernels) {
  std::vector<KernelShape> shapes;
  for (const int64_t d : {16, 32, 64}) {
    for (const bool broadcast_q : {false, true}) {
      KernelShape s = Hopper128();
      s.head_dim = d;
      s.broadcast_q = broadcast_q;
      s.seeds = broadcast_q ? 32 : 0;
      s.max_tile_rows = broadcast_q ? 32 : 128;
      shapes.push_back(s);
    }
  }
  KernelShape emulation = Hopper128();
  emulation.hopper_built = false;
  shapes.push_back(emulation);
  for (const KernelShape& s : shapes) {
    const KernelPlan plan = Choose(s);
    EXPECT_EQ(plan.forward, ForwardKernelKind::kMmaSync) << "D=" << s.head_dim;
    EXPECT_EQ(plan.backward, BackwardKernelKind::kMmaSync) << "D=" << s.head_dim;
  }
}

TEST(KernelPolicy, ForwardByTileRowsAndAct) {
  struct Row {
    int32_t rows;
    bool softmax;
    ForwardKernelKind want;
  };
  const Row rows[] = {{128, false, ForwardKernelKind::kHopperTma},  {128, true, ForwardKernelKind::kHopperTma},
                      {65, false, ForwardKernelKind::kHopperTma},   {64, false, ForwardKernelKind::kHopperSplit},
                      {33, false, ForwardKernelKind::kHopperSplit}, {32, false, ForwardKernelKind::kHopperSmall},
                      {1, false, ForwardKernelKind::kHopperSmall},  {32, true, ForwardKernelKind::kHopperTma},
                      {64, true, ForwardKernelKind::kHopperTma},    {0, false, ForwardKernelKind::kHopperTma}};
  for (const Row& r : rows) {
    KernelShape s = Hopper128();
    s.max_tile_rows = r.rows;
    s.softmax = r.softmax;
    EXPECT_EQ(Choose(s).forward, r.want) << "rows " << r.rows << " softmax " << r.softmax;
  }
}

TEST(KernelPolicy, BackwardStoredDsUpToItsWorkspaceLimit) {
  KernelShape s = Hopper128();
  EXPECT_EQ(Choose(s).backward, BackwardKernelKind::kHopperStoredDs);
  s.stored_ds_bytes = kStoredDsMaxBytes;
  EXPECT_EQ(Choose(s).backward, BackwardKernelKind::kHopperStoredDs);
  s.stored_ds_bytes = kStoredDsMaxBytes + 1;
  EXPECT_EQ(Choose(s).backward, BackwardKernelKind::kHopperRecompute);
  s.stored_ds_bytes = -1;  // no block written
  EXPECT_EQ(Choose(s).backward, BackwardKernelKind::kHopperRecompute);
}

TEST(KernelPolicy, BackwardUnderBroadcastQ) {
  KernelShape s = Hopper128();
  s.broadcast_q = true;
  s.stored_ds_bytes = -1;
  s.seeds = 32;
  EXPECT_EQ(Choose(s).backward, BackwardKernelKind::kHopperFusedDq);
  s.seeds = 1;
  EXPECT_EQ(Choose(s).backward, BackwardKernelKind::kHopperFusedDq);
  s.seeds = 33;
  EXPECT_EQ(Choose(s).backward, BackwardKernelKind::kHopperRecompute);
  s.seeds = 32;
  s.kv_heads = 2;  // GQA
  EXPECT_EQ(Choose(s).backward, BackwardKernelKind::kHopperRecompute);
  s.kv_heads = 4;
  s.dkv_tiles = 0;
  EXPECT_EQ(Choose(s).backward, BackwardKernelKind::kHopperRecompute);
}

TEST(KernelPolicy, OverridesNameTheKernel) {
  KernelShape s = Hopper128();
  EXPECT_EQ(Choose(s, {ForwardKernelKind::kHopperWs, BackwardKernelKind::kHopperRecompute}).forward,
            ForwardKernelKind::kHopperWs);
  EXPECT_EQ(Choose(s, {ForwardKernelKind::kHopperWs, BackwardKernelKind::kHopperRecompute}).backward,
            BackwardKernelKind::kHopperRecompute);
  // The mma.sync forward takes the mma.sync backward unless another is named.
  EXPECT_EQ(Choose(s, {ForwardKernelKind::kMmaSync, BackwardKernelKind::kAuto}).backward, BackwardKernelKind::kMmaSync);
  EXPECT_EQ(Choose(s, {ForwardKernelKind::kMmaSync, BackwardKernelKind::kHopperStoredDs}).backward,
            BackwardKernelKind::kHopperStoredDs);
  s.stored_ds_bytes = kStoredDsMaxBytes + 1;  // over the default's limit, still runs when named
  EXPECT_EQ(Choose(s, {ForwardKernelKind::kAuto, BackwardKernelKind::kHopperStoredDs}).backward,
            BackwardKernelKind::kHopperStoredDs);
  s.max_tile_rows = 20;
  EXPECT_EQ(Choose(s, {ForwardKernelKind::kHopperSplit, BackwardKernelKind::kAuto}).forward,
            ForwardKernelKind::kHopperSplit);
  EXPECT_EQ(Choose(s, {ForwardKernelKind::kHopperTma, BackwardKernelKind::kAuto}).forward,
            ForwardKernelKind::kHopperTma);
  s.with_backward = false;  // a forward-only call ignores the backward override
  EXPECT_EQ(Choose(s, {ForwardKernelKind::kAuto, BackwardKernelKind::kHopperFusedDq}).forward,
            ForwardKernelKind::kHopperSmall);
}

TEST(KernelPolicy, RejectsOverridesThatCannotRunTheCall) {
  KernelShape d64 = Hopper128();
  d64.head_dim = 64;
  EXPECT_THAT(ChooseKernels(d64, {ForwardKernelKind::kHopperTma, BackwardKernelKind::kAuto}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("forward kernel=hopper_tma")));
  EXPECT_THAT(ChooseKernels(d64, {ForwardKernelKind::kAuto, BackwardKernelKind::kHopperRecompute}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("Dqk=64")));
  KernelShape s = Hopper128();
  s.max_tile_rows = 40;
  EXPECT_THAT(ChooseKernels(s, {ForwardKernelKind::kHopperSmall, BackwardKernelKind::kAuto}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("forward kernel=hopper_small")));
  s.softmax = true;
  EXPECT_THAT(ChooseKernels(s, {ForwardKernelKind::kHopperSplit, BackwardKernelKind::kAuto}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("softmax")));
  s = Hopper128();
  s.broadcast_q = true;
  s.stored_ds_bytes = -1;
  s.seeds = 32;
  EXPECT_THAT(ChooseKernels(s, {ForwardKernelKind::kAuto, BackwardKernelKind::kHopperStoredDs}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("broadcast_q")));
  s.seeds = 40;
  EXPECT_THAT(ChooseKernels(s, {ForwardKernelKind::kAuto, BackwardKernelKind::kHopperFusedDq}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("seeds=40")));
}

TEST(KernelPolicy, NamesParseBack) {
  for (ForwardKernelKind k :
       {ForwardKernelKind::kAuto, ForwardKernelKind::kMmaSync, ForwardKernelKind::kHopperWs,
        ForwardKernelKind::kHopperTma, ForwardKernelKind::kHopperSplit, ForwardKernelKind::kHopperSmall}) {
    absl::StatusOr<ForwardKernelKind> back = ParseForwardKernel(ForwardKernelName(k));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, k);
  }
  for (BackwardKernelKind k :
       {BackwardKernelKind::kAuto, BackwardKernelKind::kMmaSync, BackwardKernelKind::kHopperRecompute,
        BackwardKernelKind::kHopperStoredDs, BackwardKernelKind::kHopperFusedDq}) {
    absl::StatusOr<BackwardKernelKind> back = ParseBackwardKernel(BackwardKernelName(k));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, k);
  }
  EXPECT_THAT(ParseForwardKernel("hopper64"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("forward kernel=hopper64")));
  EXPECT_THAT(ParseBackwardKernel("v3"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hopper_fused_dq")));
}

}  // namespace
}  // namespace gemtb::gpu
