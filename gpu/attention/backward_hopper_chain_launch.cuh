// Launchers of the chained Hopper dK/dV and dQ kernels (backward_hopper_dkdv_chain.cuh,
// backward_hopper_dq_chain.cuh), which the recompute backward runs under broadcast_q (PMA: every
// K/V tile is one query step, so a one-tile CTA was mostly fixed cost): how many tiles one CTA
// runs, from the launch size. Elsewhere the recompute backward runs one tile per CTA
// (backward_hopper_kernel.cuh). The chains' CTAs take the heads of one tile side by side
// (head-minor) unless that grid would exceed 2^31 - 1 CTAs.
#ifndef GEMTB_GPU_ATTENTION_BACKWARD_HOPPER_CHAIN_LAUNCH_CUH_
#define GEMTB_GPU_ATTENTION_BACKWARD_HOPPER_CHAIN_LAUNCH_CUH_

#include <cstdint>

#include "absl/status/status.h"
#include "gpu/attention/backward_hopper_dkdv_chain.cuh"
#include "gpu/attention/backward_hopper_dq_chain.cuh"
#include "gpu/common/cuda_check.cuh"

namespace gemtb::gpu {

inline constexpr int kBwdChainMaxTiles = 8;
// Chains stay short enough that the launch still has this many CTAs per resident slot (two per SM):
// the hardware scheduler's balance over the heavy-first list is what one tile per CTA relies on.
inline constexpr int64_t kBwdChainMinWaves = 16;

// Tiles per CTA for a launch of num_tiles x heads tiles.
inline int BwdChainTiles(int64_t num_tiles, int heads) {
  static const int sms = HopperSmCount();
  const int64_t n = num_tiles * heads / (2 * static_cast<int64_t>(sms) * kBwdChainMinWaves);
  return static_cast<int>(n < 1 ? 1 : (n > kBwdChainMaxTiles ? kBwdChainMaxTiles : n));
}

// The grid of a chained launch: chains x heads, in one dimension when head-minor (and when that
// dimension stays below 2^31; otherwise head_minor is cleared).
inline dim3 BwdChainGrid(int num_tiles, int tiles_per_cta, int heads, int& head_minor) {
  const int64_t chains = (static_cast<int64_t>(num_tiles) + tiles_per_cta - 1) / tiles_per_cta;
  if (chains * heads > INT32_MAX) head_minor = 0;
  return head_minor != 0 ? dim3(static_cast<unsigned>(chains * heads))
                         : dim3(static_cast<unsigned>(chains), static_cast<unsigned>(heads));
}

// One chained launch of `kernel` (DkDvHopperChainKernel or DqHopperChainKernel) over num_tiles
// tiles of each of `heads` heads, tiles_per_cta per CTA; `name` names it in errors.
using BwdChainKernel = void (*)(BackwardParams, int, int, int);
inline absl::Status LaunchBwdChainKernel(BwdChainKernel kernel, size_t smem, const char* name,
                                         const BackwardParams& params, int num_tiles, int tiles_per_cta, int heads) {
  if (absl::Status s = CudaStatus(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)), name);
      !s.ok()) {
    return s;
  }
  int head_minor = 1;
  const dim3 grid = BwdChainGrid(num_tiles, tiles_per_cta, heads, head_minor);
  kernel<<<grid, kHopperBwdThreads, smem>>>(params, tiles_per_cta, num_tiles, head_minor);
  return CudaStatus(cudaGetLastError(), name);
}

template <ElementType E, HopperAct kAct>
absl::Status LaunchDkDvHopperChainAct(const BackwardParams& params, int num_tiles, int tiles_per_cta) {
  return LaunchBwdChainKernel(DkDvHopperChainKernel<E, kAct>, kHopperDkDvSmemBytes,
                              "attention backward dK/dV kernel (Hopper, chained tiles)", params, num_tiles,
                              tiles_per_cta, params.problem.kv_heads);
}

// Launches the chained kernel under broadcast_q and sets *launched, or leaves it false (nothing
// launched): then one tile per CTA runs instead.
template <ElementType E>
absl::Status LaunchDkDvHopperChain(const BackwardParams& params, int64_t num_tiles, bool* launched) {
  *launched = false;
  if (!params.problem.options.broadcast_q || num_tiles <= 0 || num_tiles > INT32_MAX) return absl::OkStatus();
  const int n = BwdChainTiles(num_tiles, params.problem.kv_heads);
  *launched = true;
  const int tiles = static_cast<int>(num_tiles);
  return DispatchHopperActTanhApprox(params.problem.options,
                           [&]<HopperAct A>() { return LaunchDkDvHopperChainAct<E, A>(params, tiles, n); });
}

template <ElementType E, HopperAct kAct>
absl::Status LaunchDqHopperChainAct(const BackwardParams& params, int num_tiles, int tiles_per_cta) {
  return LaunchBwdChainKernel(DqHopperChainKernel<E, kAct>, kHopperDqSmemBytes,
                              "attention backward dQ kernel (Hopper, chained tiles)", params, num_tiles, tiles_per_cta,
                              params.problem.heads);
}

template <ElementType E>
absl::Status LaunchDqHopperChain(const BackwardParams& params, int64_t num_tiles, bool* launched) {
  *launched = false;
  if (!params.problem.options.broadcast_q || num_tiles <= 0 || num_tiles > INT32_MAX) return absl::OkStatus();
  const int n = BwdChainTiles(num_tiles, params.problem.heads);
  *launched = true;
  const int tiles = static_cast<int>(num_tiles);
  return DispatchHopperActTanhApprox(params.problem.options,
                           [&]<HopperAct A>() { return LaunchDqHopperChainAct<E, A>(params, tiles, n); });
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_BACKWARD_HOPPER_CHAIN_LAUNCH_CUH_
