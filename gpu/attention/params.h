// What the host hands the attention kernels: the resolved sequence pairing, the tile lists and one
// plain params struct per kernel. Plain C++ (no CUDA types): api.cc fills these, the .cu files read
// them. Indices are elements, never bytes; rows of Q/K/V/O/dO are H*D (or Hkv*D) elements apart.
#ifndef GEMTB_GPU_ATTENTION_PARAMS_H_
#define GEMTB_GPU_ATTENTION_PARAMS_H_

#include <cstdint>

#include "model/attention/attention_options.h"

namespace gemtb::gpu {

// Output sequence b (the pairing rule): query rows [q_begin, q_begin+lq) of Q, key rows
// [kv_begin, kv_begin+lk) of K and V, output rows [out_begin, out_begin+lq) of O, dO and LSE.
struct SeqInfo {
  int64_t q_begin = 0;
  int64_t kv_begin = 0;
  int64_t out_begin = 0;
  int32_t lq = 0;
  int32_t lk = 0;
};

// The valid keys [begin, end) of query row i under the mask, as model/'s ValidKeys says, clamped to
// [0, lk] so that an empty range never points past the sequence (block(n) with Lq > Lk can put
// ValidKeys' empty range beyond lk). Host scheduler and kernels call this same function (the
// kernels through --expt-relaxed-constexpr), so they cannot disagree on a mask.
struct RowKeyRange {
  int32_t begin, end;
};

constexpr RowKeyRange ClampedKeys(const AttentionOptions& o, int64_t i, int64_t lq, int64_t lk) {
  const KeyRange r = ValidKeys(o, i, lq, lk);
  const int64_t begin = r.begin < lk ? r.begin : lk;
  const int64_t end = r.end < begin ? begin : (r.end < lk ? r.end : lk);
  return {static_cast<int32_t>(begin), static_cast<int32_t>(end)};
}

// The head dims (Dqk = Dv) of the mma.sync kernels, each instantiated per storage type in
// instantiations/ (the gem-like model configs use 16, 32 and 64). Every one is a multiple of 16, so
// that Q Kᵀ runs in whole k-steps of m16n8k16 and a row loads in whole 16-byte chunks; at D = 16
// a step is one k-step and O is two 8-column tiles.
inline constexpr int kKernelHeadDims[] = {16, 32, 64, 128};
constexpr bool IsKernelHeadDim(int64_t d) {
  for (const int k : kKernelHeadDims) {
    if (d == k) return true;
  }
  return false;
}

// Tile sizes shared by the host scheduler and the kernels: 4 warps of 16 rows each.
inline constexpr int kBlockM = 64;       // query rows per forward / dQ tile
inline constexpr int kBlockN = 64;       // keys per K/V tile
inline constexpr int kBwdBlockM = 32;    // query rows per step of the dK/dV kernel
inline constexpr int kThreads = 128;

// The Hopper forwards (forward_hopper_common.cuh): tiles of 128 query rows (wgmma m64 per
// warpgroup), head dim 128 only.
inline constexpr int kHopperBlockM = 128;
inline constexpr int kHopperHeadDim = 128;
inline constexpr int kHopperThreads = 256;
// The warp-specialised Hopper forward (forward_hopper_ws_kernel.cuh): the same 128-row tiles, a
// producer warpgroup and two consumer warpgroups, 128 keys per step.
inline constexpr int kHopperWsThreads = 384;
inline constexpr int kHopperWsBlockN = 128;

// Forward: query rows [i0, i0+kBlockM) of output sequence b against keys [k_lo, k_hi), the union of
// those rows' valid key ranges (never empty: empty tiles are not listed).
struct ForwardTile {
  int32_t b, i0, k_lo, k_hi;
};

// The K/V steps of block_n keys covering keys [k_lo, k_hi), the last one possibly partial: what the
// forward kernels loop over and what the host scheduler costs a tile by (OrderByStepsThenSequence).
constexpr int KeySteps(int k_lo, int k_hi, int block_n) { return (k_hi - k_lo + block_n - 1) / block_n; }

// dQ: query rows [i0, i0+kBlockM) of one query sequence, for each of its readers (the output
// sequences that read it: just one, or every b under broadcast_q) in increasing b. A tile with many
// readers (broadcast_q) is split into parts of at most kDqReadersPerPart readers; each part writes
// its fp32 sum to workspace slot `partial` (-1: the tile is whole and writes dQ itself), and a
// DqReduce sums a tile's slots in increasing order (deterministic, no atomics).
inline constexpr int kDqReadersPerPart = 2;
struct DqTile {
  int32_t i0, reader_begin, reader_count, partial;
};
// The parts of one split dQ tile: rows [i0, i0+rows) of query sequence rows from q_begin, slots
// [slot_begin, slot_begin+slot_count) of the workspace ([slot][H][kBlockM][D] fp32).
struct DqReduce {
  int64_t q_begin;
  int32_t i0, rows, slot_begin, slot_count;
};
struct DqReader {
  int32_t b, k_lo, k_hi, unused;
};

// dK/dV: keys [j0, j0+kBlockN) of one K/V sequence (rows kv_begin.. of K and V, length lk); each
// segment is a range [i0, i1) of one reader's query rows whose key ranges meet these keys.
struct DkvTile {
  int64_t kv_begin;
  int32_t lk, j0, seg_begin, seg_count;
};
struct DkvSegment {
  int32_t b, i0, i1, unused;
};

// What every kernel of one call shares.
struct ProblemParams {
  const uint16_t* q = nullptr;  // [TQ, H, D] storage bits
  const uint16_t* k = nullptr;  // [TK, Hkv, D]
  const uint16_t* v = nullptr;  // [TK, Hkv, D]
  const SeqInfo* seqs = nullptr;
  int32_t heads = 0;
  int32_t kv_heads = 0;
  int64_t out_rows = 0;  // TO: LSE and D are [H, TO]
  float pre_scale = 1.f;   // both already rounded to fp32, as the emulate mode does
  float post_scale = 1.f;
  AttentionOptions options;  // act and the mask fields; the scales above are the resolved ones
};

struct ForwardParams {
  ProblemParams problem;
  const ForwardTile* tiles = nullptr;
  uint16_t* o = nullptr;  // [TO, H, D]
  float* lse = nullptr;   // [H, TO], softmax only
  // The Hopper forwards' epilogue writes O in 16-byte stores (StoreHopperRows); needs `o` 16-byte
  // aligned. 0: 4-byte stores.
  int32_t wide_o_stores = 0;
};

struct BackwardParams {
  ProblemParams problem;
  const uint16_t* o = nullptr;    // [TO, H, D] from the forward
  const uint16_t* d_o = nullptr;  // [TO, H, D]
  const float* lse = nullptr;     // [H, TO] from the forward (softmax)
  float* d_rows = nullptr;        // [H, TO]: D_i = rowsum(dO * O) (softmax)
  const DqTile* dq_tiles = nullptr;
  const DqReader* dq_readers = nullptr;
  const DkvTile* dkv_tiles = nullptr;
  const DkvSegment* dkv_segments = nullptr;
  const DqReduce* dq_reduce = nullptr;
  float* dq_partial = nullptr;  // the split dQ tiles' workspace
  uint16_t* dq = nullptr;  // [TQ, H, D]
  uint16_t* dk = nullptr;  // [TK, Hkv, D]
  uint16_t* dv = nullptr;  // [TK, Hkv, D]
  // The stored-dS backward (backward_stored_ds_plan.h): the dS blocks the dK/dV kernel writes and
  // the dQ pass reads instead of recomputing S and dP; null: the recompute backward. ds_block_base: per output sequence.
  uint16_t* ds = nullptr;
  const int64_t* ds_block_base = nullptr;
};

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_PARAMS_H_
