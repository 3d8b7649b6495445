// Cooperative copies of row tiles between global and shared memory, 16 bytes per access.
#ifndef GEMTB_GPU_COMMON_TILE_IO_CUH_
#define GEMTB_GPU_COMMON_TILE_IO_CUH_

#include <cstdint>
#include <cstring>

namespace gemtb::gpu {

// Asynchronous 16-byte copies from global to shared memory (cp.async.cg: through L2, past L1), so a
// CTA can stage its next tile while it computes on the current one. A thread commits the copies it
// issued as a group and waits until at most kPending of its groups are still in flight; a
// __syncthreads after the wait makes every thread's copies visible to the CTA. The CPU emulation
// copies at once (commit and wait do nothing).
__device__ __forceinline__ void CopyAsync16(void* dst, const void* src) {
#ifdef __CUDACC__
  const auto at = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(at), "l"(src) : "memory");
#else
  std::memcpy(dst, src, 16);
#endif
}
__device__ __forceinline__ void CopyAsyncCommit() {
#ifdef __CUDACC__
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int kPending>
__device__ __forceinline__ void CopyAsyncWait() {
#ifdef __CUDACC__
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

// Issues the copies of a [kRows, kCols] tile of 16-bit elements from `src` (rows `src_stride` elements
// apart: an int, the tiles being slices of weights) to `dst` (rows `ld` elements apart) with
// CopyAsync16; the caller commits and waits. kCols, ld and src_stride must be multiples of 8, src and
// dst 16-byte aligned. Every thread of the block takes part (kThreads of them).
template <int kRows, int kCols, int kThreads>
__device__ __forceinline__ void CopyRowsAsync(uint16_t* dst, int ld, const uint16_t* src, int src_stride) {
  static_assert(kCols % 8 == 0, "rows are copied in 16-byte chunks");
  constexpr int kChunks = kCols / 8;
  for (int idx = static_cast<int>(threadIdx.x); idx < kRows * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = idx % kChunks;
    CopyAsync16(dst + r * ld + c * 8, src + r * src_stride + c * 8);
  }
}

// Copies rows [0, valid_rows) of a [kRows, kCols] tile of 16-bit elements from `src` (rows
// `src_stride` elements apart) into `dst` (rows `ld` elements apart) and zero-fills rows
// [valid_rows, kRows): rows past a sequence end belong to the next sequence, and zeros
// keep 0 * garbage out of the matmuls. kCols, ld and src_stride must be multiples of 8, src and dst
// 16-byte aligned. Every thread of the block takes part (kThreads of them).
template <int kRows, int kCols, int kThreads>
__device__ __forceinline__ void LoadRowsZeroFill(uint16_t* dst, int ld, const uint16_t* src,
                                                 int64_t src_stride, int valid_rows) {
  static_assert(kCols % 8 == 0, "rows are copied in 16-byte chunks");
  constexpr int kChunks = kCols / 8;
  for (int idx = static_cast<int>(threadIdx.x); idx < kRows * kChunks; idx += kThreads) {
    const int r = idx / kChunks;
    const int c = idx % kChunks;
    uint4 value = make_uint4(0u, 0u, 0u, 0u);
    if (r < valid_rows) value = *reinterpret_cast<const uint4*>(src + r * src_stride + c * 8);
    *reinterpret_cast<uint4*>(dst + r * ld + c * 8) = value;
  }
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_COMMON_TILE_IO_CUH_
