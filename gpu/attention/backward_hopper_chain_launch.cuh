// Launchers of the chained Hopper dK/dV and dQ kernels (backward_hopper_dkdv_chain.cuh,
// backward_hopper_dq_chain.cuh): how many tiles one CTA runs, and whether a chain runs at all
// rather than v3's one tile per CTA.
//
// GEMTB_DKDV_CHAIN=N and GEMTB_DQ_CHAIN=N (1..64) make every call chain N tiles per CTA, =0 runs v3
// (backward_hopper_kernel.cuh). Unset, chains run under broadcast_q (both kernels,
// kBwdChainForBroadcastQ; PMA: every K/V tile is one query step, so a one-tile CTA was mostly
// fixed cost) and, once kDqChainForShortKeys is on, for dQ tiles of few key steps without a mask
// (kDqChainShortSteps); else v3.
// GEMTB_BWD_HEAD_MINOR=0/1 picks the chains' CTA order (the heads of one tile side by side, or
// v3's order: all tiles of head 0 first); unset, kBwdChainHeadMinorDefault.
#ifndef GEMTB_GPU_ATTENTION_BACKWARD_HOPPER_CHAIN_LAUNCH_CUH_
#define GEMTB_GPU_ATTENTION_BACKWARD_HOPPER_CHAIN_LAUNCH_CUH_

#include <cstdint>
#include <cstdlib>

#include "absl/status/status.h"
#include "gpu/attention/backward_chain_env.h"
#include "gpu/attention/backward_hopper_dkdv_chain.cuh"
#include "gpu/attention/backward_hopper_dq_chain.cuh"
#include "gpu/common/cuda_check.cuh"

namespace gemtb::gpu {

inline constexpr bool kBwdChainForBroadcastQ = true;
inline constexpr bool kBwdChainHeadMinorDefault = true;
// dQ tiles of at most kDqChainShortSteps 64-key steps (and no mask) run in chains of
// kDqChainShortTiles by default once kDqChainForShortKeys is on. Off: measured faster on cross at
// bf022de (forced by GEMTB_DQ_CHAIN=4) but not yet timed and checked as the default in a call of
// its own, and the same-run table at bf022de ran without it.
inline constexpr bool kDqChainForShortKeys = false;
inline constexpr int kDqChainShortSteps = 4;
inline constexpr int kDqChainShortTiles = 4;
inline constexpr int kBwdChainMaxTiles = 8;
// Chains stay short enough that the launch still has this many CTAs per resident slot (two per SM):
// the hardware scheduler's balance over the heavy-first list is what v3 relied on.
inline constexpr int64_t kBwdChainMinWaves = 16;

// Tiles per CTA for a launch of num_tiles x heads tiles: the variable `env_name` if set, else
// `fallback` (0: run v3; kBwdChainAuto: from the launch size).
inline constexpr int kBwdChainAuto = -1;
inline int BwdChainTiles(const char* env_name, int64_t num_tiles, int heads, int fallback) {
  if (const int asked = BwdChainTilesFromEnv(env_name); asked >= 0) return asked;
  if (fallback != kBwdChainAuto) return fallback;
  static const int sms = HopperSmCount();
  const int64_t n = num_tiles * heads / (2 * static_cast<int64_t>(sms) * kBwdChainMinWaves);
  return static_cast<int>(n < 1 ? 1 : (n > kBwdChainMaxTiles ? kBwdChainMaxTiles : n));
}

inline int BwdChainHeadMinor() {
  const char* env = std::getenv("GEMTB_BWD_HEAD_MINOR");
  if (env != nullptr && *env != '\0') return *env == '0' ? 0 : 1;
  return kBwdChainHeadMinorDefault ? 1 : 0;
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
  int head_minor = BwdChainHeadMinor();
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

// Launches the chained kernel and sets *launched, or leaves it false (nothing launched) when v3
// should run instead.
template <ElementType E>
absl::Status LaunchDkDvHopperChain(const BackwardParams& params, int64_t num_tiles, bool* launched) {
  *launched = false;
  if (num_tiles <= 0 || num_tiles > INT32_MAX) return absl::OkStatus();
  const bool chain = kBwdChainForBroadcastQ && params.problem.options.broadcast_q;
  const int n = BwdChainTiles("GEMTB_DKDV_CHAIN", num_tiles, params.problem.kv_heads, chain ? kBwdChainAuto : 0);
  if (n < 1) return absl::OkStatus();
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
  if (num_tiles <= 0 || num_tiles > INT32_MAX) return absl::OkStatus();
  // Short key ranges without a mask (cross attention: 256 keys, 4 steps per tile): chains of
  // kDqChainShortTiles (measured at bf022de: cross_gdpa_gelu bwd 4.37 -> 4.14 ms, cross_softmax
  // 3.74 -> 3.64; the dK/dV chains were slower there, so they stay off).
  const ProblemParams& pr = params.problem;
  const bool short_keys = kDqChainForShortKeys && pr.options.mask == MaskKind::kNone && params.dq_max_key_steps > 0 &&
                          params.dq_max_key_steps <= kDqChainShortSteps;
  const int fallback = kBwdChainForBroadcastQ && pr.options.broadcast_q ? kBwdChainAuto
                       : short_keys                                     ? kDqChainShortTiles
                                                                        : 0;
  const int n = BwdChainTiles("GEMTB_DQ_CHAIN", num_tiles, pr.heads, fallback);
  if (n < 1) return absl::OkStatus();
  *launched = true;
  const int tiles = static_cast<int>(num_tiles);
  return DispatchHopperActTanhApprox(params.problem.options,
                           [&]<HopperAct A>() { return LaunchDqHopperChainAct<E, A>(params, tiles, n); });
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_BACKWARD_HOPPER_CHAIN_LAUNCH_CUH_
