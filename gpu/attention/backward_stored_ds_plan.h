// Backward v5 (issue 7): whether a call keeps dS from the dK/dV kernel and runs dQ as one GEMM per
// (query tile, key block) on it (backward_hopper_dq_stored.cuh) instead of recomputing S and dP in
// the dQ pass (v3: 7 GEMMs per pair; stored dS: 5), and the workspace that takes. Host code only.
//
// The workspace holds one 64 x 64 block of dS (the input type, 8 KB) per (output sequence b, query
// head, 64-row block of b's query rows, 64-key block of b's keys): every block of the sequence's
// rectangle, masked ones included (they are simply never written nor read), so a block's address
// is arithmetic: ((block_base[b] + qb * ceil(lk / 64) + kb) * H + h) * 4096 elements. Causal
// sequences hold about twice their valid pairs; unmasked ones about their pairs (pairs x H x 2 bytes).
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

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gpu/attention/params.h"

namespace gemtb::gpu {

inline constexpr int kDsBlock = 64;                              // rows and keys per dS block
inline constexpr int64_t kDsBlockElements = kDsBlock * kDsBlock;  // 16-bit elements per block
// Off until a device run shows it faster and correct (the rule then: where it applies and the
// workspace is at most kStoredDsMaxBytes, above which v3's recompute runs).
inline constexpr bool kStoredDsDefault = false;
inline constexpr int64_t kStoredDsMaxBytes = int64_t{24} << 30;

enum class BwdDqMode { kAuto, kStored, kRecompute };

inline BwdDqMode BwdDqModeFromEnv() {
  const char* env = std::getenv("GEMTB_BWD_DQ");
  if (env == nullptr || *env == '\0') return BwdDqMode::kAuto;
  if (std::strcmp(env, "stored") == 0) return BwdDqMode::kStored;
  if (std::strcmp(env, "recompute") == 0) return BwdDqMode::kRecompute;
  return BwdDqMode::kAuto;
}

struct StoredDsPlan {
  bool use = false;
  std::vector<int64_t> block_base;    // per output sequence: its first block (before the head factor)
  int64_t elements = 0;               // workspace size in 16-bit elements
  std::vector<DkvSegment> segments;   // the dK/dV segments to upload when `use` (starts rounded down)
};

// The default where it applies.
inline bool StoredDsByDefault(int64_t bytes) { return kStoredDsDefault && bytes <= kStoredDsMaxBytes; }

inline StoredDsPlan PlanStoredDs(const std::vector<SeqInfo>& seqs, const std::vector<DkvSegment>& segments,
                                 bool broadcast_q, int64_t heads, BwdDqMode mode) {
  StoredDsPlan plan;
  if (mode == BwdDqMode::kRecompute || broadcast_q) return plan;
  int64_t blocks = 0;
  plan.block_base.reserve(seqs.size());
  for (const SeqInfo& s : seqs) {
    plan.block_base.push_back(blocks);
    blocks += ((s.lq + kDsBlock - 1) / kDsBlock) * static_cast<int64_t>((s.lk + kDsBlock - 1) / kDsBlock);
  }
  plan.elements = blocks * heads * kDsBlockElements;
  plan.use = plan.elements > 0 && (mode == BwdDqMode::kStored || StoredDsByDefault(plan.elements * 2));
  if (!plan.use) {
    plan.block_base.clear();
    plan.elements = 0;
    return plan;
  }
  plan.segments = segments;
  for (DkvSegment& s : plan.segments) s.i0 -= s.i0 % kDsBlock;
  return plan;
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_BACKWARD_STORED_DS_PLAN_H_
