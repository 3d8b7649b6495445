// Lets a host C++ compiler build the attention kernels' headers (gpu/attention/*_kernel.cuh) for
// the fiber emulation: CUDA's qualifiers become no-ops, threadIdx/blockIdx read the running fiber,
// __syncthreads and __shfl_xor_sync are collectives of fiber_block.h. Include it first, and never
// together with the CUDA runtime headers (their vector types would clash).
#ifndef GEMTB_TESTS_GPU_EMULATION_CUDA_SHIM_H_
#define GEMTB_TESTS_GPU_EMULATION_CUDA_SHIM_H_

#ifdef __CUDACC__
#error "cuda_shim.h is for host compilers only"
#endif

#include <math.h>

#include <algorithm>
#include <cstdint>

#include "tests/gpu/emulation/fiber_block.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#define __align__(n)
#define threadIdx (::gemtb::emu::ThreadIdx())
#define blockIdx (::gemtb::emu::BlockIdx())

namespace gemtb::gpu {

using std::max;
using std::min;

struct uint4 {
  uint32_t x, y, z, w;
};
inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return {x, y, z, w}; }

inline void __syncthreads() { emu::Barrier(); }

inline float __shfl_xor_sync(unsigned /*mask*/, float value, int lane_mask) {
  float all[32];
  emu::WarpExchange(&value, sizeof(value), all);
  return all[(emu::ThreadIdx().x & 31u) ^ static_cast<unsigned>(lane_mask)];
}

}  // namespace gemtb::gpu

#endif  // GEMTB_TESTS_GPU_EMULATION_CUDA_SHIM_H_
