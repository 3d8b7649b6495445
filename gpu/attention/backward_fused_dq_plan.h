// Host side of the fused-dQ backward (backward_hopper_fused_dq.cuh): how many K/V tiles one chain
// takes and the workspace its dQ parts need (kernel_policy.h says when it runs). Host only, so that
// api.cc can size the workspace when the call is created and hand the same chain length to the launch.
#ifndef GEMTB_GPU_ATTENTION_BACKWARD_FUSED_DQ_PLAN_H_
#define GEMTB_GPU_ATTENTION_BACKWARD_FUSED_DQ_PLAN_H_

#include <cstdint>

#include "gpu/attention/kernel_policy.h"

namespace gemtb::gpu {

inline constexpr int kFusedDqRows = kFusedDqSeeds;  // the most query rows (seeds) it takes
inline constexpr int kFusedDqHeadDim = 128;
// One chain's dQᵀ part: head dim x seeds, fp32.
inline constexpr int64_t kFusedDqSlotFloats = int64_t{kFusedDqHeadDim} * kFusedDqRows;

// K/V tiles per chain: enough chains for 8 CTAs per resident slot (two per SM) over num_tiles x
// heads tiles, at most 16 tiles: fewer and longer chains than the recompute path's (16 CTAs per
// slot, at most 8; backward_hopper_chain_launch.cuh) since each chain also writes a 16 KB dQ part.
inline int FusedDqChainTiles(int64_t num_tiles, int64_t heads, int sms) {
  const int64_t n = num_tiles * heads / (2 * static_cast<int64_t>(sms < 1 ? 1 : sms) * 8);
  return static_cast<int>(n < 1 ? 1 : (n > 16 ? 16 : n));
}

inline int64_t FusedDqChains(int64_t num_tiles, int tiles_per_chain) {
  return (num_tiles + tiles_per_chain - 1) / tiles_per_chain;
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_BACKWARD_FUSED_DQ_PLAN_H_
