#include "gpu/attention/kernel_policy.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gemtb::gpu {
namespace {

constexpr int64_t kHopperDim = 128;  // the head dim of every wgmma kernel

constexpr ForwardKernelKind kForwardKernels[] = {ForwardKernelKind::kAuto,        ForwardKernelKind::kMmaSync,
                                                 ForwardKernelKind::kHopperWs,    ForwardKernelKind::kHopperTma,
                                                 ForwardKernelKind::kHopperSplit, ForwardKernelKind::kHopperSmall};
constexpr BackwardKernelKind kBackwardKernels[] = {
    BackwardKernelKind::kAuto, BackwardKernelKind::kMmaSync, BackwardKernelKind::kHopperRecompute,
    BackwardKernelKind::kHopperStoredDs, BackwardKernelKind::kHopperFusedDq};

absl::Status CannotRun(absl::string_view what, absl::string_view name, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(what, "=", name, ": cannot run this call (", why, ")"));
}

bool Pointwise(const KernelShape& s) { return !s.softmax; }
bool SmallApplies(const KernelShape& s) { return Pointwise(s) && s.max_tile_rows > 0 && s.max_tile_rows <= kSmallRows; }
bool SplitApplies(const KernelShape& s) { return Pointwise(s) && s.max_tile_rows > 0 && s.max_tile_rows <= kSplitRows; }
bool FusedDqApplies(const KernelShape& s) {
  return s.broadcast_q && s.heads == s.kv_heads && s.seeds >= 1 && s.seeds <= kFusedDqSeeds && s.dkv_tiles > 0;
}

}  // namespace

absl::StatusOr<KernelPlan> ChooseKernels(const KernelShape& shape, const KernelOverride& override) {
  const bool hopper = shape.hopper_built && shape.head_dim == kHopperDim;
  const std::string no_hopper =
      absl::StrCat("the wgmma kernels need head dim ", kHopperDim, " and an sm_90a build; Dqk=", shape.head_dim,
                   shape.hopper_built ? "" : ", no sm_90a kernels in this build");
  KernelPlan plan;
  const absl::string_view fname = ForwardKernelName(override.forward);
  switch (override.forward) {
    case ForwardKernelKind::kAuto:
      if (!hopper) {
        plan.forward = ForwardKernelKind::kMmaSync;
      } else if (SmallApplies(shape)) {
        plan.forward = ForwardKernelKind::kHopperSmall;
      } else if (SplitApplies(shape)) {
        plan.forward = ForwardKernelKind::kHopperSplit;
      } else {
        plan.forward = ForwardKernelKind::kHopperTma;
      }
      break;
    case ForwardKernelKind::kMmaSync:
      plan.forward = ForwardKernelKind::kMmaSync;
      break;
    case ForwardKernelKind::kHopperWs:
    case ForwardKernelKind::kHopperTma:
    case ForwardKernelKind::kHopperSplit:
    case ForwardKernelKind::kHopperSmall:
      if (!hopper) return CannotRun("forward kernel", fname, no_hopper);
      if (override.forward == ForwardKernelKind::kHopperSplit && !SplitApplies(shape)) {
        return CannotRun(
            "forward kernel", fname,
            absl::StrCat("it takes tiles of 1..", kSplitRows, " query rows and a pointwise act; ",
                         shape.softmax ? "softmax" : "pointwise", ", tiles of up to ", shape.max_tile_rows, " rows"));
      }
      if (override.forward == ForwardKernelKind::kHopperSmall && !SmallApplies(shape)) {
        return CannotRun(
            "forward kernel", fname,
            absl::StrCat("it takes tiles of 1..", kSmallRows, " query rows and a pointwise act; ",
                         shape.softmax ? "softmax" : "pointwise", ", tiles of up to ", shape.max_tile_rows, " rows"));
      }
      plan.forward = override.forward;
      break;
  }
  if (!shape.with_backward) return plan;  // the backward override applies to calls with one
  const bool stored_applies = !shape.broadcast_q && shape.stored_ds_bytes > 0;
  const absl::string_view bname = BackwardKernelName(override.backward);
  switch (override.backward) {
    case BackwardKernelKind::kAuto:
      if (!hopper || override.forward == ForwardKernelKind::kMmaSync) {
        plan.backward = BackwardKernelKind::kMmaSync;
      } else if (stored_applies && shape.stored_ds_bytes <= kStoredDsMaxBytes) {
        plan.backward = BackwardKernelKind::kHopperStoredDs;
      } else if (FusedDqApplies(shape)) {
        plan.backward = BackwardKernelKind::kHopperFusedDq;
      } else {
        plan.backward = BackwardKernelKind::kHopperRecompute;
      }
      break;
    case BackwardKernelKind::kMmaSync:
      plan.backward = BackwardKernelKind::kMmaSync;
      break;
    case BackwardKernelKind::kHopperRecompute:
    case BackwardKernelKind::kHopperStoredDs:
    case BackwardKernelKind::kHopperFusedDq:
      if (!hopper) return CannotRun("backward kernel", bname, no_hopper);
      if (override.backward == BackwardKernelKind::kHopperStoredDs && !stored_applies) {
        return CannotRun("backward kernel", bname,
                         shape.broadcast_q ? "not under broadcast_q" : "no query row has a valid key");
      }
      if (override.backward == BackwardKernelKind::kHopperFusedDq && !FusedDqApplies(shape)) {
        return CannotRun(
            "backward kernel", bname,
            absl::StrCat("it needs broadcast_q, H = Hkv, 1..", kFusedDqSeeds,
                         " seeds and K/V tiles; broadcast_q=", shape.broadcast_q, ", H=", shape.heads,
                         ", Hkv=", shape.kv_heads, ", seeds=", shape.seeds, ", K/V tiles=", shape.dkv_tiles));
      }
      plan.backward = override.backward;
      break;
  }
  return plan;
}

