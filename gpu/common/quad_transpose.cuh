// A 4 x 4 transpose of 32-bit words across the four lanes of a quad (lanes 4g .. 4g + 3), in two
// butterfly stages of two shuffles each. The MMA accumulator layouts (mma.sync, wgmma) give lane t of
// a quad two adjacent columns of every 8-column block of a row; after packing those to 16-bit pairs
// and transposing groups of four blocks, lane t holds one whole 8-column block (16 bytes) of the row,
// so an epilogue writes a row with one 16-byte store per lane instead of four 4-byte ones, and every
// 32-byte sector it touches is written whole.
#ifndef GEMTB_GPU_COMMON_QUAD_TRANSPOSE_CUH_
#define GEMTB_GPU_COMMON_QUAD_TRANSPOSE_CUH_

#include <cstdint>

namespace gemtb::gpu {

// In: a[j] = M[t][j], where t = lane_t is this lane's index in its quad (lane % 4). Out: a[j] = M[j][t].
// Every lane of the warp must call it (full-warp shuffles) with the same control flow.
__device__ __forceinline__ void QuadTranspose4(uint32_t (&a)[4], int lane_t) {
  // Stage m = 2 swaps bit 1 of the row and column indices between lanes t and t ^ 2, stage m = 1 bit
  // 0 between t and t ^ 1: after both, element (row, col) sits in lane col, slot row. In a stage, a
  // lane keeps the word of each pair (j, j + m) whose bit m matches its own and trades the other.
#pragma unroll
  for (int m = 2; m >= 1; m /= 2) {
    const bool hi = (lane_t & m) != 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if ((j & m) != 0) continue;
      const uint32_t recv = __shfl_xor_sync(0xffffffffu, hi ? a[j] : a[j + m], m);
      if (hi) {
        a[j] = recv;
      } else {
        a[j + m] = recv;
      }
    }
  }
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_COMMON_QUAD_TRANSPOSE_CUH_
