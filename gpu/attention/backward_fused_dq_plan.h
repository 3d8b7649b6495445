// Host side of backward v6 (backward_hopper_fused_dq.cuh): when it runs, how many K/V tiles one
// chain takes, and the workspace its dQ parts need. Host only, so that api.cc can size the
// workspace when the call is created and hand the same chain length to the launch.
#ifndef GEMTB_GPU_ATTENTION_BACKWARD_FUSED_DQ_PLAN_H_
#define GEMTB_GPU_ATTENTION_BACKWARD_FUSED_DQ_PLAN_H_

#include <cstdint>
#include <cstdlib>

#include "gpu/attention/backward_chain_env.h"

namespace gemtb::gpu {

inline constexpr int kFusedDqRows = 32;  // the most query rows (seeds) v6 takes
inline constexpr int kFusedDqHeadDim = 128;
// One chain's dQᵀ part: head dim x seeds, fp32.
inline constexpr int64_t kFusedDqSlotFloats = int64_t{kFusedDqHeadDim} * kFusedDqRows;

// GEMTB_BWD_FUSED_DQ=0/1 overrides kFusedDqDefault.
inline constexpr bool kFusedDqDefault = true;
inline bool FusedDqEnabled() {
  const char* env = std::getenv("GEMTB_BWD_FUSED_DQ");
  if (env != nullptr && *env != '\0') return *env != '0';
  return kFusedDqDefault;
}

// Whether v6 runs: the Hopper backward, broadcast_q, no GQA (a chain's steps then all add to one
// query head), head dim 128, at most kFusedDqRows seeds, and not switched off.
inline bool FusedDqApplies(bool hopper_backward, bool broadcast_q, int64_t heads, int64_t kv_heads, int64_t d,
                           int64_t seeds) {
  return hopper_backward && broadcast_q && heads == kv_heads && d == kFusedDqHeadDim && seeds >= 1 &&
         seeds <= kFusedDqRows && FusedDqEnabled();
}

// K/V tiles per chain: GEMTB_DKDV_CHAIN if set to 1..64 (0, v4's "no chain", means the default
// here), else enough chains for 8 CTAs per resident slot (two per SM) over num_tiles x heads tiles,
// at most 16 tiles: fewer and longer chains than v4's (16 CTAs per slot, at most 8) since each chain
// also writes a 16 KB dQ part.
inline int FusedDqChainTiles(int64_t num_tiles, int64_t heads, int sms) {
  if (const int asked = BwdChainTilesFromEnv("GEMTB_DKDV_CHAIN"); asked >= 1) return asked;
  const int64_t n = num_tiles * heads / (2 * static_cast<int64_t>(sms < 1 ? 1 : sms) * 8);
  return static_cast<int>(n < 1 ? 1 : (n > 16 ? 16 : n));
}

inline int64_t FusedDqChains(int64_t num_tiles, int tiles_per_chain) {
  return (num_tiles + tiles_per_chain - 1) / tiles_per_chain;
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_BACKWARD_FUSED_DQ_PLAN_H_
