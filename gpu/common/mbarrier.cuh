// Shared-memory mbarriers (sm_90), named barriers and register reallocation for warp-specialised
// kernels: a producer warpgroup fills pipeline stages and signals "full" barriers, consumer
// warpgroups wait on them and signal "empty" barriers back, with no CTA-wide barrier per step.
// Device code only (the CPU emulation does not build it).
#ifndef GEMTB_GPU_COMMON_MBARRIER_CUH_
#define GEMTB_GPU_COMMON_MBARRIER_CUH_

#include <cstdint>

namespace gemtb::gpu::mbar {

// One thread initialises; a __syncthreads() afterwards makes the barrier visible to the CTA.
__device__ __forceinline__ void Init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// One arrival (release semantics: this thread's earlier shared-memory accesses happen before).
__device__ __forceinline__ void Arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar) : "memory");
}

// One arrival once every cp.async this thread issued so far has landed; .noinc: the arrival is one
// of the `count` the barrier was initialised with.
__device__ __forceinline__ void CpAsyncArrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// Waits until the phase of parity `parity` has completed (the k-th completion has parity k & 1).
__device__ __forceinline__ void Wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (done == 0);
}

// Named barriers (ids 1..15; 0 is __syncthreads): `threads` arrivals complete one use. Sync waits,
// Arrive only counts.
__device__ __forceinline__ void NamedSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void NamedArrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Register reallocation between warpgroups (sm_90a; needs a register cap at entry, i.e.
// __launch_bounds__(threads, 1), and every warp of the warpgroup executing it).
template <int kRegs>
__device__ __forceinline__ void RegDealloc() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void RegAlloc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

}  // namespace gemtb::gpu::mbar

#endif  // GEMTB_GPU_COMMON_MBARRIER_CUH_
