// Host-built tile lists over the jagged problem: which (query rows x key range) blocks
// the forward, dQ and dK/dV kernels run. Tiles without any valid (query, key) pair are not listed,
// so fully masked regions cost nothing; their outputs are prefilled (O, dQ, dK, dV = 0, LSE = -inf).
// Each list is ordered heaviest first, so the short tiles fill in at the end of a launch.
//
// The masks keep one contiguous key range per query row whose ends never decrease with
// the row (ClampedKeys in params.h); the scheduler relies on that to find ranges by bisection.
#ifndef GEMTB_GPU_ATTENTION_TILE_SCHEDULER_H_
#define GEMTB_GPU_ATTENTION_TILE_SCHEDULER_H_

#include <cstdint>
#include <vector>

#include "gpu/attention/params.h"
#include "model/attention/attention_options.h"

namespace gemtb::gpu {

// The resolved pairing: per output sequence b its SeqInfo and K/V sequence ks(b).
struct Pairing {
  std::vector<SeqInfo> seqs;
  std::vector<int64_t> kv_seq;       // ks(b)
  std::vector<int64_t> kv_offsets;   // [nkv+1]
  bool broadcast_q = false;          // every b reads query sequence 0
};

struct TileLists {
  std::vector<ForwardTile> forward;
  std::vector<DqTile> dq;
  std::vector<DqReader> dq_readers;
  std::vector<DkvTile> dkv;
  std::vector<DkvSegment> dkv_segments;
  std::vector<DqReduce> dq_reduce;  // one per split dQ tile
  int64_t dq_partial_slots = 0;     // workspace slots the split tiles write
};

// Forward tiles only (the forward needs nothing else), of `block_m` query rows each (kBlockM for the
// mma.sync kernel, kHopperBlockM for the Hopper one).
std::vector<ForwardTile> BuildForwardTiles(const Pairing& pairing, const AttentionOptions& options,
                                           int block_m = kBlockM);

// Reverses every odd band of `band` tiles (the last band may be partial), in place. A persistent
// kernel whose CTA c takes tiles c, c + band, c + 2 band, ... of a heavy-first list then gets them
// dealt in a snake: the CTA that took a band's heaviest tile takes the next band's lightest, so the
// CTAs' sums of work differ by about one band's spread instead of adding one per band (PMA's split
// forward: the most K/V bytes of a CTA 2.8% above the mean dealt in order, 0.1% in a snake).
void DealInSnakeBands(std::vector<ForwardTile>& tiles, int64_t band);

// Orders tiles by their K/V steps of `block_n` keys, most first, and within equal steps by sequence
// and first row, in place. The persistent TMA forward costs a tile by its steps (its MMAs
// run on all 128 rows, valid or not), so this is still heaviest first for it; and it keeps a
// sequence's tiles, its partial last one included, next to each other, so the items running at once
// share their K/V in L2 (cross attention: ~4.6 tiles read each sequence's K/V).
void OrderByStepsThenSequence(std::vector<ForwardTile>& tiles, int block_n);

// dQ and dK/dV tiles. dQ tiles with more than kDqReadersPerPart readers are split into parts.
TileLists BuildBackwardTiles(const Pairing& pairing, const AttentionOptions& options);

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_TILE_SCHEDULER_H_
