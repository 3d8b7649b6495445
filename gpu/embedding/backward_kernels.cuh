// The kernels of the backward fused with the optimizers ("Backward", "Fused
// optimizers"), in the oracle's fixed order and without atomics:
//   1. a warp per bag writes each valid occurrence's sort key (global row, sample b) and the
//      bag's count of valid ids (MEAN's n);
//   2. CUB's stable radix sort orders the occurrences by key; KJT order (key, position) is kept
//      inside equal keys, so each row's occurrences come in the oracle's (b, key, p) order (when no
//      table is read by two keys, the key is the row alone: KJT order is then (b, p) already);
//   3. run heads and a scan give each touched row's range of occurrences;
//   4. a warp per 32 touched rows: each lane resolves one row (its run, table, row, optimizer
//      state and, for a row touched once, that occurrence's contribution), then the warp sums each
//      row's contributions per column as a seqsum in that order (G_r) and applies the table's
//      optimizer and rounding to the row in the same kernel;
//   5. a hot row (a run of >= kHotRun occurrences, e.g. the head of a Zipf distribution) gets a
//      whole block instead: the seqsum fixes the order of the additions within each column, so
//      the run cannot be split into partial sums, but its columns are independent and its
//      contributions can be fetched and formed (w*gamma, gamma/n) in any order. The block stages
//      tiles of contributions in a ring in shared memory, the next tiles' copies in flight while
//      one thread per column folds the current tile in sorted order; then one warp applies the
//      optimizer as in 4.
// Phase 4's time is the chain of dependent loads per row (run start, key, occurrence, bag,
// gradient, row): a uniform batch touches ~1.9 M rows about once each, so a warp that walked the
// chain row after row waited on memory most of the time. Resolved 32 rows at a time, one per lane,
// the chains overlap and each row then costs its two independent loads (its weights, its
// gradient). The kernel is held to 64 registers a thread, 8 blocks of 4 warps per SM (32 warps),
// with 2 gradient loads in flight in the rows touched more than once (tools/bench/NOTES.md).
//
// The kernels live in this header, apart from their launches (backward.cu), so that the CPU
// emulation (tests/gpu/emulation) runs the same code.
#ifndef GEMTB_GPU_EMBEDDING_BACKWARD_KERNELS_CUH_
#define GEMTB_GPU_EMBEDDING_BACKWARD_KERNELS_CUH_

#include <cstdint>

#include "gpu/common/tile_io.cuh"
#include "gpu/embedding/launch.h"
#include "gpu/embedding/tbe_row_ops.h"

