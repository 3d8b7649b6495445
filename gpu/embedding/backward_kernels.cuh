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
//   5. a hot row (a run of >= kHotRun occurrences, e.g. the head of a Zipf distribution) gets
//      blocks instead: the seqsum fixes the order of the additions within each column, so the run
//      cannot be split into partial sums, but its columns are independent, summed by different
//      blocks, and its contributions can be fetched and formed (w*gamma, gamma/n) in any order.
//      A block per 32 columns of the row stages tiles of contributions in shared memory, many loads
//      in flight, and one thread per column folds each tile in sorted order; then a warp per hot
//      row applies the optimizer as in 4.
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

#include "gpu/embedding/launch.h"
#include "gpu/embedding/tbe_row_ops.h"

namespace gemtb::gpu::embedding::backward_kernels {

constexpr unsigned kFullMask = 0xFFFFFFFFu;
constexpr int kBagWarps = 8;
constexpr int kRowWarps = 4;
constexpr int kRowBlocksPerSm = 8;
constexpr int kThreads = 256;
constexpr int kLoadsInFlight = 2;
// 512 threads: 128 registers a thread, so that the folding warp keeps a group's shared-memory loads
// in flight (at 1,024 threads, 64 registers, ptxas issued each load just before its add).
constexpr int kHotThreads = 512;

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

__device__ Contribution ContributionOf(const LaunchParams& p, const BackwardBuffers& b, int64_t v) {
  const int64_t bag = b.value_bag[v];
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

// Warp w of the grid's W warps takes runs w, w + W, ..., w + 31 W: the lanes resolve one run each,
// then the warp sums and updates the rows one after another (a row's columns across the lanes).
// Runs are in row order, and a Zipf table's most touched rows are neighbours: 32 consecutive runs
// made a few warps sum thousands of occurrences while most summed a few, and the launch waited for
// those few. Strided, the grid (sized for one warp per 32 occurrences) gives a warp two or three runs
// of a typical batch, its long runs apart.
template <bool kBlocked>
__global__ void __launch_bounds__(kRowWarps * 32, kRowBlocksPerSm) RowUpdateKernel(const LaunchParams p,
                                                                                 const BackwardBuffers b) {
  extern __shared__ float shared[];  // per warp: G [max_dim], then w [max_dim]
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t first_run = static_cast<int64_t>(blockIdx.x) * kRowWarps + warp;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kRowWarps;
  const int32_t num_runs = *b.num_runs;
  if (first_run >= num_runs) return;  // whole warps leave together
  const RowJob mine = ResolveRowJob(p, b, first_run + lane * stride, num_runs);
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
      StoreRunGradient(t, b, first_run + j * stride, s_grad, s_w, lane);
    } else {
      ApplyRowUpdate(p, t, job.row, s_grad, s_w, job.state_before, nullptr, lane);
    }
    __syncwarp();  // every lane has read this row's G and w before the next row's are written
  }
}

// A hot row's columns in slices of kHotCols (a 128-byte line of fp32 terms an occurrence): one block
// per (hot run, slice), so that a long run's loads and folds spread over several SMs. The seqsum
// fixes the order of each column's additions, not which block adds them.
constexpr int kHotCols = 32;

// A tile: one batch of kHotThreads occurrences' formed contributions to a slice (64 KiB).
constexpr int kHotTileFloats = kHotThreads * kHotCols;

// Shared memory of HotRowKernel: two batches' metadata, two tiles, and each tile occurrence's batch
// block (for the fold of blocked sums).
constexpr size_t kHotSharedBytes =
    2 * kHotThreads * sizeof(Contribution) + 2 * kHotTileFloats * sizeof(float) + 2 * kHotThreads * sizeof(int32_t);

// One thread's part of a tile: chunks q = tid + u kHotThreads, chunk q % chunks_per_row of the
// tile's occurrence q / chunks_per_row. The same positions in every tile of a slice, so the
// divisions happen once a run.
constexpr int kHotLoads = kHotTileFloats / kChunk / kHotThreads;
constexpr int kHotFoldLoads = 8;  // a column's terms read from a tile before they are added

