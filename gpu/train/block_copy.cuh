// A block's copy of a contiguous span between global and shared memory, for kernels whose threads
// compute on a layout (a lane per strided element, a few lanes per row) that makes narrow, scattered
// loads if they read global memory themselves. Device code only, built by nvcc and by the CPU fiber
// emulation (tests/gpu/emulation/cuda_shim.h): it moves bytes and computes nothing, so a kernel that
// stages its rows through it keeps every value.
#ifndef GEMTB_GPU_TRAIN_BLOCK_COPY_CUH_
#define GEMTB_GPU_TRAIN_BLOCK_COPY_CUH_

#include <cstdint>

namespace gemtb::gpu::train {

// Copies `units` 16-byte units with every thread of a block of kThreads: unit i of dst from unit
// source(i) of src, each thread issuing kUnroll loads before its first store, so that a block keeps
// several loads in flight. The caller synchronises the block before reading `dst`.
template <int kThreads, typename Source>
__device__ inline void BlockCopyUnits(uint4* dst, const uint4* src, int units, Source source) {
  constexpr int kUnroll = 4;
  const auto tid = static_cast<int>(threadIdx.x);
  for (int base = 0; base < units; base += kThreads * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * kThreads + tid;
      if (i < units) v[u] = src[source(i)];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * kThreads + tid;
      if (i < units) dst[i] = v[u];
    }
  }
}

// Copies `count` elements of T from `src` to `dst` with every thread of a block of kThreads. Where
// both pointers and the span's bytes are multiples of 16, by 16-byte units (BlockCopyUnits); otherwise
// one element at a time (still coalesced). The caller synchronises the block before reading `dst`.
template <int kThreads, typename T>
__device__ inline void BlockCopy(T* dst, const T* src, int count) {
  const int64_t bytes = static_cast<int64_t>(count) * static_cast<int64_t>(sizeof(T));
  if (((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) % 16 == 0) && bytes % 16 == 0) {
    BlockCopyUnits<kThreads>(reinterpret_cast<uint4*>(dst), reinterpret_cast<const uint4*>(src),
                             static_cast<int>(bytes / 16), [](int i) { return i; });
    return;
  }
  for (int i = static_cast<int>(threadIdx.x); i < count; i += kThreads) dst[i] = src[i];
}

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_BLOCK_COPY_CUH_
