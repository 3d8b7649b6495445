// The stored-dS backward's workspace (host code only): the dK/dV kernel keeps dS and the dQ pass runs
// one GEMM per (query tile, key block) on it (backward_hopper_dq_stored.cuh) instead of recomputing
// S and dP (5 GEMMs per pair instead of 7). ChooseKernels (kernel_policy.h) decides from the size
// computed here whether it runs.
//
// The workspace holds one 64 x 64 block of dS (the input type, 8 KB) per (output sequence b, query
// head, 64-row block qb of b's query rows, 64-key block kb) for the key blocks [kb_lo, kb_hi) of that
// row block: the hull of those the dK/dV kernel writes and those the dQ pass reads (its reader's key
// span, from the key block holding the span's first key), so about the valid pairs (pairs x H x 2
// bytes) plus partial blocks along mask edges. The table `ds_block_base` finds a block in two loads:
// entry b (b < number of sequences) is the table index of b's first row block, entry rb of a row
// block is its first block minus kb_lo, so block = table[table[b] + qb] + kb; the elements are at
// (block * H + h) * 4096.
//
// Each dK/dV step must be one of the dQ pass's row blocks, so the plan starts every dK/dV segment on
// a 64-row boundary (rounds its first row down; the benchmark's self and cross masks mostly start there
// already: at row 0 or at the key tile's first key): a step's rows [q0, q0 + 64) are then block
// q0 / 64. The rows added in front have no valid key in the tile (a segment starts at its first row
// that has one), so they add exact zeros to dK and dV; the steps group the rows differently from
// the recompute path where a segment moved, so dK/dV are its bits only where none did. Not under
// broadcast_q (the chained and fused-dQ kernels run there, and they do not write dS).
#ifndef GEMTB_GPU_ATTENTION_BACKWARD_STORED_DS_PLAN_H_
#define GEMTB_GPU_ATTENTION_BACKWARD_STORED_DS_PLAN_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gpu/attention/params.h"
#include "gpu/attention/tile_scheduler.h"

namespace gemtb::gpu {

inline constexpr int kDsBlock = 64;                              // rows and keys per dS block
inline constexpr int64_t kDsBlockElements = kDsBlock * kDsBlock;  // 16-bit elements per block
// The workspace of a call: none (elements 0) under broadcast_q or when no block is written.
struct StoredDsPlan {
  std::vector<int64_t> block_base;    // the table (see the header comment)
  int64_t elements = 0;               // workspace size in 16-bit elements
  std::vector<DkvSegment> segments;   // the dK/dV segments to upload when it runs (starts rounded down)
};

inline StoredDsPlan PlanStoredDs(const std::vector<SeqInfo>& seqs, const TileLists& lists, bool broadcast_q,
                                 int64_t heads) {
  StoredDsPlan plan;
  if (broadcast_q || seqs.empty()) return plan;
  plan.segments = lists.dkv_segments;
  for (DkvSegment& s : plan.segments) s.i0 -= s.i0 % kDsBlock;
  // Row-block table indices, then each row block's key-block hull [lo, hi].
  const int64_t num_seqs = static_cast<int64_t>(seqs.size());
  std::vector<int64_t>& table = plan.block_base;
  table.resize(static_cast<size_t>(num_seqs));
  int64_t next = num_seqs;
  for (int64_t b = 0; b < num_seqs; ++b) {
    table[static_cast<size_t>(b)] = next;
    next += (seqs[static_cast<size_t>(b)].lq + kDsBlock - 1) / kDsBlock;
  }
  table.resize(static_cast<size_t>(next), 0);
  std::vector<int64_t> lo(static_cast<size_t>(next), INT64_MAX), hi(static_cast<size_t>(next), -1);
  const auto add = [&](int64_t b, int64_t qb, int64_t kb_first, int64_t kb_last) {
    const size_t rb = static_cast<size_t>(table[static_cast<size_t>(b)] + qb);
    lo[rb] = std::min(lo[rb], kb_first);
    hi[rb] = std::max(hi[rb], kb_last);
  };
  for (const DkvTile& t : lists.dkv) {  // blocks the dK/dV kernel writes: each step of each segment
    for (int32_t i = 0; i < t.seg_count; ++i) {
      const DkvSegment& sg = plan.segments[static_cast<size_t>(t.seg_begin + i)];
      for (int64_t qb = sg.i0 / kDsBlock; qb * kDsBlock < sg.i1; ++qb) add(sg.b, qb, t.j0 / kDsBlock, t.j0 / kDsBlock);
    }
  }
  for (const DqTile& t : lists.dq) {  // blocks the dQ pass loads: its readers' key spans
    for (int32_t i = 0; i < t.reader_count; ++i) {
      const DqReader& rd = lists.dq_readers[static_cast<size_t>(t.reader_begin + i)];
      if (rd.k_hi > rd.k_lo) add(rd.b, t.i0 / kDsBlock, rd.k_lo / kDsBlock, (rd.k_hi - 1) / kDsBlock);
    }
  }
  int64_t blocks = 0;
  for (size_t rb = static_cast<size_t>(num_seqs); rb < lo.size(); ++rb) {
    if (hi[rb] < lo[rb]) continue;  // no block of this row block is written or read
    table[rb] = blocks - lo[rb];
    blocks += hi[rb] - lo[rb] + 1;
  }
  plan.elements = blocks * heads * kDsBlockElements;
  if (plan.elements == 0) return StoredDsPlan{};
  return plan;
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_BACKWARD_STORED_DS_PLAN_H_