struct HotTileSlots {
  int k[kHotLoads];  // the occurrence within the tile
  int c[kHotLoads];  // its first column within the slice
  __device__ explicit HotTileSlots(int chunks_per_row) {
#pragma unroll
    for (int u = 0; u < kHotLoads; ++u) {
      const int q = static_cast<int>(threadIdx.x) + u * kHotThreads;
      k[u] = q / chunks_per_row;
      c[u] = (q % chunks_per_row) * kChunk;
    }
  }
};

// Load issues a tile's gradient loads (the `count` occurrences `meta` describes, columns from c0), so
// that they are in flight while the block folds the tile before; Store forms the terms and writes
// them (and the occurrences' batch blocks) to a tile.
struct HotTileLoads {
  float4 g[kHotLoads];

  __device__ void Load(const Contribution* meta, int count, int c0, const HotTileSlots& s) {
#pragma unroll
    for (int u = 0; u < kHotLoads; ++u) {
      if (s.k[u] >= count) break;  // k[u] grows with u
      g[u] = __ldg(reinterpret_cast<const float4*>(meta[s.k[u]].grad + c0 + s.c[u]));
    }
  }

  __device__ void Store(const Contribution* meta, int count, int width, const HotTileSlots& s, float* tile,
                        int32_t* blocks) const {
#pragma unroll
    for (int u = 0; u < kHotLoads; ++u) {
      if (s.k[u] >= count) break;
      const Contribution& mc = meta[s.k[u]];
      float x[kChunk] = {g[u].x, g[u].y, g[u].z, g[u].w};
      ContributionTerm(mc.pooling, mc.weight, mc.n, x);
      *reinterpret_cast<float4*>(tile + s.k[u] * width + s.c[u]) = make_float4(x[0], x[1], x[2], x[3]);
      if (s.c[u] == 0) blocks[s.k[u]] = mc.block;
    }
  }
};

// acc + col[k0 s] + col[(k0 + 1) s] + ... + col[(count - 1) s], added in that order, s the tile's
// row stride: kHotFoldLoads reads at a time, the next group's issued before this group's adds, so
// the chain waits on the adds, not on the shared-memory loads' latency. kStride > 0 is the stride
// known at compile time (a full slice): the reads' offsets are then immediates, where at a stride
// known only at run time each address waited on the one computed before it.
template <int kStride>
__device__ float FoldColumn(const float* col, int k0, int count, int stride, float acc) {
  const int s = kStride > 0 ? kStride : stride;
  int k = k0;
  if (k + kHotFoldLoads <= count) {
    const float* at = col + k * s;
    float x[kHotFoldLoads];
#pragma unroll
    for (int u = 0; u < kHotFoldLoads; ++u) x[u] = at[u * s];
    for (; k + 2 * kHotFoldLoads <= count; k += kHotFoldLoads) {
      at += kHotFoldLoads * s;
      float next[kHotFoldLoads];
#pragma unroll
      for (int u = 0; u < kHotFoldLoads; ++u) next[u] = at[u * s];
#pragma unroll
      for (int u = 0; u < kHotFoldLoads; ++u) acc = numerics::AddRn(acc, x[u]);
#pragma unroll
      for (int u = 0; u < kHotFoldLoads; ++u) x[u] = next[u];
    }
#pragma unroll
    for (int u = 0; u < kHotFoldLoads; ++u) acc = numerics::AddRn(acc, x[u]);
    k += kHotFoldLoads;
  }
  for (; k < count; ++k) acc = numerics::AddRn(acc, col[k * s]);
  return acc;
}

