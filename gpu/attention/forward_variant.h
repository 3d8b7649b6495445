// Which persistent forward runs (host only, so that api.cc can name it and the launcher can pick
// it from one place): the version of the warp-specialised forward and the split kernel's mode, each
// a compiled default that an environment variable overrides, so that one build can time and check
// every variant.
#ifndef GEMTB_GPU_ATTENTION_FORWARD_VARIANT_H_
#define GEMTB_GPU_ATTENTION_FORWARD_VARIANT_H_

#include <cstdint>
#include <cstdlib>

namespace gemtb::gpu {

// A 0/1 switch: the variable `name` set to exactly "0" or "1" overrides `fallback`.
inline bool EnvSwitch(const char* name, bool fallback) {
  const char* env = std::getenv(name);
  if (env != nullptr && (env[0] == '0' || env[0] == '1') && env[1] == '\0') return env[0] == '1';
  return fallback;
}

// The warp-specialised forward: 4 (forward_hopper_ws_kernel.cuh), or forward_hopper_tma_launch.cuh's
// 5, 6 or 7 (v6: v5 with the elementwise diet of forward_tma_elementwise.cuh; v7: v6 with softmax's
// epilogue as one multiply per output, other acts as v6). GEMTB_FORWARD_WS=v4..v7 overrides the
// default. v7 is the default since bc34b64 (checked with 12,000 cases in the same-run call at bf022de).
inline constexpr int kForwardWsDefaultVersion = 7;
inline int ForwardWsVersion() {
  const char* env = std::getenv("GEMTB_FORWARD_WS");
  if (env != nullptr && env[0] == 'v' && env[1] >= '4' && env[1] <= '7' && env[2] == '\0') return env[1] - '0';
  return kForwardWsDefaultVersion;
}
inline bool ForwardHopperTmaEnabled() { return ForwardWsVersion() >= 5; }

// v5-v7 hand each item's tile and sequence from the producer to the consumers through a
// shared-memory ring (ForwardItem, forward_hopper_tma_kernel.cuh), as the split kernel does since
// v8.1, instead of every consumer warp loading them from global memory at each item's start.
// GEMTB_FORWARD_RING=0/1 overrides kForwardRingDefault. On since session 11: on the H200 (393b19d,
// alternating in one call, forward medians) block64_softmax 4.73 -> 4.49 ms, cross_softmax 1.122 ->
// 1.055, self_softmax 2.40 -> 2.35, the pointwise cases within noise; its 12,000-case check passed.
inline constexpr bool kForwardRingDefault = true;
inline bool ForwardItemRing() { return EnvSwitch("GEMTB_FORWARD_RING", kForwardRingDefault); }

// The Hopper forwards' epilogue writes O as one 16-byte store per lane and 8 columns (a quad
// transpose of the packed accumulator, StoreHopperRows) where O is 16-byte aligned, instead of
// 4-byte stores. GEMTB_FORWARD_WIDE_STORES=0/1 overrides kForwardWideStoresDefault.
inline constexpr bool kForwardWideStoresDefault = true;
inline bool ForwardWideStores() { return EnvSwitch("GEMTB_FORWARD_WIDE_STORES", kForwardWideStoresDefault); }

// v5-v7's producer loads each item's first K/V step before the item's Q, rather than after Q's wait
// for the previous tile (forward_hopper_tma_kernel.cuh). GEMTB_FORWARD_KV_FIRST=0/1 overrides
// kForwardKvFirstDefault.
inline constexpr bool kForwardKvFirstDefault = true;
inline bool ForwardKvFirst() { return EnvSwitch("GEMTB_FORWARD_KV_FIRST", kForwardKvFirstDefault); }

// v5-v7's tiles ordered by K/V steps, then sequence and row (OrderByStepsThenSequence,
// tile_scheduler.h) instead of by valid rows x keys, heaviest first. GEMTB_FORWARD_STEP_ORDER=0/1
// overrides kForwardStepOrderDefault. On by default since 92fd6e5's call (H200, alternating in one
// call, two rounds): 1-5% off every v7 case but dense, whose tiles all have the same steps and so
// keep the same order either way; its 500-per-family check ran with it (12,000 cases, 0 failures;
// tools/bench/NOTES.md "Session 13").
inline constexpr bool kForwardStepOrderDefault = true;
inline bool ForwardStepOrder() { return EnvSwitch("GEMTB_FORWARD_STEP_ORDER", kForwardStepOrderDefault); }

// The split kernel (forward_hopper_split_kernel.cuh, "v8") for launches whose tiles all have at
// most kSplitRows query rows and a pointwise act (PMA). GEMTB_FORWARD_SPLIT: 0 keeps v6/v7 there,
// 1 the consumers taking alternate K/V steps, 2 both consumers on every step, 64 keys each; unset
// or anything else, kForwardSplitDefault. Mode 2 is the default: on the H200, in one call
// (40cb14a), pma's forward took 0.359 ms with 2, 0.374 with 1 and 0.468 with v7; the 500-case
// check of the f899e66 call (12,000 cases, 0 failures) ran with 2 as the default
// (tools/bench/NOTES.md, "Forward v8").
inline constexpr int kSplitRows = 64;  // query rows of a tile the split kernel covers
inline constexpr int kForwardSplitDefault = 2;
inline int ForwardSplitMode() {
  const char* env = std::getenv("GEMTB_FORWARD_SPLIT");
  if (env != nullptr && env[0] >= '0' && env[0] <= '2' && env[1] == '\0') return env[0] - '0';
  return kForwardSplitDefault;
}
// The split kernel's item ring (forward_hopper_split_kernel.cuh, kItemRing): the producer hands
// each item's tile and sequence to the consumers through shared memory, loaded one item ahead.
// GEMTB_SPLIT_RING=0/1 overrides kSplitRingDefault. On by default since pma's forward went from
// 0.360 to 0.332 ms with it in one call (23da16d), whose 12,000-case check ran with it on.
inline constexpr bool kSplitRingDefault = true;
inline bool ForwardSplitRing() { return EnvSwitch("GEMTB_SPLIT_RING", kSplitRingDefault); }

// The split kernel's tiles dealt in a snake (tile_scheduler.h, DealInSnakeBands) when the head
// count divides the SM count (CTA c then takes tiles c / heads + k * sms / heads of its head).
// GEMTB_SPLIT_SNAKE=0/1 overrides kSplitSnakeDefault.
inline constexpr bool kSplitSnakeDefault = true;
inline bool ForwardSplitSnake() { return EnvSwitch("GEMTB_SPLIT_SNAKE", kSplitSnakeDefault); }

// Whether a launch whose tiles have at most `max_tile_rows` query rows runs the split kernel.
inline bool ForwardSplitApplies(int max_tile_rows, bool softmax) {
  return ForwardWsVersion() >= 6 && max_tile_rows > 0 && max_tile_rows <= kSplitRows && !softmax &&
         ForwardSplitMode() > 0;
}

// The small forward (forward_hopper_small_kernel.cuh, "v9": one warpgroup per CTA, two CTAs per SM,
// one (tile, head) each) for split launches whose tiles all have at most kSmallRows query rows.
// GEMTB_FORWARD_SMALL=0/1 overrides kForwardSmallDefault (on: pma's forward 0.302-0.304 ms against
// the split kernel's 0.327, alternating in one call; tools/bench/NOTES.md "Session 9").
inline constexpr int kSmallRows = 32;
inline constexpr bool kForwardSmallDefault = true;
// Its cp.async stages: 3 (two CTAs per SM) or 2 (three CTAs per SM); GEMTB_FORWARD_SMALL_STAGES=2/3
// overrides kSmallStagesDefault.
inline constexpr int kSmallStagesDefault = 3;
inline int ForwardSmallStages() {
  const char* env = std::getenv("GEMTB_FORWARD_SMALL_STAGES");
  if (env != nullptr && (env[0] == '2' || env[0] == '3') && env[1] == '\0') return env[0] - '0';
  return kSmallStagesDefault;
}
// v10: v9 with persistent CTAs (as many as fit at once, a multiple of the head count so that each
// keeps one head) whose cp.async pipeline runs on across items: the next item's K/V loads while this
// one's last steps compute, instead of each CTA starting with an empty pipeline. Tiles dealt in a
// snake over bands of grid / heads (api.cc). GEMTB_FORWARD_SMALL_PERSISTENT=0/1 overrides the default.
// Off: on the H200 (0b431a0, alternating in one call) pma's forward took 0.314-0.315 ms with it
// against v9's 0.308 (two stages, three CTAs per SM: 0.3076); so an item's pipeline fill was not what
// kept v9 at 89% of the read rate (tools/bench/NOTES.md, "Session 10").
inline constexpr bool kSmallPersistentDefault = false;
inline bool ForwardSmallPersistent() { return EnvSwitch("GEMTB_FORWARD_SMALL_PERSISTENT", kSmallPersistentDefault); }
// CTAs of the small forward that share an SM: its shared memory (SmallSmemBytes) fits two with
// three stages, three with two; the kernel's __launch_bounds__ asks for as many.
constexpr int SmallCtasPerSm(int stages) { return stages == 2 ? 3 : 2; }
inline int64_t ForwardSmallGrid(int64_t items, int sms, int heads) {
  int64_t grid = static_cast<int64_t>(SmallCtasPerSm(ForwardSmallStages())) * sms;
  if (heads > 0 && grid >= heads) grid -= grid % heads;
  return items < grid ? items : grid;
}
// v9's launch attributes: set on every launch with the shared-memory carveout left to the driver (the
// default), or, with GEMTB_SMALL_ATTRS_ONCE=1, once per process with the carveout pinned to the most
// shared memory (its two CTAs need 218 of 228 KB). Unmeasured (session 10 ended without device time):
// the candidate for pma's 8% after another case, which Nsight Compute does not see in the kernel
// (tools/bench/NOTES.md, "Session 10").
inline bool ForwardSmallAttributesOnce() { return EnvSwitch("GEMTB_SMALL_ATTRS_ONCE", false); }
inline bool ForwardSmallApplies(int max_tile_rows, bool softmax) {
  return EnvSwitch("GEMTB_FORWARD_SMALL", kForwardSmallDefault) && ForwardSplitApplies(max_tile_rows, softmax) &&
         max_tile_rows <= kSmallRows;
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_FORWARD_VARIANT_H_
