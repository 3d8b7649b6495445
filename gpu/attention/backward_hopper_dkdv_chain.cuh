// Chained Hopper dK/dV (sm_90a, head dim 128): the one-tile kernel of backward_hopper_kernel.cuh, but one CTA
// runs a chain of consecutive K/V tiles of the host's list (tiles_per_cta of them) instead of one,
// so a tile's fixed cost overlaps its neighbours' work:
//   - the next tile's K and V load while this tile's last query step computes;
//   - its first Q/dO step loads while this tile's dK and dV are stored;
//   - that Q/dO step is not loaded at all when it is this tile's last one again (same reader rows,
//     same head, same row count: PMA's broadcast_q tiles of one sequence, one step each);
//   - a step issues its Sᵀ/dPᵀ MMAs before the next step's loads (the lists' dependent reads then
//     run beside the tensor cores);
//   - dK and dV leave through shared memory as whole 16-byte chunks of whole rows
//     (StoreHopperBwdRows) instead of 4-byte stores from the accumulator layout;
//   - optionally (head_minor) the K/V heads of one chain run side by side.
// Per tile the steps, their order, the MMAs and the elementwise code are the one-tile kernel's, so
// every dK and dV is bitwise what it writes (deterministic, no atomics). PMA ran 40,188 one-step CTAs (tensor pipe
// 12% busy, DRAM 37%: each CTA loaded, computed and stored in turn).
//
// Shared memory: three slots of two 64-row swizzled tiles each (97 KB, as the one-tile kernel: two CTAs per SM). At
// any step one slot holds K and V, one this step's Q and dO, and the third is free for the next
// load: the next step's Q/dO inside a tile, the next tile's K/V at a tile's last step. Each slot
// keeps the per-row key ranges, LSE and D_i of the Q/dO rows it holds.
#ifndef GEMTB_GPU_ATTENTION_BACKWARD_HOPPER_DKDV_CHAIN_CUH_
#define GEMTB_GPU_ATTENTION_BACKWARD_HOPPER_DKDV_CHAIN_CUH_

#include <type_traits>

#include "gpu/attention/backward_hopper_kernel.cuh"

namespace gemtb::gpu {

// 32-bit shared-memory stores and 16-byte loads by shared address (the epilogues' staging; generic
// pointers would hold two registers each where the step needs all 255).
__device__ __forceinline__ void StSharedU32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ uint4 LdSharedV4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
  return v;
}

// A 64 x 128 fp32 accumulator tile (the m64n128 layout of one warpgroup) times `scale`, rounded to
// the input type, to global rows [0, rows) of `dst` (rows `dst_stride` elements apart) through the
// 64-row staging area at shared address `staging` (64 * kBwdEpiRowBytes bytes): fragments in, a
// barrier, whole 16-byte chunks out. The caller makes sure the staging area is free.
inline constexpr int kBwdEpiRowBytes = kHopperHeadDim * 2 + 16;
template <ElementType E>
__device__ __forceinline__ void StoreHopperBwdRows(const float (&acc)[64], float scale, uint32_t staging, int rows,
                                                   uint16_t* dst, int64_t dst_stride) {
  constexpr int D = kHopperHeadDim;
  const int tid = static_cast<int>(threadIdx.x);
  const LaneCoords ln = Lane();
  const uint32_t mine = staging + static_cast<uint32_t>((tid / 32 * 16 + ln.g) * kBwdEpiRowBytes + 4 * ln.t);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      StSharedU32(mine + static_cast<uint32_t>(r * 8 * kBwdEpiRowBytes + 16 * i),
                  PackRounded<E>(scale * acc[4 * i + 2 * r], scale * acc[4 * i + 2 * r + 1]));
    }
  }
  __syncthreads();
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
#pragma unroll
  for (int k = 0; k < 64 * kChunks / kHopperBwdThreads; ++k) {
    const int idx = tid + k * kHopperBwdThreads;
    const int row = idx / kChunks;
    const int c = idx % kChunks;
    if (row < rows) {
      *reinterpret_cast<uint4*>(dst + row * dst_stride + 8 * c) =
          LdSharedV4(staging + static_cast<uint32_t>(row * kBwdEpiRowBytes + 16 * c));
    }
  }
}

