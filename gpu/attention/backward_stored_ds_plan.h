// Backward v5 (issue 7): whether a call keeps dS from the dK/dV kernel and runs dQ as one GEMM per
// (query tile, key block) on it (backward_hopper_dq_stored.cuh) instead of recomputing S and dP in
// the dQ pass (v3: 7 GEMMs per pair; stored dS: 5), and the workspace that takes. Host code only.
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
// a 64-row boundary (rounds its first row down; the spec's self and cross masks mostly start there
// already: at row 0 or at the key tile's first key): a step's rows [q0, q0 + 64) are then block
// q0 / 64. The rows added in front have no valid key in the tile (a segment starts at its first row
// that has one), so they add exact zeros to dK and dV; the steps group the rows differently from
// v3 where a segment moved, so dK/dV are v3's bits only where none did. Not under broadcast_q
// (PMA runs v4's chained kernels, which do not write dS).
//
// GEMTB_BWD_DQ=stored forces it wherever it applies, =recompute forces v3/v4's dQ; unset, the rule
// StoredDsByDefault below.
#ifndef GEMTB_GPU_ATTENTION_BACKWARD_STORED_DS_PLAN_H_
#define GEMTB_GPU_ATTENTION_BACKWARD_STORED_DS_PLAN_H_

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gpu/attention/params.h"
#include "gpu/attention/tile_scheduler.h"

namespace gemtb::gpu {

inline constexpr int kDsBlock = 64;                              // rows and keys per dS block
inline constexpr int64_t kDsBlockElements = kDsBlock * kDsBlock;  // 16-bit elements per block
// The default wherever it applies and its workspace is at most kStoredDsMaxBytes (api.cc falls
// back to the recompute if the allocation fails; GEMTB_BWD_DQ=recompute keeps v3/v4): it was faster
// than v3 on all seven bench cases it applies to (tools/bench/NOTES.md "Backward v5", same call at
// fc25fc5: bwd -8% on self_softmax to -15% on cross_gdpa_gelu and dense_gdpa_silu with the
// three-stage dQ kernel), and the 500-case check of the f899e66 call (12,000 cases, 0 failures)
// ran with it as the default. Memory is its only cost, so the rule is on size only.
inline constexpr bool kStoredDsDefault = true;
inline constexpr int64_t kStoredDsMaxBytes = int64_t{24} << 30;

enum class BwdDqMode { kAuto, kStored, kRecompute };

inline BwdDqMode BwdDqModeFromEnv() {
  const char* env = std::getenv("GEMTB_BWD_DQ");
  if (env == nullptr || *env == '\0') return BwdDqMode::kAuto;
  if (std::strcmp(env, "stored") == 0) return BwdDqMode::kStored;
  if (std::strcmp(env, "recompute") == 0) return BwdDqMode::kRecompute;
  return BwdDqMode::kAuto;
}

// The default where it applies.
inline bool StoredDsByDefault(int64_t bytes) { return kStoredDsDefault && bytes <= kStoredDsMaxBytes; }

struct StoredDsPlan {
  bool use = false;
  std::vector<int64_t> block_base;    // the table (see the header comment)
  int64_t elements = 0;               // workspace size in 16-bit elements
  std::vector<DkvSegment> segments;   // the dK/dV segments to upload when `use` (starts rounded down)
};

inline StoredDsPlan PlanStoredDs(const std::vector<SeqInfo>& seqs, const TileLists& lists, bool broadcast_q,
                                 int64_t heads, BwdDqMode mode) {
  StoredDsPlan plan;
  if (mode == BwdDqMode::kRecompute || broadcast_q || seqs.empty()) return plan;
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
  plan.use = plan.elements > 0 && (mode == BwdDqMode::kStored || StoredDsByDefault(plan.elements * 2));
  if (!plan.use) return StoredDsPlan{};
  return plan;
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_BACKWARD_STORED_DS_PLAN_H_