namespace gemtb::gpu::embedding::backward_kernels {

constexpr unsigned kFullMask = 0xFFFFFFFFu;
constexpr int kBagWarps = 8;
constexpr int kRowWarps = 4;
constexpr int kRowBlocksPerSm = 8;
constexpr int kThreads = 256;
constexpr int kLoadsInFlight = 2;
constexpr int kHotThreads = 1024;
constexpr int kHotStages = 3;              // HotRowKernel's ring: a tile folded while two are in flight
constexpr int64_t kHotTileFloats = 12288;  // one tile of staged contributions, 48 KiB

__global__ void __launch_bounds__(kBagWarps * 32) OccurrenceKernel(const LaunchParams p, BackwardBuffers b) {
  const int64_t bag = static_cast<int64_t>(blockIdx.x) * kBagWarps + threadIdx.x / 32;
  if (bag >= p.kjt.num_keys * p.kjt.batch) return;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t batch = p.kjt.batch;
  const TableParams& t = p.tables[p.features[bag / batch].table];
  const int64_t begin = p.kjt.offsets[bag], end = p.kjt.offsets[bag + 1];
  int32_t valid = 0;
  for (int64_t v0 = begin; v0 < end; v0 += 32) {
    const int64_t v = v0 + lane;
    bool ok = false;
    if (v < end) {
      const int64_t row = ResolveRow(t, p.kjt.values[v]);
      ok = row >= 0;
      b.keys_in[v] = ok ? SortKey(t.row_offset + row, b.key_samples == 1 ? 0 : bag % batch, b.key_samples)
                        : InvalidSortKey(b.total_rows, b.key_samples);
      b.order_in[v] = v;
      b.value_bag[v] = bag;
    }
    valid += __popc(__ballot_sync(kFullMask, ok));
  }
  if (lane == 0) b.bag_count[bag] = valid;
}

// The global row of a sorted occurrence.
__device__ int64_t RowOfKey(const BackwardBuffers& b, int64_t i) {
  return static_cast<int64_t>(b.keys_out[i] / static_cast<uint64_t>(b.key_samples));
}

__global__ void RunHeadKernel(const BackwardBuffers b, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  b.run_head[i] = i == 0 || RowOfKey(b, i) != RowOfKey(b, i - 1) ? 1 : 0;
}

__global__ void RunStartKernel(const BackwardBuffers b, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (b.run_head[i]) b.run_start[b.run_index[i]] = i;
  if (i == n - 1) {
    const int32_t runs = b.run_index[i] + b.run_head[i];
    *b.num_runs = runs;
    b.run_start[runs] = n;
  }
}

// Appends each hot run (a valid row with >= kHotRun occurrences) to the hot-run list. The list's
// order varies from call to call; each run is summed and updated on its own, so results do not.
__global__ void HotRunListKernel(const BackwardBuffers b) {
  const int64_t run = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (run >= *b.num_runs) return;
  const int64_t start = b.run_start[run], end = b.run_start[run + 1];
  if (end - start < kHotRun) return;
  if (RowOfKey(b, start) >= b.total_rows) return;
  b.hot_runs[atomicAdd(b.num_hot_runs, 1)] = static_cast<int32_t>(run);
}

// Where occurrence `v`'s upstream gradient row starts, and its scalar (weight or n).
struct Contribution {
  const float* grad = nullptr;
  float weight = 0.0f;
  int32_t n = 0;
  Pooling pooling = Pooling::kSum;
  int32_t block = 0;  // the sample's block of G's partitioned sum
};

// Occurrence v, of bag `bag` (b.value_bag[v]).
__device__ Contribution ContributionOf(const LaunchParams& p, const BackwardBuffers& b, int64_t v, int64_t bag) {
  const FeatureParams& fp = p.features[bag / p.kjt.batch];
  Contribution c;
  c.pooling = fp.pooling;
  if (fp.pooling == Pooling::kNone) {
    c.grad = fp.sequence_grad + (v - fp.value_begin) * p.tables[fp.table].dim;
  } else {
    c.grad = p.pooled_grad + (bag % p.kjt.batch) * p.pooled_width + fp.out_col;
  }
  if (fp.pooling == Pooling::kWeightedSum) c.weight = p.kjt.weights[v];
  if (fp.pooling == Pooling::kMean) c.n = b.bag_count[bag];
  if (b.batch_block > 0) c.block = static_cast<int32_t>((bag % p.kjt.batch) / b.batch_block);
  return c;
}

__device__ Contribution ContributionOf(const LaunchParams& p, const BackwardBuffers& b, int64_t v) {
  return ContributionOf(p, b, v, b.value_bag[v]);
}

// The row gradient's running sum: one seqsum, or with batch blocks (kBlocked) the seqsum of each
// block's seqsum.
template <bool kBlocked>
struct RowSum;
template <>
struct RowSum<false> {
  SeqSum4 sum;
  __device__ void Add(int32_t, const float x[kChunk]) { sum.Add(x); }
  __device__ SeqSum4 Finish(int64_t) const { return sum; }
};
template <>
struct RowSum<true> {
  BlockSeqSum4 sum;
  __device__ void Add(int32_t block, const float x[kChunk]) { sum.Add(block, x); }
  __device__ SeqSum4 Finish(int64_t num_blocks) const { return sum.Finish(num_blocks); }
};

// G_r for the chunk at column c: the seqsum of the run's contributions in sorted order. The
// lanes fetch 32 occurrences' metadata in parallel; the sum itself stays sequential.
template <bool kBlocked>
__device__ SeqSum4 RowGradientChunk(const LaunchParams& p, const BackwardBuffers& b, int64_t start, int64_t end,
                                    int64_t c, bool active, int lane) {
  RowSum<kBlocked> sum;
  Contribution mine;
  if (start + lane < end) mine = ContributionOf(p, b, b.order_out[start + lane]);
  for (int64_t i0 = start; i0 < end; i0 += 32) {
    // The next 32 occurrences' metadata (a chain of dependent loads) is requested before this
    // batch is summed, so a long run does not wait for it batch after batch.
    Contribution next;
    if (i0 + 32 + lane < end) next = ContributionOf(p, b, b.order_out[i0 + 32 + lane]);
    const int count = static_cast<int>(min(static_cast<int64_t>(32), end - i0));
    // kLoadsInFlight occurrences' gradient loads in flight, then their terms in order.
    for (int k0 = 0; k0 < count; k0 += kLoadsInFlight) {
      float g[kLoadsInFlight][kChunk];
      float weight[kLoadsInFlight];
      int32_t n[kLoadsInFlight];
      int32_t block[kLoadsInFlight];
      Pooling pooling[kLoadsInFlight];
#pragma unroll
      for (int u = 0; u < kLoadsInFlight; ++u) {
        const float* grad = reinterpret_cast<const float*>(
            __shfl_sync(kFullMask, reinterpret_cast<uintptr_t>(mine.grad), k0 + u));
        weight[u] = __shfl_sync(kFullMask, mine.weight, k0 + u);
        n[u] = __shfl_sync(kFullMask, mine.n, k0 + u);
        block[u] = kBlocked ? __shfl_sync(kFullMask, mine.block, k0 + u) : 0;
        pooling[u] = static_cast<Pooling>(__shfl_sync(kFullMask, static_cast<int>(mine.pooling), k0 + u));
        if (active && k0 + u < count) {
          const float4 g4 = *reinterpret_cast<const float4*>(grad + c);
          g[u][0] = g4.x, g[u][1] = g4.y, g[u][2] = g4.z, g[u][3] = g4.w;
        }
      }
#pragma unroll
      for (int u = 0; u < kLoadsInFlight; ++u) {
        if (!active || k0 + u >= count) continue;
        ContributionTerm(pooling[u], weight[u], n[u], g[u]);
        sum.Add(block[u], g[u]);
      }
    }
    mine = next;
  }
  return sum.Finish(b.num_batch_blocks);
}

// The optimizer on one row, a warp: G in s_grad and the row's weights in s_w (widened storage),
// the row's Adagrad state before the step; rounds and stores the row and the state.
// `whole_square_sum`: the square sum over the whole row when column shards share the state (the
// split step), else null (this row's columns are the whole row).
__device__ void ApplyRowUpdate(const LaunchParams& p, const TableParams& t, int64_t row, const float* s_grad,
                               const float* s_w, float state_before, const float* whole_square_sum, int lane) {
  const bool adagrad = t.optimizer.kind == OptimizerKind::kRowwiseAdagrad;
  float square_sum = 0.0f, state_after = 0.0f;
  if (adagrad && whole_square_sum != nullptr) {
    square_sum = *whole_square_sum;
  } else if (adagrad) {
    // The norm is one seqsum over all D columns in order: one lane adds, then broadcasts.
    if (lane == 0) square_sum = em::RowwiseAdagradSquareSum(s_w, s_grad, t.dim, t.optimizer);
    square_sum = __shfl_sync(kFullMask, square_sum, 0);
  }
  for (int64_t c = lane * kChunk; c < t.dim; c += 32 * kChunk) {
    float w[kChunk], g[kChunk];
    for (int k = 0; k < kChunk; ++k) {
      w[k] = s_w[c + k];
      g[k] = s_grad[c + k];
    }
    if (adagrad) {
      state_after = AdagradChunkUpdate(t, square_sum, state_before, w, g);
    } else {
      ElementwiseUpdate(t, row, c, w, g);
    }
    RoundChunk(t, p.seed, p.step, row, c, w);
    StoreChunk(t, row, c, w);
  }
  // Every lane has read the state before lane 0 overwrites it.
  __syncwarp();
  if (adagrad && lane == 0) t.adagrad[row] = state_after;
}

// What a lane finds out about one touched row of its warp's 32 before the warp updates them one
// by one: the row's sorted occurrences, table and row, its Adagrad state, and, for a row touched
// once (most rows of a uniform batch), that occurrence's contribution. The 32 chains of dependent
// loads (run start, key, occurrence, bag, gradient row) then run side by side, not row after row.
struct RowJob {
  int32_t start = 0;
  int32_t end = 0;
  int32_t table = -1;  // -1: nothing to do here (past the last run, a hot run, invalid ids)
  int64_t row = 0;
  float state_before = 0.0f;
  Contribution single;  // when end - start == 1
};

__device__ RowJob ResolveRowJob(const LaunchParams& p, const BackwardBuffers& b, int64_t run, int32_t num_runs) {
  RowJob job;
  if (run >= num_runs) return job;
  job.start = static_cast<int32_t>(b.run_start[run]);
  job.end = static_cast<int32_t>(b.run_start[run + 1]);
  if (job.end - job.start >= kHotRun) return job;  // HotRowKernel's
  const int64_t global_row = RowOfKey(b, job.start);
  if (global_row >= b.total_rows) return job;  // the run of invalid occurrences (bounds mode zero)
  job.table = TableOfRow(p.tables, p.num_tables, global_row);
  const TableParams& t = p.tables[job.table];
  job.row = global_row - t.row_offset;
  if (t.optimizer.kind == OptimizerKind::kRowwiseAdagrad) job.state_before = t.adagrad[job.row];
  if (job.end - job.start == 1) job.single = ContributionOf(p, b, b.order_out[job.start]);
  return job;
}

// Lane j's job, on every lane.
__device__ RowJob BroadcastRowJob(const RowJob& mine, int j) {
  RowJob job;
  job.start = __shfl_sync(kFullMask, mine.start, j);
  job.end = __shfl_sync(kFullMask, mine.end, j);
  job.table = __shfl_sync(kFullMask, mine.table, j);
  job.row = __shfl_sync(kFullMask, mine.row, j);
  job.state_before = __shfl_sync(kFullMask, mine.state_before, j);
  job.single.grad = reinterpret_cast<const float*>(
      __shfl_sync(kFullMask, reinterpret_cast<uintptr_t>(mine.single.grad), j));
  job.single.weight = __shfl_sync(kFullMask, mine.single.weight, j);
  job.single.n = __shfl_sync(kFullMask, mine.single.n, j);
  job.single.pooling = static_cast<Pooling>(__shfl_sync(kFullMask, static_cast<int>(mine.single.pooling), j));
  return job;
}

// The split step's output for one run (b.run_grads set): G [max_dim] and the partial square sum
// over this shard's columns, in place of the update.
__device__ void StoreRunGradient(const TableParams& t, const BackwardBuffers& b, int64_t run, const float* s_grad,
                                 const float* s_w, int lane) {
  for (int64_t c = lane; c < t.dim; c += 32) b.run_grads[run * b.max_dim + c] = s_grad[c];
  if (lane == 0) {
    b.run_square_sums[run] = t.optimizer.kind == OptimizerKind::kRowwiseAdagrad
                                 ? em::RowwiseAdagradSquareSum(s_w, s_grad, t.dim, t.optimizer)
                                 : 0.0f;
  }
}

// A warp per 32 consecutive runs: the lanes resolve one run each, then the warp sums and updates
// the rows one after another (a row's columns across the lanes, as before).
template <bool kBlocked>
__global__ void __launch_bounds__(kRowWarps * 32, kRowBlocksPerSm) RowUpdateKernel(const LaunchParams p,
                                                                                 const BackwardBuffers b) {
  extern __shared__ float shared[];  // per warp: G [max_dim], then w [max_dim]
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t first_run = (static_cast<int64_t>(blockIdx.x) * kRowWarps + warp) * 32;
  const int32_t num_runs = *b.num_runs;
  if (first_run >= num_runs) return;  // whole warps leave together
  const RowJob mine = ResolveRowJob(p, b, first_run + lane, num_runs);
  float* s_grad = shared + warp * 2 * b.max_dim;
  float* s_w = s_grad + b.max_dim;
  for (int j = 0; j < 32; ++j) {
    const RowJob job = BroadcastRowJob(mine, j);
    if (job.table < 0) continue;
    const TableParams& t = p.tables[job.table];
    for (int64_t c0 = 0; c0 < t.dim; c0 += 32 * kChunk) {
      const int64_t c = c0 + lane * kChunk;
      const bool active = c < t.dim;
      float w[kChunk], g[kChunk];
      if (job.end - job.start == 1) {
        if (!active) continue;
        // The row and its one contribution: two independent loads.
        LoadChunk(t, job.row, c, w);
        const float4 g4 = *reinterpret_cast<const float4*>(job.single.grad + c);
        g[0] = g4.x, g[1] = g4.y, g[2] = g4.z, g[3] = g4.w;
        ContributionTerm(job.single.pooling, job.single.weight, job.single.n, g);
        // One block holds the occurrence, the others add +0 (BlockSeqSum4).
        if (kBlocked) {
          for (int k = 0; k < kChunk; ++k) g[k] = numerics::AddRn(g[k], 0.0f);
        }
      } else {
        // The row is requested first: it arrives while G is summed.
        if (active) LoadChunk(t, job.row, c, w);
        const SeqSum4 sum = RowGradientChunk<kBlocked>(p, b, job.start, job.end, c, active, lane);
        if (!active) continue;
        for (int k = 0; k < kChunk; ++k) g[k] = sum.Get(k);
      }
      for (int k = 0; k < kChunk; ++k) {
        s_grad[c + k] = g[k];
        s_w[c + k] = w[k];
      }
    }
    __syncwarp();
    if (b.run_grads != nullptr) {
      StoreRunGradient(t, b, first_run + j, s_grad, s_w, lane);
    } else {
      ApplyRowUpdate(p, t, job.row, s_grad, s_w, job.state_before, nullptr, lane);
    }
    __syncwarp();  // every lane has read this row's G and w before the next row's are written
  }
}

// A slot of HotRowKernel's ring: a tile of at most kHotTileFloats floats of contributions and
// HotTile's padding, a spare term per 4-column chunk (dim <= max_dim floats).
constexpr int64_t HotSlotFloats(int64_t max_dim) { return kHotTileFloats + max_dim; }

// Shared memory of HotRowKernel: the metadata of two batches of occurrences (the one being summed
// and the next), the ring of kHotStages slots, then G and w of the row.
constexpr size_t HotSharedBytes(int64_t max_dim) {
  return 2 * kHotThreads * sizeof(Contribution) + (kHotStages * HotSlotFloats(max_dim) + 2 * max_dim) * sizeof(float);
}

// One tile of a hot run: its occurrences' metadata, its slot of the ring and its number of
// occurrences. The slot holds the contributions chunk-major: chunk c (columns 4c .. 4c+3) of
// occurrence k at data[(c * stride + k) * 4], so that the terms of one column are 4 floats apart
// (the fold's loads take constant offsets). The stride, per_tile or per_tile + 1, is odd: the 8
// chunks that a warp's 32 columns span then lie in 8 different bank quads, and the fold's loads
// (as the 16-byte copies of a row's consecutive chunks) are free of bank conflicts.
struct HotTile {
  const Contribution* meta = nullptr;
  float* data = nullptr;
  int count = 0;
  int stride = 0;

