// The stored-dS backward (kernel_policy.h's kHopperStoredDs): dQ from the dS blocks the dK/dV kernel
// stored (backward_hopper_ds_layout.cuh, backward_stored_ds_plan.h), so the dQ pass is one GEMM per
// (query tile, key block), dQ += dS K, instead of the recompute path's S = Q Kᵀ, dP = dO Vᵀ, the
// elementwise step and dQ += dS K (7 GEMMs per pair -> 5).
//
// Same tile list, grid (tile x query head), reader order, key order and split-tile partial sums as
// DqHopperKernel, so the sum over keys runs in one fixed order (deterministic, no atomics); the dS
// it multiplies are the bits the dK/dV kernel rounded for its dK MMA. Per step: the K block and the
// dS block (8 KB) by cp.async through kDqStoredStages shared-memory stages (128-byte swizzled K; dS
// read back with 16-byte loads in its register A-operand order), kDqStoredStages - 1 steps' loads in
// flight per CTA for the dS stream from DRAM. A reader's key range starts at its rows' first valid
// key, which need not be a block boundary: steps run over whole 64-key blocks from the block holding
// it. A block no row of the tile has a valid key in may never have been written (the dK/dV kernel
// writes only the blocks its steps cover): the CTA skips it on a vote at the step's barrier.
#ifndef GEMTB_GPU_ATTENTION_BACKWARD_HOPPER_DQ_STORED_CUH_
#define GEMTB_GPU_ATTENTION_BACKWARD_HOPPER_DQ_STORED_CUH_

#include "absl/status/status.h"
#include "gpu/attention/backward_hopper_dkdv_chain.cuh"
#include "gpu/attention/backward_hopper_ds_layout.cuh"
#include "gpu/attention/backward_hopper_kernel.cuh"
#include "gpu/common/cuda_check.cuh"

namespace gemtb::gpu {

// Three stages (three CTAs per SM): faster than two with the dS in registers and than four
// (tools/bench/NOTES.md).
inline constexpr int kDqStoredStages = 3;

// Whether one of this thread's rows row[r] (< q_rows; rows past the tile have none) has a valid key
// in the dS block of keys [j0, j0 + 64): blocks no row of the tile meets may never have been written.
__device__ __forceinline__ bool DsBlockMeetsRows(const int (&row)[2], int q_rows, const RowKeyRange (&keys)[2],
                                                 int j0) {
  bool meets = false;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    meets = meets || (row[r] < q_rows && keys[r].begin < keys[r].end && keys[r].begin < j0 + kDsBlock &&
                      keys[r].end > j0);
  }
  return meets;
}

// dQ of one 64-row query tile (blockIdx.x) of query head blockIdx.y, over its readers in order.
template <int kStages>
inline constexpr size_t kHopperDqStoredPipeSmemBytes = 1024 + kStages * (kHopperBwdTileBytes + kDsBlockElements * 2);

