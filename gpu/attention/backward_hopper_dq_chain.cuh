// Chained Hopper dQ (sm_90a, head dim 128): the one-tile kernel of backward_hopper_kernel.cuh, but one CTA runs
// a chain of consecutive query tiles of the host's list (tiles_per_cta of them) instead of one, so a
// tile's fixed cost overlaps its neighbours' work:
//   - the next tile's first K/V step loads into the free stage during this tile's last step (as any
//     next step does inside a tile);
//   - its Q and first dO load once this tile's last S and dP are done (Q and dO are free then),
//     while the last dS, the last dQ MMA and the stores of this tile's dQ run.
// Per tile the steps, their order, the MMAs and the elementwise code are the one-tile kernel's, so
// every dQ (and every split tile's fp32 part) is bitwise what it writes (deterministic, no atomics). Cross
// attention's tiles have four 64-key steps each (256 keys), so the per-tile load latency was a large
// part of each CTA's time.
// dQ leaves through shared memory as whole 16-byte chunks (see the end of the loop).
// Shared memory as the one-tile kernel: Q, two dO buffers (reader parity), two stages of K and V (113 KB).
#ifndef GEMTB_GPU_ATTENTION_BACKWARD_HOPPER_DQ_CHAIN_CUH_
#define GEMTB_GPU_ATTENTION_BACKWARD_HOPPER_DQ_CHAIN_CUH_

#include <type_traits>

#include "gpu/attention/backward_hopper_dkdv_chain.cuh"  // StoreHopperBwdRows
#include "gpu/attention/backward_hopper_kernel.cuh"