// Block (x, y) takes slice y (columns 32y ..) of hot runs x, x + gridDim.x, ... (the list's
// entries past its count leave at once). The run's occurrences come in batches of kHotThreads, a
// tile each, whose metadata (a chain of dependent loads an occurrence) warps 1.. resolve ahead into
// two buffers; the tiles of formed contributions alternate between two buffers: while thread
// j < width (warp 0) folds column j of one tile in sorted order, continuing the seqsum across
// tiles, every thread's loads of the next tile are in flight, and are stored to the other buffer
// after the fold. The same additions, in the same order, as the warp path and the
// oracle. G goes to b.hot_grads; HotRowApplyKernel updates the rows once every slice is summed.
__global__ void __launch_bounds__(kHotThreads) HotRowKernel(const LaunchParams p, const BackwardBuffers b) {
  extern __shared__ __align__(16) unsigned char hot_shared[];
  Contribution* const metas = reinterpret_cast<Contribution*>(hot_shared);  // two batches
  float* const tiles = reinterpret_cast<float*>(metas + 2 * kHotThreads);  // two tiles
  int32_t* const tile_blocks = reinterpret_cast<int32_t*>(tiles + 2 * kHotTileFloats);
  const int tid = static_cast<int>(threadIdx.x);
  const int32_t num_hot = *b.num_hot_runs;
  const int c0 = static_cast<int>(blockIdx.y) * kHotCols;
  // Batch `m`'s metadata (into buffer m % 2), one occurrence a thread of warps 1..: warp 0 folds.
  const auto resolve = [&](int64_t start, int64_t end, int64_t m) {
    const int64_t m0 = start + m * kHotThreads;
    Contribution* meta = metas + (m % 2) * kHotThreads;
    for (int i = tid - 32; i >= 0 && i < kHotThreads && m0 + i < end; i += kHotThreads - 32) {
      meta[i] = ContributionOf(p, b, b.order_out[m0 + i]);
    }
  };
  for (int32_t hot = static_cast<int32_t>(blockIdx.x); hot < num_hot; hot += static_cast<int32_t>(gridDim.x)) {
    const int64_t run = b.hot_runs[hot];
    const int64_t start = b.run_start[run], end = b.run_start[run + 1];
    const int64_t global_row = RowOfKey(b, start);
    const TableParams& t = p.tables[TableOfRow(p.tables, p.num_tables, global_row)];
    const int dim = static_cast<int>(t.dim);  // <= kMaxDim
    if (c0 >= dim) continue;                  // the whole block: this table has fewer slices
    const int width = min(kHotCols, dim - c0);
    const HotTileSlots slots(width / kChunk);
    const int64_t batches = (end - start + kHotThreads - 1) / kHotThreads;
    const auto batch_count = [&](int64_t m) {
      return static_cast<int>(min(static_cast<int64_t>(kHotThreads), end - start - m * kHotThreads));
    };
    // Thread tid < width: column c0 + tid's seqsum so far (with batch blocks: of the finished
    // blocks, and `inner` of the current one).
    float acc = 0.0f, inner = 0.0f;
    bool any = false, inner_any = false;
    int32_t block = -1;
    int64_t blocks_seen = 0;
    // Folds column tid of a tile of `count` occurrences.
    const auto fold = [&](const float* tile, const int32_t* blocks, int count) {
      if (tid >= width) return;
      if (b.num_batch_blocks == 1) {
        int k = 0;
        if (!any) acc = tile[tid], k = 1, any = true;  // seqsum: the first term as is
        acc = width == kHotCols ? FoldColumn<kHotCols>(tile + tid, k, count, width, acc)
                                : FoldColumn<0>(tile + tid, k, count, width, acc);
        return;
      }
      for (int k = 0; k < count; ++k) {
        const int32_t kb = blocks[k];
        if (kb != block) {  // a block ends: its seqsum joins the outer one (BlockSeqSum4)
          if (inner_any) acc = any ? numerics::AddRn(acc, inner) : inner, any = true;
          inner_any = false;
          block = kb;
          ++blocks_seen;
        }
        const float x = tile[k * width + tid];
        inner = inner_any ? numerics::AddRn(inner, x) : x;
        inner_any = true;
      }
    };
    // The first tile, then per batch m: the next batch's loads, the metadata of the batch after it,
    // the fold of batch m, the next batch's store.
    __syncthreads();  // the previous run's last tile is folded
    resolve(start, end, 0);
    __syncthreads();
    {
      HotTileLoads loads;
      loads.Load(metas, batch_count(0), c0, slots);
      if (batches > 1) resolve(start, end, 1);
      loads.Store(metas, batch_count(0), width, slots, tiles, tile_blocks);
    }
    __syncthreads();
    for (int64_t m = 0; m < batches; ++m) {
      const int cur = static_cast<int>(m % 2), next = cur ^ 1;
      const bool has_next = m + 1 < batches;
      HotTileLoads loads;
      if (has_next) loads.Load(metas + next * kHotThreads, batch_count(m + 1), c0, slots);
      // Batch m's metadata was read for the last time by its tile's store: its buffer takes m + 2's.
      if (m + 2 < batches) resolve(start, end, m + 2);
      fold(tiles + cur * kHotTileFloats, tile_blocks + cur * kHotThreads, batch_count(m));
      if (has_next) {
        loads.Store(metas + next * kHotThreads, batch_count(m + 1), width, slots, tiles + next * kHotTileFloats,
                    tile_blocks + next * kHotThreads);
      }
      __syncthreads();
    }
    if (tid < width) {
      if (b.num_batch_blocks > 1) {
        if (inner_any) acc = any ? numerics::AddRn(acc, inner) : inner;
        if (blocks_seen < b.num_batch_blocks) acc = numerics::AddRn(acc, 0.0f);
      }
      b.hot_grads[static_cast<int64_t>(hot) * b.max_dim + c0 + tid] = acc;
    }
  }
}

