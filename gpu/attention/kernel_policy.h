// Which kernels one attention call runs: ChooseKernels picks them from the call's shape, the one
// place that decides (as FlashAttention-3's heuristics do), and KernelOverride lets a test or a
// benchmark ask for a particular kernel instead. Host code only: api.cc calls it when a DeviceCall
// is created, and the launchers run what the plan says.
#ifndef GEMTB_GPU_ATTENTION_KERNEL_POLICY_H_
#define GEMTB_GPU_ATTENTION_KERNEL_POLICY_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gemtb::gpu {

// The forward kernels.
enum class ForwardKernelKind {
  kAuto,         // (override only) what ChooseKernels picks
  kMmaSync,      // forward_kernel.cuh: mma.sync, head dim 16, 32, 64 or 128; the only one without wgmma
  kHopperWs,     // forward_hopper_ws_kernel.cuh: warp-specialised, cp.async loads, one CTA per item
  kHopperTma,    // forward_hopper_tma_kernel.cuh: persistent, TMA loads (falls back to kHopperWs
                 // at launch when q, k or v is not 16-byte aligned)
  kHopperSplit,  // forward_hopper_split_kernel.cuh: tiles of <= kSplitRows rows, pointwise acts
  kHopperSmall,  // forward_hopper_small_kernel.cuh: tiles of <= kSmallRows rows, pointwise acts
};

// The backward kernels (a row-dot kernel runs first for softmax, and split dQ tiles are reduced
// after, whichever runs).
enum class BackwardKernelKind {
  kAuto,             // (override only) what ChooseKernels picks
  kMmaSync,          // backward_dkdv_kernel.cuh, backward_dq_kernel.cuh
  kHopperRecompute,  // backward_hopper_kernel.cuh: dK/dV, then a dQ pass that recomputes S and dP;
                     // under broadcast_q in chains of tiles per CTA (backward_hopper_*_chain.cuh)
  kHopperStoredDs,   // backward_hopper_dq_stored.cuh: dK/dV stores dS, dQ = dS K (not broadcast_q)
  kHopperFusedDq,    // backward_hopper_fused_dq.cuh: dQ inside the dK/dV chains (broadcast_q, no
                     // GQA, <= kFusedDqSeeds seeds)
};

// A caller's choice of kernels; kAuto leaves the choice to ChooseKernels. A kernel that cannot run
// the call is an InvalidArgument error, not a silent substitute. With backward kAuto, forward
// kMmaSync also takes the mma.sync backward (the reference pair the benchmark compares against).
struct KernelOverride {
  ForwardKernelKind forward = ForwardKernelKind::kAuto;
  BackwardKernelKind backward = BackwardKernelKind::kAuto;
};

inline constexpr int kSplitRows = 64;     // the most query rows per tile the split forward takes
inline constexpr int kSmallRows = 32;     // the most query rows per tile the small forward takes
inline constexpr int kFusedDqSeeds = 32;  // the most (broadcast) query rows the fused dQ takes
// The stored-dS backward's workspace limit: above it the dQ pass recomputes dS instead.
inline constexpr int64_t kStoredDsMaxBytes = int64_t{24} << 30;

// What ChooseKernels looks at.
struct KernelShape {
  int64_t head_dim = 0;
  bool hopper_built = false;  // HopperKernelsAvailable(): an sm_90a build (not the emulation)
  bool softmax = false;
  int32_t max_tile_rows = 0;  // query rows of the fullest forward tile of 128 rows (0: none)
  bool with_backward = false;
  bool broadcast_q = false;
  int64_t heads = 0, kv_heads = 0;
  int64_t seeds = 0;             // broadcast_q: the query rows every output sequence shares
  int64_t dkv_tiles = 0;         // K/V tiles of the backward
  int64_t stored_ds_bytes = -1;  // the stored-dS workspace (-1: none: broadcast_q, or no dS block)
};

struct KernelPlan {
  ForwardKernelKind forward = ForwardKernelKind::kMmaSync;
  BackwardKernelKind backward = BackwardKernelKind::kMmaSync;  // kMmaSync also when !with_backward
};

// The plan for `shape`, or InvalidArgument naming the overridden kernel that cannot run it.
//   forward:  head dim 128 on an sm_90a build: kHopperSmall where every tile has <= kSmallRows rows
//             and the act is pointwise, else kHopperSplit where <= kSplitRows rows and pointwise,
//             else kHopperTma; otherwise kMmaSync.
//   backward: kMmaSync where the Hopper forward cannot run (or the forward is forced to kMmaSync);
//             without broadcast_q kHopperStoredDs while its workspace is <= kStoredDsMaxBytes;
//             under broadcast_q kHopperFusedDq with no GQA, 1..kFusedDqSeeds seeds and K/V tiles;
//             else kHopperRecompute.
absl::StatusOr<KernelPlan> ChooseKernels(const KernelShape& shape, const KernelOverride& override = {});

absl::string_view ForwardKernelName(ForwardKernelKind k);    // "auto", "mma_sync", "hopper_ws", ...
absl::string_view BackwardKernelName(BackwardKernelKind k);  // "auto", "mma_sync", "hopper_recompute", ...
// The kernel named `name` (as the names above), or InvalidArgument listing the names.
absl::StatusOr<ForwardKernelKind> ParseForwardKernel(absl::string_view name);
absl::StatusOr<BackwardKernelKind> ParseBackwardKernel(absl::string_view name);

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_KERNEL_POLICY_H_