namespace gemtb::gpu {

// Chain c (tiles [c * tiles_per_cta, min(+tiles_per_cta, num_tiles)) of p.dq_tiles) of query head h:
// c = blockIdx.x, h = blockIdx.y; or, with head_minor, one dimension c * heads + h (the heads of one
// tile side by side: whole rows of Q, dO and K/V read together).
template <ElementType E, HopperAct kAct>
__global__ void __launch_bounds__(kHopperBwdThreads, 2)
    DqHopperChainKernel(const BackwardParams p, int tiles_per_cta, int num_tiles, int head_minor) {
  constexpr int D = kHopperHeadDim;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t sq = (wgmma::SmemAddress(smem_raw) + 1023u) & ~1023u;
  const auto s_do = [&](int buf) { return sq + (1u + static_cast<uint32_t>(buf)) * kHopperBwdTileBytes; };
  const auto sk = [&](int stage) { return sq + (3u + 2u * static_cast<uint32_t>(stage)) * kHopperBwdTileBytes; };
  const auto sv = [&](int stage) { return sk(stage) + kHopperBwdTileBytes; };

  const ProblemParams& pr = p.problem;
  const int h = head_minor != 0 ? static_cast<int>(blockIdx.x) % p.problem.heads : static_cast<int>(blockIdx.y);
  const int chain = head_minor != 0 ? static_cast<int>(blockIdx.x) / p.problem.heads : static_cast<int>(blockIdx.x);
  const int hk = h / (pr.heads / pr.kv_heads);
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const LaneCoords ln = Lane();
  const int64_t q_stride = static_cast<int64_t>(pr.heads) * D;
  const int64_t kv_stride = static_cast<int64_t>(pr.kv_heads) * D;
  constexpr bool softmax = kAct == HopperAct::kSoftmax;
  const float scale_log2 = pr.pre_scale * kHopperBwdLog2e;
  const int t_begin = chain * tiles_per_cta;
  const int t_end = min(num_tiles, t_begin + tiles_per_cta);
  if (t_begin >= t_end) return;

  // A step: tile t of the list, its reader ri, keys [j0, j0 + 64) of the reader's range.
  struct Cursor {
    int t, ri, j0;
  };
  const auto reader = [&](const DqTile& tile, int ri) { return p.dq_readers[tile.reader_begin + ri]; };
  // Every reader of a tile reads the same query rows: take them from the first.
  const auto first_seq = [&](const DqTile& tile) { return pr.seqs[reader(tile, 0).b]; };
  const auto advance = [&](Cursor c, const DqTile& tile) {
    c.j0 += 64;
    if (c.j0 < reader(tile, c.ri).k_hi) return c;
    if (++c.ri < tile.reader_count) {
      c.j0 = reader(tile, c.ri).k_lo;
      return c;
    }
    if (++c.t < t_end) {
      c.ri = 0;
      c.j0 = reader(p.dq_tiles[c.t], 0).k_lo;
    }
    return c;
  };
  const auto load_kv = [&](const Cursor& c, const DqTile& tile, int stage) {
    const DqReader rd = reader(tile, c.ri);
    const SeqInfo seq = pr.seqs[rd.b];
    const int64_t kv_offset = (seq.kv_begin + c.j0) * kv_stride + hk * D;
    const int k_rows = min(64, rd.k_hi - c.j0);
    HopperBwdLoad(sk(stage), pr.k + kv_offset, kv_stride, k_rows, pr.k);
    HopperBwdLoad(sv(stage), pr.v + kv_offset, kv_stride, k_rows, pr.v);
  };
  // dO of reader ri into buffer ri % 2.
  const auto load_do = [&](const DqTile& tile, int ri) {
    const SeqInfo seq = pr.seqs[reader(tile, ri).b];
    const int q_rows = min(64, first_seq(tile).lq - tile.i0);
    HopperBwdLoad(s_do(ri & 1), p.d_o + (seq.out_begin + tile.i0) * q_stride + h * D, q_stride, q_rows, p.d_o);
  };
  const auto load_q = [&](const DqTile& tile) {
    const SeqInfo first = first_seq(tile);
    const int q_rows = min(64, first.lq - tile.i0);
    HopperBwdLoad(sq, pr.q + (first.q_begin + tile.i0) * q_stride + h * D, q_stride, q_rows, pr.q);
  };

  Cursor cur{t_begin, 0, 0};
  {
    const DqTile tile = p.dq_tiles[t_begin];
    cur.j0 = reader(tile, 0).k_lo;
    load_q(tile);
    load_kv(cur, tile, 0);
    load_do(tile, 0);
  }
  CopyAsyncCommit();

  const int row[2] = {warp * 16 + ln.g, warp * 16 + ln.g + 8};
  float dq[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) dq[i] = 0.f;
  RowKeyRange keys[2] = {{0, 0}, {0, 0}};
  float lse[2] = {0.f, 0.f};
  float d_i[2] = {0.f, 0.f};
  int row_reader = -1;
  for (int stage = 0; cur.t < t_end; stage ^= 1) {
    const DqTile tile = p.dq_tiles[cur.t];
    const int q_rows = min(64, first_seq(tile).lq - tile.i0);
    CopyAsyncWait<0>();
    wgmma::FenceProxyAsync();
    __syncthreads();
    // The one-tile kernel's step: S and dP; P̂ (or act') from S while dP runs; dS; dQ += dS K. The MMAs are issued
    // before the next step's loads (the one-tile kernel: after), so the lists' dependent reads run beside them.
    float s[32], dp[32];
    wgmma::Fence();
    HopperBwdIssueAbT<E>(s, sq, sk(stage));
    wgmma::Commit();
    HopperBwdIssueAbT<E>(dp, s_do(cur.ri & 1), sv(stage));
    wgmma::Commit();
    const Cursor next = advance(cur, tile);
    const bool more = next.t < t_end;
    const bool last_of_tile = next.t != cur.t;
    if (more) {
      if (last_of_tile) {
        load_kv(next, p.dq_tiles[next.t], stage ^ 1);
      } else {
        load_kv(next, tile, stage ^ 1);
        if (next.ri != cur.ri) load_do(tile, next.ri);
      }
    }
    CopyAsyncCommit();
    const DqReader rd = reader(tile, cur.ri);
    if (row_reader != cur.ri) {
      row_reader = cur.ri;
      const SeqInfo seq = pr.seqs[rd.b];
      // Padding rows get 0 as in the one-tile kernel, whatever the previous tile held.
      HopperBwdDqRowState<softmax, true>(p, seq, h, tile.i0, row, q_rows, keys, lse, d_i);
    }

    wgmma::Wait<1>();
    wgmma::FenceRegisters(s);
    float(&s4)[8][4] = *reinterpret_cast<float(*)[8][4]>(&s);
    float(&dp4)[8][4] = *reinterpret_cast<float(*)[8][4]>(&dp);
    const auto form_kept = [&](auto masked) {
      HopperBwdDqFormKept<kAct, decltype(masked)::value>(pr, s4, lse, scale_log2, keys, cur.j0, ln);
    };
    HopperBwdDqStepKept(dp, rd.k_hi, cur.j0, row, q_rows, keys, form_kept);
    if (more && last_of_tile) {
      // Every warp's S and dP of this tile are done: Q and the dO buffers are free for the next
      // tile, whose rows load while this step finishes and this tile's dQ is stored.
      __syncthreads();
      const DqTile next_tile = p.dq_tiles[next.t];
      load_q(next_tile);
      load_do(next_tile, 0);
      CopyAsyncCommit();
    }
    uint32_t dsa[4][4];
    float ds4[4];
    HopperBwdDqDs<E, kAct>(pr, s4, dp4, d_i, ds4, dsa);
    HopperBwdDqAccumulate<E>(dsa, sk(stage), dq);

    if (last_of_tile) {
      if (tile.partial >= 0) {  // one part of a split tile: the fp32 sum, for DqReduceKernel
        HopperBwdStoreDqPartial(p, dq, tile.partial, h, row, ln);
      } else {
        // dQ leaves through this step's K/V stage (free once every warp's dQ MMA is done) as whole
        // 16-byte chunks of whole rows rather than 4 bytes per thread from the accumulator layout.
        __syncthreads();
        StoreHopperBwdRows<E>(dq, pr.pre_scale, sk(stage), q_rows,
                              p.dq + ((first_seq(tile).q_begin + tile.i0) * pr.heads + h) * D, q_stride);
      }
#pragma unroll
      for (int i = 0; i < 64; ++i) dq[i] = 0.f;
      row_reader = -1;
    }
    cur = next;
  }
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_BACKWARD_HOPPER_DQ_CHAIN_CUH_