  __device__ float* Chunk(int k, int c) const { return data + (c * stride + k) * kChunk; }
  // Column j: term k at [k * kChunk].
  __device__ const float* Column(int j) const { return Chunk(0, j / kChunk) + j % kChunk; }
};

// Thread tid's column of G over the terms folded so far: a seqsum (acc), or with batch blocks
// (BlockSeqSum4 on one column) the seqsum of the finished blocks' seqsums (acc) and the current
// block's seqsum (inner).
struct HotColumnSum {
  static constexpr int kGroup = 16;  // terms loaded ahead of their additions
  float acc = 0.0f, inner = 0.0f;
  bool any = false, inner_any = false;
  int32_t block = -1;
  int32_t blocks_seen = 0;

  // Adds a tile's column (term k at column[k * kChunk]) in order. The loads, at constant offsets,
  // do not depend on the additions: each group of kGroup terms is loaded while the previous group
  // is added, so the chain of dependent additions runs at the FADD latency.
  __device__ void Fold(const float* column, int count) {
    int k = 0;
    if (!any && count > 0) acc = column[0], k = 1, any = true;  // seqsum: the first term as is
    if (k + kGroup <= count) {
      float x[kGroup];
      LoadGroup(column + k * kChunk, x);
      for (; k + 2 * kGroup <= count; k += kGroup) {
        float next[kGroup];
        LoadGroup(column + (k + kGroup) * kChunk, next);
        AddGroup(x);
#pragma unroll
        for (int i = 0; i < kGroup; ++i) x[i] = next[i];
      }
      AddGroup(x);
      k += kGroup;
    }
    for (; k < count; ++k) acc = numerics::AddRn(acc, column[k * kChunk]);
  }
  __device__ static void LoadGroup(const float* terms, float x[kGroup]) {
#pragma unroll
    for (int i = 0; i < kGroup; ++i) x[i] = terms[i * kChunk];
  }
  __device__ void AddGroup(const float x[kGroup]) {
#pragma unroll
    for (int i = 0; i < kGroup; ++i) acc = numerics::AddRn(acc, x[i]);
  }

