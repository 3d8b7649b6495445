// A block's copy of a contiguous span between global and shared memory, for kernels whose threads
// compute on a layout (a lane per strided element, a few lanes per row) that makes narrow, scattered
// loads if they read global memory themselves. Device code only, built by nvcc and by the CPU fiber
// emulation (tests/gpu/emulation/cuda_shim.h): it moves bytes and computes nothing, so a kernel that
// stages its rows through it keeps every value.
#ifndef GEMTB_GPU_TRAIN_BLOCK_COPY_CUH_
#define GEMTB_GPU_TRAIN_BLOCK_COPY_CUH_

#include <cstdint>

namespace gemtb::gpu::train {

// Copies `count` elements of T from `src` to `dst` with every thread of a block of kThreads. Where
// both pointers and the span's bytes are multiples of 16, a thread moves 16 bytes at a time and issues
// kUnroll loads before its first store, so that a block keeps several loads in flight; otherwise one
// element at a time (still coalesced). The caller synchronises the block before reading `dst`.
template <int kThreads, typename T>
__device__ inline void BlockCopy(T* dst, const T* src, int count) {
  constexpr int kUnroll = 4;
  const int64_t bytes = static_cast<int64_t>(count) * static_cast<int64_t>(sizeof(T));
  const auto tid = static_cast<int>(threadIdx.x);
  if (((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) % 16 == 0) && bytes % 16 == 0) {
    const int n = static_cast<int>(bytes / 16);
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (int base = 0; base < n; base += kThreads * kUnroll) {
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * kThreads + tid;
        if (i < n) v[u] = s[i];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * kThreads + tid;
        if (i < n) d[i] = v[u];
      }
    }
    return;
  }
  for (int i = tid; i < count; i += kThreads) dst[i] = src[i];
}

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_BLOCK_COPY_CUH_
