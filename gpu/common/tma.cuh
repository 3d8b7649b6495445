// Tensor Memory Accelerator (sm_90) loads for warp-specialised kernels: one thread copies a 2-D box
// of a global tensor into shared memory (128-byte swizzled, the layout wgmma reads) and the copy
// completes on an mbarrier's transaction count, so a producer needs no per-chunk address arithmetic
// and no other thread's help. Device code only; the host side encodes the tensor maps
// (forward_hopper_tma_launch.cuh).
#ifndef GEMTB_GPU_COMMON_TMA_CUH_
#define GEMTB_GPU_COMMON_TMA_CUH_

#include <cuda.h>

#include <cstdint>

namespace gemtb::gpu::tma {

// One arrival on `bar` that also raises the bytes the current phase waits for by `bytes` (the TMA
// copies issued afterwards complete them).
__device__ __forceinline__ void ArriveExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
}

// The box at (x = column, y = row) of the 2-D tensor `map` into shared memory at `dst` (aligned
// to the swizzle's 1024-byte period), completing `bar`'s transactions with its size.
__device__ __forceinline__ void Load2d(uint32_t dst, const CUtensorMap* map, int x, int y, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
}

// Brings a tensor map (a __grid_constant__ kernel parameter) into the descriptor cache early.
__device__ __forceinline__ void Prefetch(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

}  // namespace gemtb::gpu::tma

#endif  // GEMTB_GPU_COMMON_TMA_CUH_