  // Fold with batch blocks: a term of another block than the previous term's closes that block.
  __device__ void FoldBlocked(const float* column, const Contribution* meta, int count) {
    for (int k = 0; k < count; ++k) {
      const int32_t kb = meta[k].block;
      if (kb != block) {  // a block ends: its seqsum joins the outer one (BlockSeqSum4)
        if (inner_any) acc = any ? numerics::AddRn(acc, inner) : inner, any = true;
        inner_any = false;
        block = kb;
        ++blocks_seen;
      }
      const float x = column[k * kChunk];
      inner = inner_any ? numerics::AddRn(inner, x) : x;
      inner_any = true;
    }
  }

  // G's column once every term is folded (BlockSeqSum4::Finish with batch blocks).
  __device__ float Finish(int64_t num_blocks) {
    if (num_blocks > 1) {
      if (inner_any) acc = any ? numerics::AddRn(acc, inner) : inner;
      if (blocks_seen < num_blocks) acc = numerics::AddRn(acc, 0.0f);
    }
    return acc;
  }
};

// How HotRowKernel cuts a hot run of `count` occurrences (sorted positions start, start + 1, ...):
// tiles of `per_tile` occurrences (at most kHotTileFloats floats; a multiple of the fold's group
// where the dim allows, so a full tile's fold has no leftover terms), and batches of
// `tiles_per_batch` whole tiles (at most kHotThreads occurrences, one per thread) whose metadata
// is fetched together. Tile u belongs to batch u / tiles_per_batch, whose metadata is in buffer
// batch % 2, and is staged in ring slot u % kHotStages. A batch has at least kHotStages + 2 tiles:
// the next batch's metadata takes the batch's first three tiles to fetch (HotMetaFetch) and the
// fourth's barrier to publish, and the ring issues the next batch's first tile kHotStages - 1
// tiles before the batch ends.
struct HotRun {
  int64_t start = 0;
  int count = 0;  // < 2^31 as the occurrences (LaunchBackward)
  int chunks_per_row = 0;
  int per_tile = 0, tiles_per_batch = 0;
  Contribution* meta = nullptr;  // [2][kHotThreads]
  float* ring = nullptr;         // [kHotStages][slot_floats]
  int64_t slot_floats = 0;