// Chain c (tiles [c * tiles_per_cta, min(+tiles_per_cta, num_tiles)) of p.dkv_tiles) of K/V head hk:
// c = blockIdx.x, hk = blockIdx.y; or, with head_minor, one dimension c * kv_heads + hk, so that the
// heads of one tile run side by side and read and write whole K/V rows (H * D elements) together
// rather than one head's 256 bytes of every row in turn.
template <ElementType E, HopperAct kAct>
__global__ void __launch_bounds__(kHopperBwdThreads, 2)
    DkDvHopperChainKernel(const BackwardParams p, int tiles_per_cta, int num_tiles, int head_minor) {
  constexpr int D = kHopperHeadDim;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  __shared__ RowKeyRange s_keys[3][64];
  __shared__ float s_lse[3][64];
  __shared__ float s_d[3][64];
  const uint32_t base = (wgmma::SmemAddress(smem_raw) + 1023u) & ~1023u;
  // Slot s: first tile (K or Q) at slot_at(s), second (V or dO) one tile further.
  const auto slot_at = [&](int s) { return base + static_cast<uint32_t>(s) * 2u * kHopperBwdTileBytes; };

  const ProblemParams& pr = p.problem;
  const int hk = head_minor != 0 ? static_cast<int>(blockIdx.x) % p.problem.kv_heads : static_cast<int>(blockIdx.y);
  const int chain = head_minor != 0 ? static_cast<int>(blockIdx.x) / p.problem.kv_heads : static_cast<int>(blockIdx.x);
  const int group = pr.heads / pr.kv_heads;
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const LaneCoords ln = Lane();
  const int64_t q_stride = static_cast<int64_t>(pr.heads) * D;
  const int64_t kv_stride = static_cast<int64_t>(pr.kv_heads) * D;
  constexpr bool softmax = kAct == HopperAct::kSoftmax;
  const float scale_log2 = pr.pre_scale * kHopperBwdLog2e;
  const int t_begin = chain * tiles_per_cta;
  const int t_end = min(num_tiles, t_begin + tiles_per_cta);

  // A step: tile t of the list, segment sgi of it, query head h of the GQA group, rows from q0
  // (the one-tile kernel's order: segment, then head, then 64-row steps).
  struct Cursor {
    int t, sgi, h, q0;
  };
  const auto segment = [&](const DkvTile& tile, int sgi) { return p.dkv_segments[tile.seg_begin + sgi]; };
  const auto first_step = [&](int t) {
    return Cursor{t, 0, hk * group, segment(p.dkv_tiles[t], 0).i0};
  };
  // The step after c; t == t_end when the chain is done.
  const auto advance = [&](Cursor c, const DkvTile& tile) {
    c.q0 += 64;
    if (c.q0 < segment(tile, c.sgi).i1) return c;
    if (++c.h < (hk + 1) * group) {
      c.q0 = segment(tile, c.sgi).i0;
      return c;
    }
    c.h = hk * group;
    if (++c.sgi < tile.seg_count) {
      c.q0 = segment(tile, c.sgi).i0;
      return c;
    }
    return ++c.t < t_end ? first_step(c.t) : c;
  };
  // What a step's Q/dO slot holds: reader b, head h, rows [q0, q0 + nq).
  struct Rows {
    int b, h, q0, nq;
  };
  const auto rows_of = [&](const Cursor& c, const DkvTile& tile) {
    const DkvSegment seg = segment(tile, c.sgi);
    return Rows{seg.b, c.h, c.q0, min(64, seg.i1 - c.q0)};
  };
  const auto load_kv = [&](const DkvTile& tile, int slot) {
    const int k_rows = min(64, tile.lk - tile.j0);
    const int64_t kv_offset = (tile.kv_begin + tile.j0) * kv_stride + hk * D;
    HopperBwdLoad(slot_at(slot), pr.k + kv_offset, kv_stride, k_rows, pr.k);
    HopperBwdLoad(slot_at(slot) + kHopperBwdTileBytes, pr.v + kv_offset, kv_stride, k_rows, pr.v);
  };
  const auto load_rows = [&](const Rows& r, int slot) {
    const SeqInfo seq = pr.seqs[r.b];
    HopperBwdLoad(slot_at(slot), pr.q + (seq.q_begin + r.q0) * q_stride + r.h * D, q_stride, r.nq, pr.q);
    HopperBwdLoad(slot_at(slot) + kHopperBwdTileBytes, p.d_o + (seq.out_begin + r.q0) * q_stride + r.h * D, q_stride,
                  r.nq, p.d_o);
    if (tid < 64) {
      const bool row_ok = tid < r.nq;
      s_keys[slot][tid] = row_ok ? RowKeys(pr.options, r.q0 + tid, seq.lq, seq.lk) : RowKeyRange{0, 0};
      const int64_t at = r.h * pr.out_rows + seq.out_begin + r.q0 + tid;
      s_lse[slot][tid] = softmax && row_ok ? p.lse[at] * kHopperBwdLog2e : 0.f;
      s_d[slot][tid] = softmax && row_ok ? p.d_rows[at] : 0.f;
    }
  };

  // The step after cur, whether it starts another tile, and whether it reads the Q/dO rows cur
  // reads. Taken once to start the next loads and again after the step's MMAs (from the cached
  // lists) rather than held in registers across them: the step needs all 255.
  struct Plan {
    Cursor next;
    bool reuse_rows;
  };
  const auto plan_after = [&](const Cursor& c) {
    const DkvTile tile = p.dkv_tiles[c.t];
    Plan plan{advance(c, tile), false};
    if (plan.next.t < t_end && plan.next.t != c.t) {
      const Rows a = rows_of(c, tile), b = rows_of(plan.next, p.dkv_tiles[plan.next.t]);
      plan.reuse_rows = a.b == b.b && a.h == b.h && a.q0 == b.q0 && a.nq == b.nq;
    }
    return plan;
  };

  if (t_begin >= t_end) return;
  // Only the cursor and the slots live across a step; the tile and its rows are read again from
  // the (cached) lists where needed, which keeps the one-tile kernel's register budget (255, accumulators included).
  int kv_slot = 0, q_slot = 1, free_slot = 2;
  Cursor cur = first_step(t_begin);
  {
    const DkvTile tile = p.dkv_tiles[t_begin];
    load_kv(tile, kv_slot);
    load_rows(rows_of(cur, tile), q_slot);
  }
  CopyAsyncCommit();

  float dk[64], dv[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    dk[i] = 0.f;
    dv[i] = 0.f;
  }
  while (cur.t < t_end) {
    const DkvTile tile = p.dkv_tiles[cur.t];
    const int k_rows = min(64, tile.lk - tile.j0);
    const int key[2] = {tile.j0 + warp * 16 + ln.g, tile.j0 + warp * 16 + ln.g + 8};  // rows of c0/c1, c2/c3
    CopyAsyncWait<0>();
    wgmma::FenceProxyAsync();
    // A step is full when every pair of its 64 x 64 block is valid (as in the one-tile kernel): rows 0..63 vote from
    // their key ranges (written by this same thread when the slot was loaded), the barrier that
    // starts the step ANDs the votes. It also says every thread is done with the free slot.
    int vote = 1;
    if (tid < 64) {
      const RowKeyRange keys = s_keys[q_slot][tid];
      vote = k_rows == 64 && keys.begin <= tile.j0 && keys.end >= tile.j0 + 64 ? 1 : 0;
    }
    const bool full = __syncthreads_and(vote) != 0;

    const uint32_t sk = slot_at(kv_slot), sv = sk + kHopperBwdTileBytes;
    const uint32_t sq = slot_at(q_slot), s_do = sq + kHopperBwdTileBytes;
    // The one-tile kernel's step: Sᵀ and dPᵀ; P̂ (or act, act') from Sᵀ while dPᵀ runs; dSᵀ; dV += Pᵀ dO and
    // dK += dSᵀ Q. The MMAs are issued before the next step's loads (the one-tile kernel: after), so the lists'
    // dependent reads that find the next step run while the tensor cores work.
    float st[32], dpt[32];
    wgmma::Fence();
    HopperBwdIssueAbT<E>(st, sk, sq);
    wgmma::Commit();
    HopperBwdIssueAbT<E>(dpt, sv, s_do);
    wgmma::Commit();
    {
      const Plan plan = plan_after(cur);
      if (plan.next.t < t_end) {
        if (plan.next.t != cur.t) {
          load_kv(p.dkv_tiles[plan.next.t], free_slot);  // the slot nobody reads during this step
        } else {
          load_rows(rows_of(plan.next, tile), free_slot);
        }
      }
    }
    CopyAsyncCommit();
    float(&st4)[8][4] = *reinterpret_cast<float(*)[8][4]>(&st);
    uint32_t pa[4][4], dsa[4][4];
    const auto form_p = [&](auto masked) {
      HopperBwdDkDvFormP<E, kAct, decltype(masked)::value>(ln, pr, st4, s_lse[q_slot], scale_log2, s_keys[q_slot], key,
                                                           pa);
    };
    float ds4[4];
    HopperBwdDkDvStepRest<E, kAct>(ln, pr, st, dpt, full, form_p, s_d[q_slot], ds4, pa, dsa, sq, s_do, dk, dv);

    const Plan plan = plan_after(cur);
    const bool more = plan.next.t < t_end;
    if (plan.next.t != cur.t) {  // this tile's last step: store dK and dV, switch slots
      const DkvTile done = p.dkv_tiles[cur.t];
      const int done_rows = min(64, done.lk - done.j0);
      // Every warp's MMAs of this step are done: all slots but the prefetched K/V are free.
      __syncthreads();
      int rows_slot = q_slot;
      if (more && !plan.reuse_rows) {
        // The next tile's first Q/dO rows load into the K/V slot while dK and dV are stored.
        rows_slot = kv_slot;
        load_rows(rows_of(plan.next, p.dkv_tiles[plan.next.t]), rows_slot);
        CopyAsyncCommit();
      }
      // dK, then dV, leave through the slot nobody needs now (the old K/V one when the rows stay,
      // else the old Q/dO one) as whole 16-byte chunks of whole rows: from the accumulator layout a
      // warp store wrote 16 contiguous bytes per row (PMA's one-step tiles are half stores). Rows
      // are kBwdEpiRowBytes apart (256 + 16), so neither the fragment writes nor the chunk reads
      // conflict on banks, and each fragment's address is the thread's base plus a constant.
      const uint32_t epi = slot_at(more && plan.reuse_rows ? kv_slot : q_slot);
      StoreHopperBwdRows<E>(dk, pr.pre_scale, epi, done_rows, p.dk + ((done.kv_begin + done.j0) * pr.kv_heads + hk) * D,
                            static_cast<int64_t>(pr.kv_heads) * D);
      __syncthreads();  // every thread's dK chunks are read: the slot takes dV
      StoreHopperBwdRows<E>(dv, 1.f, epi, done_rows, p.dv + ((done.kv_begin + done.j0) * pr.kv_heads + hk) * D,
                            static_cast<int64_t>(pr.kv_heads) * D);
#pragma unroll
      for (int i = 0; i < 64; ++i) {
        dk[i] = 0.f;
        dv[i] = 0.f;
      }
      // Slots for the next tile: K/V where it was prefetched, Q/dO as chosen above, the rest free.
      const int old_kv = kv_slot, old_q = q_slot;
      kv_slot = free_slot;
      q_slot = rows_slot;
      free_slot = rows_slot == old_q ? old_kv : old_q;
    } else {
      const int old_q = q_slot;
      q_slot = free_slot;
      free_slot = old_q;
    }
    cur = plan.next;
  }
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_BACKWARD_HOPPER_DKDV_CHAIN_CUH_
