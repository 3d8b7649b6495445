// The stored-dS backward: the dS blocks (backward_stored_ds_plan.h says which calls keep them and where
// a block lies). The dK/dV kernel writes each step's dSᵀ (64 keys x 64 query rows, already rounded
// to the input type as its dK MMA's register A operand), the dQ pass reads dS (64 query rows x 64
// keys) as its dQ MMA's register A operand. A block is stored in exactly that reader's order:
//
//   16-byte chunk (w * 4 + kk) * 32 + lane = the four A words a[kk][0..3] of lane `lane` of warp w
//   of the dQ pass (rows 16w + g and 16w + g + 8, keys 16kk + 2t, +1, +8, +9; g = lane / 4,
//   t = lane % 4; gpu/common/mma.cuh's m16n8k16 A layout, which wgmma's register A operand shares),
//
// so the reader does one coalesced 16-byte load per k-step and no shuffles. The writer holds the
// transpose (its words pair two query rows of one key); lanes g and g ^ 1 (two keys) swap one word
// per word (shfl + prmt), after which each thread holds a whole chunk for one dQ lane and writes it
// as one 16-byte store (a warp writes 512 contiguous bytes): 16 shuffles, 16 prmt and 4 stores per
// thread and step, issued before the step's dV/dK MMAs (dsa is their A operand; PTX forbids
// touching it while they run).
#ifndef GEMTB_GPU_ATTENTION_BACKWARD_HOPPER_DS_LAYOUT_CUH_
#define GEMTB_GPU_ATTENTION_BACKWARD_HOPPER_DS_LAYOUT_CUH_

#include <cstdint>

#include "gpu/attention/backward_stored_ds_plan.h"
#include "gpu/attention/params.h"
#include "gpu/common/mma.cuh"

namespace gemtb::gpu {

// The block of (output sequence b, query head h, row block qb, key block kb): two table loads
// (backward_stored_ds_plan.h).
__device__ __forceinline__ int64_t HopperBwdDsBlockOffset(const BackwardParams& p, int b, int qb, int kb, int h) {
  const int64_t block = p.ds_block_base[p.ds_block_base[b] + qb] + kb;
  return (block * p.problem.heads + h) * kDsBlockElements;
}

// Writer (dK/dV kernel, warp `warp`): dsa[n >> 1][(n & 1) * 2 + h2] packs dSᵀ of key
// 16·warp + g + 8·h2 and query rows 8n + 2t, +1 (HopperBwdPack's layout).
__device__ __forceinline__ void HopperBwdStoreDsBlock(uint16_t* block, const uint32_t (&dsa)[4][4],
                                                      const LaneCoords& ln, int warp) {
  const bool odd = (ln.g & 1) != 0;
  // This thread ends up with query row 8n + 2t + odd and keys (g & ~1), +1: dQ lane (2t + odd) * 4 + g / 2.
  const int lane_dq = (2 * ln.t + (odd ? 1 : 0)) * 4 + (ln.g >> 1);
  uint4* dst = reinterpret_cast<uint4*>(block) + warp * 32 + lane_dq;
#pragma unroll
  for (int np = 0; np < 4; ++np) {  // dQ warp np: query rows 16np .. 16np + 15 (n = 2np, 2np + 1)
    uint32_t w[4];
#pragma unroll
    for (int reg = 0; reg < 4; ++reg) {  // a[kk][reg]: rows + 8 (reg & 1), keys + 8 (reg >> 1)
      const uint32_t mine = dsa[np][(reg & 1) * 2 + (reg >> 1)];
      const uint32_t other = __shfl_xor_sync(0xffffffffu, mine, 4);  // lane g ^ 1: the neighbouring key
      // Even g: (my key, row q) low, (key + 1, row q) high; odd g: (key - 1, row q + 1), (my key, row q + 1).
      w[reg] = odd ? __byte_perm(other, mine, 0x7632) : __byte_perm(mine, other, 0x5410);
    }
    __stcs(dst + np * 128, make_uint4(w[0], w[1], w[2], w[3]));  // streaming: read once, by the dQ pass
  }
}

// Reader (dQ pass, warp `warp`, lane `lane`): dS of query rows 16·warp + g (+8) and the block's
// 64 keys as four register A operands.
__device__ __forceinline__ void HopperBwdLoadDsBlock(uint32_t (&a)[4][4], const uint16_t* block, int warp, int lane) {
  const uint4* src = reinterpret_cast<const uint4*>(block) + warp * 128 + lane;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint4 v = __ldcs(src + kk * 32);
    a[kk][0] = v.x;
    a[kk][1] = v.y;
    a[kk][2] = v.z;
    a[kk][3] = v.w;
  }
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_BACKWARD_HOPPER_DS_LAYOUT_CUH_