  __device__ HotRun(unsigned char* smem, int64_t run_start, int64_t run_end, int64_t dim, int64_t max_dim)
      : start(run_start), count(static_cast<int>(run_end - run_start)), chunks_per_row(static_cast<int>(dim / kChunk)) {
    per_tile = static_cast<int>(min(kHotTileFloats / dim, static_cast<int64_t>(kHotThreads / (kHotStages + 2))));
    if (per_tile >= HotColumnSum::kGroup) per_tile -= per_tile % HotColumnSum::kGroup;
    tiles_per_batch = kHotThreads / per_tile;
    meta = reinterpret_cast<Contribution*>(smem);
    ring = reinterpret_cast<float*>(meta + 2 * kHotThreads);
    slot_floats = HotSlotFloats(max_dim);
  }
  __device__ int BatchSize() const { return per_tile * tiles_per_batch; }
  __device__ int NumTiles() const { return (count + per_tile - 1) / per_tile; }
  __device__ Contribution* BatchMeta(int batch) const { return meta + batch % 2 * kHotThreads; }
  __device__ HotTile Tile(int u) const {
    HotTile tile;
    tile.meta = BatchMeta(u / tiles_per_batch) + u % tiles_per_batch * per_tile;
    tile.data = ring + u % kHotStages * slot_floats;
    tile.count = min(per_tile, count - u * per_tile);
    tile.stride = per_tile | 1;
    return tile;
  }

