// What the Hopper feed-forward kernels (ffn_forward_kernel.cuh, ffn_hidden_grad_kernel.cuh) share: the
// widths they take, bf16 values from their bits, and the store of a thread's share of a row from
// wgmma's accumulator layout.
// Device code only.
#ifndef GEMTB_GPU_TRAIN_FFN_HOPPER_ROWS_CUH_
#define GEMTB_GPU_TRAIN_FFN_HOPPER_ROWS_CUH_

#include <cstdint>

#include "gpu/common/mma.cuh"
#include "gpu/common/quad_transpose.cuh"
#include "model/common/element_type.h"

namespace gemtb::gpu::train::ffn_hopper {

// The widths both kernels take: the block's width d and the hidden columns a chunk.
constexpr int kD = 128;
constexpr int kChunk = 128;

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

#endif  // GEMTB_GPU_TRAIN_FFN_HOPPER_ROWS_CUH_
