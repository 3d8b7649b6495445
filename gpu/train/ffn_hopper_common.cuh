// What the Hopper feed-forward kernels (ffn_forward_kernel.cuh, ffn_hidden_grad_kernel.cuh) share: the
// widths they take, their persistent walk over row tiles and its pipeline's mbarriers, bf16 values
// from their bits, and the store of a thread's share of a row from wgmma's accumulator layout.
// Device code only.
#ifndef GEMTB_GPU_TRAIN_FFN_HOPPER_COMMON_CUH_
#define GEMTB_GPU_TRAIN_FFN_HOPPER_COMMON_CUH_

#include <cstdint>

#include "gpu/common/mbarrier.cuh"
#include "gpu/common/mma.cuh"
#include "gpu/common/quad_transpose.cuh"
#include "model/common/element_type.h"

namespace gemtb::gpu::train::ffn_hopper {

// The widths both kernels take: the block's width d and the hidden columns a chunk.
constexpr int kD = 128;
constexpr int kChunk = 128;

// Both are persistent: CTA c takes the tiles of kRows rows c, c + gridDim.x, ...; `local` counts a
// CTA's tiles.
template <int kRows>
__device__ __forceinline__ int MyTiles(int64_t n) {
  const int64_t tiles = (n + kRows - 1) / kRows;
  return static_cast<int>((tiles - blockIdx.x + gridDim.x - 1) / gridDim.x);
}
template <int kRows>
__device__ __forceinline__ int64_t TileFirstRow(int local) {
  return (static_cast<int64_t>(blockIdx.x) + static_cast<int64_t>(local) * gridDim.x) * kRows;
}

// Their pipeline's mbarriers, from `base` (8 bytes each): a "full" and an "empty" one for each of
// kBuffers buffers of a tile's rows and for each of kStages stages of a chunk. A full one completes
// when the producer warpgroup's 128 threads' copies landed, an empty one when the two consumer
// warpgroups' 8 warps are done with what it guards. The k-th use of buffer or stage i (k counted from
// 0 over the CTA's tiles, or chunks) waits on full with parity k & 1 and, from k = 1, the producer on
// empty with parity (k - 1) & 1.
template <int kBuffers, int kStages>
struct PipelineBarriers {
  static constexpr int kCount = 2 * kBuffers + 2 * kStages;
  uint32_t base;
  __device__ __forceinline__ uint32_t TileFull(int buffer) const { return At(buffer); }
  __device__ __forceinline__ uint32_t TileEmpty(int buffer) const { return At(kBuffers + buffer); }
  __device__ __forceinline__ uint32_t Full(int stage) const { return At(2 * kBuffers + stage); }
  __device__ __forceinline__ uint32_t Empty(int stage) const { return At(2 * kBuffers + kStages + stage); }
  // By one thread, before the CTA's one __syncthreads.
  __device__ __forceinline__ void Init() const {
    for (int i = 0; i < kBuffers + kStages; ++i) {
      mbar::Init(i < kBuffers ? TileFull(i) : Full(i - kBuffers), 128);
      mbar::Init(i < kBuffers ? TileEmpty(i) : Empty(i - kBuffers), 8);
    }
  }

 private:
  __device__ __forceinline__ uint32_t At(int i) const { return base + 8u * static_cast<uint32_t>(i); }
};

// A consumer warp's release of a buffer or stage: one arrival from its lane 0 once the whole warp is
// done.
__device__ __forceinline__ void WarpRelease(uint32_t bar) {
  __syncwarp();
  if ((threadIdx.x & 31) == 0) mbar::Arrive(bar);
}

using Bf16 = Storage<ElementType::kBFloat16>;

__device__ __forceinline__ float Bf16Value(uint16_t bits) { return Bf16::ToFloat(bits); }

// One thread's share of a row's kWords * 8 columns, w[i] holding columns 8i + 2t and 8i + 2t + 1 (the
// accumulator layout), into dst (the row's first of those columns in a bf16 array): after a quad
// transpose of each four words, 16 bytes a lane, so a quad writes 64 contiguous bytes. Every lane
// calls it (shuffles); only valid rows store.
template <int kWords>
__device__ __forceinline__ void StoreRowWords(const uint32_t (&w)[kWords], bool valid, uint16_t* dst, int lane_t) {
  static_assert(kWords % 4 == 0, "whole quads of words");
#pragma unroll
  for (int k = 0; k < kWords / 4; ++k) {
    uint32_t block[4] = {w[4 * k], w[4 * k + 1], w[4 * k + 2], w[4 * k + 3]};
    QuadTranspose4(block, lane_t);  // columns 8 (4k + t) .. 8 (4k + t) + 7
    if (valid) {
      *reinterpret_cast<uint4*>(dst + (4 * k + lane_t) * 8) = make_uint4(block[0], block[1], block[2], block[3]);
    }
  }
}

}  // namespace gemtb::gpu::train::ffn_hopper

#endif  // GEMTB_GPU_TRAIN_FFN_HOPPER_COMMON_CUH_