  // This thread's 16-byte copies of a tile's gradient chunks (the tile's chunk q: occurrence
  // q / chunks_per_row, chunk q % chunks_per_row), in flight until its CopyAsyncWait.
  __device__ void Issue(const HotTile& tile, int tid) const {
    for (int q = tid; q < tile.count * chunks_per_row; q += kHotThreads) {
      const int k = q / chunks_per_row, c = q % chunks_per_row;
      CopyAsync16(tile.Chunk(k, c), tile.meta[k].grad + c * kChunk);
    }
  }
  // ContributionTerm on the chunks that this thread's Issue copied, once they have landed: w*gamma
  // (WSUM) and gamma/n (MEAN) formed in place; SUM's and NONE's gradients are their contributions.
  __device__ void Form(const HotTile& tile, int tid) const {
    for (int q = tid; q < tile.count * chunks_per_row; q += kHotThreads) {
      const int k = q / chunks_per_row, c = q % chunks_per_row;
      const Contribution& mc = tile.meta[k];
      if (mc.pooling != Pooling::kWeightedSum && mc.pooling != Pooling::kMean) continue;
      float4* chunk = reinterpret_cast<float4*>(tile.Chunk(k, c));
      const float4 g4 = *chunk;
      float g[kChunk] = {g4.x, g4.y, g4.z, g4.w};
      ContributionTerm(mc.pooling, mc.weight, mc.n, g);
      *chunk = make_float4(g[0], g[1], g[2], g[3]);
    }
  }
};

// Thread tid's share of the next batch's metadata (its occurrence tid), fetched during the first
// three tiles of the current batch, one level of the chain of dependent loads per tile, so that
// each load has a tile's time to arrive before its value is used: tile 0 requests the occurrence
// v (order_out), tile 1 its bag, tile 2 forms the Contribution (the few feature and table
// parameters stay cached) and stores it for the barrier of tile 3 to publish.
struct HotMetaFetch {
  int64_t v = 0, bag = 0;

