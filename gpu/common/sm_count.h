// The current device's multiprocessor count, for host code that sizes persistent launches and deals
// work over the SMs (the persistent forward, the backward chains, the split forward's snake deal, the
// fused-dQ backward's chain length, the Hopper feed-forward kernels' grid). Host only: api.cc includes
// it as well as the launchers.
#ifndef GEMTB_GPU_COMMON_SM_COUNT_H_
#define GEMTB_GPU_COMMON_SM_COUNT_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gemtb::gpu {

// 1 when the runtime cannot say.
inline int HopperSmCount() {
  int device = 0;
  int sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms < 1) {
    return 1;
  }
  return sms;
}

// The grid of a persistent kernel that holds one CTA an SM and walks `tiles` tiles: min(tiles, SMs).
inline unsigned PersistentGrid(int64_t tiles) {
  const int sms = HopperSmCount();
  return static_cast<unsigned>(tiles < sms ? tiles : sms);
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_COMMON_SM_COUNT_H_