// A warp's copy of a row's G (`grad`, from an earlier kernel) and weights (widened) into s_grad and s_w,
// for ApplyRowUpdate.
__device__ void StageRow(const TableParams& t, int64_t row, const float* grad, float* s_grad, float* s_w, int lane) {
  for (int64_t c = lane * kChunk; c < t.dim; c += 32 * kChunk) {
    float w[kChunk];
    LoadChunk(t, row, c, w);
    for (int k = 0; k < kChunk; ++k) {
      s_grad[c + k] = grad[c + k];
      s_w[c + k] = w[k];
    }
  }
  __syncwarp();
}

// A warp per hot run: the row's G from b.hot_grads (every slice's), then the table's optimizer as
// the warp path applies it (or, for the split step, the run's G and partial square sum).
__global__ void __launch_bounds__(kRowWarps * 32) HotRowApplyKernel(const LaunchParams p, const BackwardBuffers b) {
  extern __shared__ float shared[];  // per warp: G [max_dim], then w [max_dim]
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t hot = static_cast<int64_t>(blockIdx.x) * kRowWarps + warp;
  if (hot >= *b.num_hot_runs) return;
  const int64_t run = b.hot_runs[hot];
  const int64_t global_row = RowOfKey(b, b.run_start[run]);
  const TableParams& t = p.tables[TableOfRow(p.tables, p.num_tables, global_row)];
  const int64_t row = global_row - t.row_offset;
  float* s_grad = shared + warp * 2 * b.max_dim;
  float* s_w = s_grad + b.max_dim;
  StageRow(t, row, b.hot_grads + hot * b.max_dim, s_grad, s_w, lane);
  if (b.run_grads != nullptr) {
    StoreRunGradient(t, b, run, s_grad, s_w, lane);
    return;
  }
  const float state_before = t.optimizer.kind == OptimizerKind::kRowwiseAdagrad ? t.adagrad[row] : 0.0f;
  ApplyRowUpdate(p, t, row, s_grad, s_w, state_before, nullptr, lane);
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
  StageRow(t, row, b.run_grads + run * b.max_dim, s_grad, s_w, lane);
  const float state_before = t.optimizer.kind == OptimizerKind::kRowwiseAdagrad ? t.adagrad[row] : 0.0f;
  ApplyRowUpdate(p, t, row, s_grad, s_w, state_before, square_sums + run, lane);
}

}  // namespace gemtb::gpu::embedding::backward_kernels

#endif  // GEMTB_GPU_EMBEDDING_BACKWARD_KERNELS_CUH_