  __device__ void Step(const LaunchParams& p, const BackwardBuffers& b, const HotRun& run, int u, int tid) {
    const int phase = u % run.tiles_per_batch;
    const int next = u / run.tiles_per_batch + 1;
    const int i = next * run.BatchSize() + tid;  // the occurrence's place in the run
    if (phase > 2 || tid >= run.BatchSize() || i >= run.count) return;
    if (phase == 0) v = b.order_out[run.start + i];
    if (phase == 1) bag = b.value_bag[v];
    if (phase == 2) run.BatchMeta(next)[tid] = ContributionOf(p, b, v, bag);
  }
};

// A block per hot run. The run's tiles pass through a ring of kHotStages slots in shared memory:
// while thread j < dim folds column j of tile u in sorted order (continuing the seqsum across
// tiles: the same additions, in the same order, as the warp path and the oracle), the copies of
// tiles u+1 .. u+kHotStages-1 (cp.async, global to shared) are in flight and the next batch's
// metadata is being fetched (HotMetaFetch). One barrier per tile: each thread waits for its own
// copies of tile u and forms them (ContributionTerm); the barrier then makes tile u whole for the
// fold and frees the slot of tile u-1 for the copies of tile u+kHotStages-1.
__global__ void __launch_bounds__(kHotThreads) HotRowKernel(const LaunchParams p, const BackwardBuffers b) {
  if (static_cast<int32_t>(blockIdx.x) >= *b.num_hot_runs) return;  // the whole block leaves together
  extern __shared__ __align__(16) unsigned char hot_shared[];
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t run_index = b.hot_runs[blockIdx.x];
  const int64_t start = b.run_start[run_index], end = b.run_start[run_index + 1];
  const int64_t global_row = RowOfKey(b, start);
  const TableParams& t = p.tables[TableOfRow(p.tables, p.num_tables, global_row)];
  const int64_t row = global_row - t.row_offset;
  const HotRun run(hot_shared, start, end, t.dim, b.max_dim);
  float* s_grad = run.ring + kHotStages * run.slot_floats;
  float* s_w = s_grad + b.max_dim;
  // Batch 0's metadata, then the copies of the ring's first kHotStages - 1 tiles, a commit group each.
  if (tid < run.BatchSize() && tid < run.count) run.meta[tid] = ContributionOf(p, b, b.order_out[start + tid]);
  __syncthreads();
  for (int u = 0; u < kHotStages - 1; ++u) {
    if (u < run.NumTiles()) run.Issue(run.Tile(u), tid);
    CopyAsyncCommit();
  }
  HotMetaFetch fetch;
  HotColumnSum sum;
  for (int u = 0; u < run.NumTiles(); ++u) {
    const HotTile tile = run.Tile(u);
    CopyAsyncWait<kHotStages - 2>();  // this thread's copies of tile u have landed
    run.Form(tile, tid);
    __syncthreads();
    if (u + kHotStages - 1 < run.NumTiles()) run.Issue(run.Tile(u + kHotStages - 1), tid);
    CopyAsyncCommit();  // a group per tile, empty past the last tile, so that the wait counts tiles
    fetch.Step(p, b, run, u, tid);
    if (tid < t.dim && b.num_batch_blocks == 1) sum.Fold(tile.Column(tid), tile.count);
    if (tid < t.dim && b.num_batch_blocks > 1) sum.FoldBlocked(tile.Column(tid), tile.meta, tile.count);
  }
  if (tid < t.dim) s_grad[tid] = sum.Finish(b.num_batch_blocks);
  if (tid < 32) {
    for (int64_t c = tid * kChunk; c < t.dim; c += 32 * kChunk) {
      float w[kChunk];
      LoadChunk(t, row, c, w);
      for (int k = 0; k < kChunk; ++k) s_w[c + k] = w[k];
    }
  }
  __syncthreads();
  if (tid >= 32) return;
  if (b.run_grads != nullptr) {
    StoreRunGradient(t, b, run_index, s_grad, s_w, tid);
    return;
  }
  const float state_before = t.optimizer.kind == OptimizerKind::kRowwiseAdagrad ? t.adagrad[row] : 0.0f;
  ApplyRowUpdate(p, t, row, s_grad, s_w, state_before, nullptr, tid);
}

// The split step's update: a warp per run, G from b.run_grads, the whole row's square sum given.
__global__ void __launch_bounds__(kRowWarps * 32) ApplyRowsKernel(const LaunchParams p, const BackwardBuffers b,
                                                                  const float* square_sums) {
  extern __shared__ float shared[];  // per warp: G [max_dim], then w [max_dim]
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t run = static_cast<int64_t>(blockIdx.x) * kRowWarps + warp;
  if (run >= *b.num_runs) return;
  const int64_t global_row = RowOfKey(b, b.run_start[run]);
  if (global_row >= b.total_rows) return;  // the run of invalid occurrences
  const TableParams& t = p.tables[TableOfRow(p.tables, p.num_tables, global_row)];
  const int64_t row = global_row - t.row_offset;
  float* s_grad = shared + warp * 2 * b.max_dim;
  float* s_w = s_grad + b.max_dim;
  for (int64_t c = lane * kChunk; c < t.dim; c += 32 * kChunk) {
    float w[kChunk];
    LoadChunk(t, row, c, w);
    for (int k = 0; k < kChunk; ++k) {
      s_grad[c + k] = b.run_grads[run * b.max_dim + c + k];
      s_w[c + k] = w[k];
    }
  }
  __syncwarp();
  const float state_before = t.optimizer.kind == OptimizerKind::kRowwiseAdagrad ? t.adagrad[row] : 0.0f;
  ApplyRowUpdate(p, t, row, s_grad, s_w, state_before, square_sums + run, lane);
}

}  // namespace gemtb::gpu::embedding::backward_kernels

#endif  // GEMTB_GPU_EMBEDDING_BACKWARD_KERNELS_CUH_