absl::string_view ForwardKernelName(ForwardKernelKind k) {
  switch (k) {
    case ForwardKernelKind::kAuto:
      return "auto";
    case ForwardKernelKind::kMmaSync:
      return "mma_sync";
    case ForwardKernelKind::kHopperWs:
      return "hopper_ws";
    case ForwardKernelKind::kHopperTma:
      return "hopper_tma";
    case ForwardKernelKind::kHopperSplit:
      return "hopper_split";
    case ForwardKernelKind::kHopperSmall:
      return "hopper_small";
  }
  return "?";
}

absl::string_view BackwardKernelName(BackwardKernelKind k) {
  switch (k) {
    case BackwardKernelKind::kAuto:
      return "auto";
    case BackwardKernelKind::kMmaSync:
      return "mma_sync";
    case BackwardKernelKind::kHopperRecompute:
      return "hopper_recompute";
    case BackwardKernelKind::kHopperStoredDs:
      return "hopper_stored_ds";
    case BackwardKernelKind::kHopperFusedDq:
      return "hopper_fused_dq";
  }
  return "?";
}

absl::StatusOr<ForwardKernelKind> ParseForwardKernel(absl::string_view name) {
  std::string names;
  for (ForwardKernelKind k : kForwardKernels) {
    if (ForwardKernelName(k) == name) return k;
    absl::StrAppend(&names, names.empty() ? "" : ", ", ForwardKernelName(k));
  }
  return absl::InvalidArgumentError(absl::StrCat("forward kernel=", name, ": unknown; one of ", names));
}

absl::StatusOr<BackwardKernelKind> ParseBackwardKernel(absl::string_view name) {
  std::string names;
  for (BackwardKernelKind k : kBackwardKernels) {
    if (BackwardKernelName(k) == name) return k;
    absl::StrAppend(&names, names.empty() ? "" : ", ", BackwardKernelName(k));
  }
  return absl::InvalidArgumentError(absl::StrCat("backward kernel=", name, ": unknown; one of ", names));
}

}  // namespace gemtb::gpu