template <ElementType E, int kStages>
__global__ void __launch_bounds__(kHopperBwdThreads, 2) DqStoredDsPipelinedHopperKernel(const BackwardParams p) {
  constexpr int D = kHopperHeadDim;
  constexpr uint32_t kStageBytes = kHopperBwdTileBytes + kDsBlockElements * 2;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t s0 = (wgmma::SmemAddress(smem_raw) + 1023u) & ~1023u;
  const auto sk = [&](int stage) { return s0 + static_cast<uint32_t>(stage) * kStageBytes; };
  const auto sds = [&](int stage) { return sk(stage) + kHopperBwdTileBytes; };

  const ProblemParams& pr = p.problem;
  const DqTile tile = p.dq_tiles[blockIdx.x];
  const int h = static_cast<int>(blockIdx.y);
  const int hk = h / (pr.heads / pr.kv_heads);
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid & 31;
  const LaneCoords ln = Lane();
  const int64_t kv_stride = static_cast<int64_t>(pr.kv_heads) * D;
  const int qb = tile.i0 / kDsBlock;
  const SeqInfo first = pr.seqs[p.dq_readers[tile.reader_begin].b];
  const int q_rows = min(64, first.lq - tile.i0);

  struct Cursor {
    int ri, j0;
  };
  const auto reader = [&](int ri) { return p.dq_readers[tile.reader_begin + ri]; };
  const auto block_start = [](int k_lo) { return k_lo - k_lo % kDsBlock; };
  const auto advance = [&](Cursor c) {
    c.j0 += kDsBlock;
    if (c.j0 < reader(c.ri).k_hi) return c;
    if (++c.ri < tile.reader_count) c.j0 = block_start(reader(c.ri).k_lo);
    return c;
  };
  // K rows [j0, k_hi) of the block (zero past the reader's range) and the block's dS (8 KB, a plain copy).
  const auto load_step = [&](Cursor c, int stage) {
    const DqReader rd = reader(c.ri);
    const SeqInfo seq = pr.seqs[rd.b];
    HopperBwdLoad(sk(stage), pr.k + (seq.kv_begin + c.j0) * kv_stride + hk * D, kv_stride, min(64, rd.k_hi - c.j0),
                  pr.k);
    const uint16_t* src = p.ds + HopperBwdDsBlockOffset(p, rd.b, qb, c.j0 / kDsBlock, h);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int chunk = tid + i * kHopperBwdThreads;
      wgmma::CpAsync16(sds(stage) + static_cast<uint32_t>(chunk * 16), src + chunk * 8, 16u);
    }
  };
  Cursor cur{0, block_start(reader(0).k_lo)};
  Cursor load = cur;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {  // one commit group per stage, empty past the last step
    if (load.ri < tile.reader_count) {
      load_step(load, s);
      load = advance(load);
    }
    CopyAsyncCommit();
  }

  const int row[2] = {warp * 16 + ln.g, warp * 16 + ln.g + 8};
  float dq[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) dq[i] = 0.f;
  RowKeyRange keys[2] = {{0, 0}, {0, 0}};
  int row_reader = -1;
  for (int stage = 0; cur.ri < tile.reader_count; stage = stage + 1 == kStages ? 0 : stage + 1) {
    if (row_reader != cur.ri) {
      row_reader = cur.ri;
      const SeqInfo seq = pr.seqs[reader(cur.ri).b];
#pragma unroll
      for (int r = 0; r < 2; ++r) keys[r] = RowKeys(pr.options, tile.i0 + row[r], seq.lq, seq.lk);
    }
    const bool meets = DsBlockMeetsRows(row, q_rows, keys, cur.j0);
    CopyAsyncWait<kStages - 2>();  // this step's group is in
    wgmma::FenceProxyAsync();
    // Every thread is done with the previous step's stage, which the next load refills.
    const bool any = __syncthreads_or(meets ? 1 : 0) != 0;
    if (load.ri < tile.reader_count) {
      load_step(load, stage == 0 ? kStages - 1 : stage - 1);
      load = advance(load);
    }
    CopyAsyncCommit();
    if (any) {
      uint32_t a[4][4];
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const uint4 v = LdSharedV4(sds(stage) + static_cast<uint32_t>((warp * 128 + kk * 32 + lane) * 16));
        a[kk][0] = v.x;
        a[kk][1] = v.y;
        a[kk][2] = v.z;
        a[kk][3] = v.w;
      }
      wgmma::Fence();
      HopperBwdIssueAB<E>(dq, a, sk(stage));
      wgmma::Commit();
      wgmma::Wait<0>();
      wgmma::FenceRegisters(dq);
    }
    cur = advance(cur);
  }
  CopyAsyncWait<0>();

  if (tile.partial >= 0) {
    HopperBwdStoreDqPartial(p, dq, tile.partial, h, row, ln);
    return;
  }
  HopperBwdStoreDqRows<E>(p, dq, first.q_begin + tile.i0, q_rows, h, row, ln);
}

// The two launches of the stored-dS backward (params.ds set): the dK/dV kernel that also stores
// dS, and the dQ pass above.
template <ElementType E>
absl::Status LaunchDkDvHopperStoredDs(const BackwardParams& params, int64_t num_tiles) {
  const dim3 grid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(params.problem.kv_heads));
  const dim3 block(kHopperBwdThreads);
  const size_t smem = kHopperDkDvSmemBytes;
  const char* name = "attention backward dK/dV kernel storing dS (Hopper)";
  return DispatchHopperActTanhApprox(params.problem.options, [&]<HopperAct A>() {
    return Launch(DkDvHopperKernel<E, A, true>, grid, block, smem, params, name);
  });
}

template <ElementType E>
absl::Status LaunchDqHopperStoredDs(const BackwardParams& params, int64_t num_tiles) {
  const dim3 grid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(params.problem.heads));
  return Launch(DqStoredDsPipelinedHopperKernel<E, kDqStoredStages>, grid, dim3(kHopperBwdThreads),
                kHopperDqStoredPipeSmemBytes<kDqStoredStages>, params,
                "attention backward dQ kernel on stored dS (Hopper)");
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_BACKWARD_HOPPER_DQ_STORED_CUH_
