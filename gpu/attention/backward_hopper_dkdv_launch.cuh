// Launcher of the chained Hopper dK/dV kernel (backward_hopper_dkdv_chain.cuh): how many K/V tiles
// one CTA runs, and whether the chain runs at all rather than v3's one tile per CTA.
//
// GEMTB_DKDV_CHAIN=N (1..64) makes every call chain N tiles per CTA, =0 runs v3
// (backward_hopper_kernel.cuh); unset, kDkDvChainDefault decides (how one build times both and the
// check covers both).
#ifndef GEMTB_GPU_ATTENTION_BACKWARD_HOPPER_DKDV_LAUNCH_CUH_
#define GEMTB_GPU_ATTENTION_BACKWARD_HOPPER_DKDV_LAUNCH_CUH_

#include <cstdint>
#include <cstdlib>

#include "absl/status/status.h"
#include "gpu/attention/backward_hopper_dkdv_chain.cuh"
#include "gpu/common/cuda_check.cuh"

namespace gemtb::gpu {

inline constexpr bool kDkDvChainDefault = false;
inline constexpr int kDkDvChainMaxTiles = 8;
// Chains stay short enough that the launch still has this many CTAs per resident slot (two per SM):
// the hardware scheduler's balance over the heavy-first list is what v3 relied on.
inline constexpr int64_t kDkDvChainMinWaves = 16;

inline int DkDvSmCount() {
  int device = 0;
  int sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms < 1) {
    return 1;
  }
  return sms;
}

// Tiles per CTA for a launch of num_tiles x kv_heads tiles; 0: run v3.
inline int DkDvChainTiles(int64_t num_tiles, int kv_heads) {
  const char* env = std::getenv("GEMTB_DKDV_CHAIN");
  if (env != nullptr && *env != '\0') {
    const long n = std::strtol(env, nullptr, 10);
    return n < 0 ? 0 : (n > 64 ? 64 : static_cast<int>(n));
  }
  if (!kDkDvChainDefault) return 0;
  static const int sms = DkDvSmCount();
  const int64_t n = num_tiles * kv_heads / (2 * static_cast<int64_t>(sms) * kDkDvChainMinWaves);
  return static_cast<int>(n < 1 ? 1 : (n > kDkDvChainMaxTiles ? kDkDvChainMaxTiles : n));
}

template <ElementType E, HopperAct kAct>
absl::Status LaunchDkDvHopperChainAct(const BackwardParams& params, int num_tiles, int tiles_per_cta) {
  const auto kernel = DkDvHopperChainKernel<E, kAct>;
  const size_t smem = kHopperDkDvSmemBytes;
  const char* name = "attention backward dK/dV kernel (Hopper, chained tiles)";
  if (absl::Status s = CudaStatus(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)), name);
      !s.ok()) {
    return s;
  }
  const dim3 grid(static_cast<unsigned>((num_tiles + tiles_per_cta - 1) / tiles_per_cta),
                  static_cast<unsigned>(params.problem.kv_heads));
  kernel<<<grid, kHopperBwdThreads, smem>>>(params, tiles_per_cta, num_tiles);
  return CudaStatus(cudaGetLastError(), name);
}

// Launches the chained kernel and sets *launched, or leaves it false (nothing launched) when v3
// should run instead.
template <ElementType E>
absl::Status LaunchDkDvHopperChain(const BackwardParams& params, int64_t num_tiles, bool* launched) {
  *launched = false;
  if (num_tiles <= 0 || num_tiles > INT32_MAX) return absl::OkStatus();
  const int n = DkDvChainTiles(num_tiles, params.problem.kv_heads);
  if (n < 1) return absl::OkStatus();
  *launched = true;
  const int tiles = static_cast<int>(num_tiles);
  switch (params.problem.options.act) {
    case Activation::kSoftmax: return LaunchDkDvHopperChainAct<E, HopperAct::kSoftmax>(params, tiles, n);
    case Activation::kSilu: return LaunchDkDvHopperChainAct<E, HopperAct::kSilu>(params, tiles, n);
    case Activation::kGeluTanh: return LaunchDkDvHopperChainAct<E, HopperAct::kGeluTanh>(params, tiles, n);
    default: return LaunchDkDvHopperChainAct<E, HopperAct::kOther>(params, tiles, n);
  }
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_BACKWARD_HOPPER_DKDV_LAUNCH_CUH_
