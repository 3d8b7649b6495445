// Persistent warp-specialised Hopper forward with TMA loads (sm_90a, head dim 128), the default
// forward at head dim 128 (kernel_policy.h): the same function, tiles and masks as
// forward_hopper_ws_kernel.cuh, with these differences (tools/bench/NOTES.md has the measurements):
//
//   TMA loads. The cp.async kernel's producer warpgroup issues 6144 16-byte cp.async per 128-key
//   step with per-chunk address and swizzle arithmetic, on the same schedulers as the consumers.
//   Here one producer thread loads every full Q tile and every full K/V step
//   with four 2-D tensor copies (64 columns x 128 rows each, 128-byte swizzle: the layout wgmma
//   reads) completing on the stage's mbarrier by transaction count. A step or Q tile that ends
//   before 128 rows (a sequence's last step) still goes through the cp.async path, zero-filling
//   the rows past it: a TMA box there would read the next sequence's rows, and
//   a non-finite value there would turn P = 0 into NaN in O += P V.
//
//   Persistent CTAs. One CTA per SM loops over the host's (tile, head) list, heaviest first, CTA
//   b taking items b, b + grid, ...; the producer loads the next tile's Q as soon as both
//   consumers have issued their last S GEMM of the current tile (a "Q empty" mbarrier) and keeps
//   the three-stage K/V ring running across tiles, so a tile's pipeline fill overlaps the previous
//   tile's last steps and epilogue (self_softmax averages ~5 steps per tile, cross ~2).
//
//   The ping-pong between the two consumer warpgroups (named barriers passing the MMA turn) runs on
//   across tiles: each consumer takes steps + 1 turns per tile, so the alternation never breaks.
//   Mask bounds: the "every row sees the whole step" test is per warp (shuffles), not per CTA.
//
//   Items through a ring. The producer loads each item's tile and sequence one item ahead and hands
//   them to the consumers through shared memory (ForwardItem), and loads an item's first K/V step
//   before its Q (that stage was freed by an earlier item, while Q waits for the previous tile).
//
//   Elementwise phase (forward_tma_elementwise.cuh): fewer instructions per element than
//   ScoresToP, O's rescale skipped when no row max moved and done before the MMA turn, P finished
//   before the wait for P V; softmax's epilogue multiplies by post / row_sum.
#ifndef GEMTB_GPU_ATTENTION_FORWARD_HOPPER_TMA_KERNEL_CUH_
#define GEMTB_GPU_ATTENTION_FORWARD_HOPPER_TMA_KERNEL_CUH_

#include <cuda.h>

#include "gpu/attention/forward_hopper_ws_kernel.cuh"
#include "gpu/attention/forward_tma_elementwise.cuh"
#include "gpu/common/tma.cuh"

namespace gemtb::gpu {

// The three tensor maps of one launch: Q [TQ, H*D], K and V [TK, Hkv*D], boxes of 64 columns x
// 128 rows, 128-byte swizzle.
struct ForwardTmaMaps {
  CUtensorMap q, k, v;
};
inline constexpr int kTmaBoxCols = 64;
inline constexpr int kTmaBoxRows = 128;

// An item's tile and sequence, as a persistent forward's producer hands them to its consumers
// through a shared-memory ring of kForwardItemSlots slots (one mbarrier each), loaded one item ahead
// (the next tile at an item's start, its sequence after the item's first step): the consumers then
// wait on a slot, never on the two dependent global loads (tile, then sequence) that otherwise sit
// in their critical path at every item's start. Slot n % kForwardItemSlots is rewritten for item
// n + kForwardItemSlots only after the producer waited for a K/V stage released after item n's
// first step (each item has at least one step, and three stages), i.e. after every consumer warp
// read item n.
struct ForwardItem {
  int64_t q_row;    // first Q row: seq.q_begin + tile.i0
  int64_t out_row;  // first output row: seq.out_begin + tile.i0
  int32_t i0, k_lo, k_hi, lq, lk;
};
__device__ __forceinline__ ForwardItem MakeForwardItem(const ForwardTile& t, const SeqInfo& s) {
  return {s.q_begin + t.i0, s.out_begin + t.i0, t.i0, t.k_lo, t.k_hi, s.lq, s.lk};
}
inline constexpr int kForwardItemSlots = 4;

template <ElementType E, HopperAct kAct>
__global__ void __launch_bounds__(kHopperWsThreads, 1)
    ForwardHopperTmaKernel(const __grid_constant__ ForwardParams p, const __grid_constant__ ForwardTmaMaps maps,
                           const int total_items) {
  constexpr int D = kHopperHeadDim;
  constexpr int BM = kHopperBlockM;
  constexpr int BN = kHopperWsBlockN;
  static_assert(BN == kTmaBoxRows && BM == kTmaBoxRows && D == 2 * kTmaBoxCols, "one box = 128 rows x 64 columns");
  using Smem = HopperForwardSmem<BN>;
  constexpr int kStages = Smem::kStages;
  constexpr int kSRegs = BN / 2;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  // Q full, Q empty, stage full[], stage empty[], item[]
  __shared__ __align__(8) uint64_t bars[2 + 2 * kStages + kForwardItemSlots];
  __shared__ __align__(16) ForwardItem s_items[kForwardItemSlots];
  const uint32_t raw = wgmma::SmemAddress(smem_raw);
  const uint32_t sq = (raw + 1023u) & ~1023u;
  const auto sk = [&](int stage) { return sq + Smem::kQBytes + static_cast<uint32_t>(stage) * 2u * Smem::kKvBytes; };
  const auto sv = [&](int stage) { return sk(stage) + Smem::kKvBytes; };
  const uint32_t bar_q = wgmma::SmemAddress(&bars[0]);
  const uint32_t bar_q_empty = bar_q + 8u;
  const auto bar_full = [&](int stage) { return bar_q + 8u * static_cast<uint32_t>(2 + stage); };
  const auto bar_empty = [&](int stage) { return bar_q + 8u * static_cast<uint32_t>(2 + kStages + stage); };
  const auto bar_item = [&](int n) {
    return bar_q + 8u * static_cast<uint32_t>(2 + 2 * kStages + n % kForwardItemSlots);
  };

  const ProblemParams& pr = p.problem;
  const int tid = static_cast<int>(threadIdx.x);
  const int role = tid / 128;  // 0: producer; 1, 2: consumers
  const int64_t q_stride = static_cast<int64_t>(pr.heads) * D;
  const int64_t kv_stride = static_cast<int64_t>(pr.kv_heads) * D;
  const int first_item = static_cast<int>(blockIdx.x);
  const int item_stride = static_cast<int>(gridDim.x);

  if (tid == 0) {
    mbar::Init(bar_q, 128);       // every producer thread (one of them with the TMA bytes)
    mbar::Init(bar_q_empty, 8);   // lane 0 of each consumer warp, after its last S GEMM of a tile
    for (int s = 0; s < kStages; ++s) {
      mbar::Init(bar_full(s), 128);
      mbar::Init(bar_empty(s), 8);
    }
    for (int n = 0; n < kForwardItemSlots; ++n) mbar::Init(bar_item(n), 1);  // producer thread 0
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    tma::Prefetch(&maps.q);
    tma::Prefetch(&maps.k);
    tma::Prefetch(&maps.v);
  }
  __syncthreads();  // the only CTA-wide barrier

  if (role == 0) {
    // ---- producer ----
    mbar::RegDealloc<kHopperWsProducerRegs>();
    const int pt = tid;
    int kv_iter = 0;  // K/V steps loaded so far by this CTA (stage = kv_iter % kStages)
    int q_iter = 0;   // tiles started (= items)
    ForwardTile tile_next{};  // the next item's tile and sequence, loaded during this one
    SeqInfo seq_next{};
    if (first_item < total_items) {
      tile_next = p.tiles[first_item / pr.heads];
      seq_next = pr.seqs[tile_next.b];
    }
    for (int item = first_item; item < total_items; item += item_stride) {
      const int h = item % pr.heads;
      const int hk = h / (pr.heads / pr.kv_heads);
      const bool has_next = item + item_stride < total_items;
      const ForwardTile tile = tile_next;
      const SeqInfo seq = seq_next;
      if (has_next) tile_next = p.tiles[(item + item_stride) / pr.heads];
      if (pt == 0) {
        s_items[q_iter % kForwardItemSlots] = MakeForwardItem(tile, seq);
        mbar::Arrive(bar_item(q_iter));  // release: the consumers' wait sees the slot
      }
      const int q_rows = min(BM, seq.lq - tile.i0);
      const int steps = KeySteps(tile.k_lo, tile.k_hi, BN);
      const auto load_step = [&](int step) {
        const int kv = kv_iter + step;
        const int stage = kv % kStages;
        if (kv >= kStages) mbar::Wait(bar_empty(stage), static_cast<uint32_t>((kv / kStages - 1) & 1));
        const int j0 = tile.k_lo + step * BN;
        const int rows = min(BN, tile.k_hi - j0);
        if (rows == BN) {
          if (pt == 0) {
            const int y = static_cast<int>(seq.kv_begin + j0);
            tma::ArriveExpectTx(bar_full(stage), 2u * Smem::kKvBytes);
            tma::Load2d(sk(stage), &maps.k, hk * D, y, bar_full(stage));
            tma::Load2d(sk(stage) + BN * 128, &maps.k, hk * D + kTmaBoxCols, y, bar_full(stage));
            tma::Load2d(sv(stage), &maps.v, hk * D, y, bar_full(stage));
            tma::Load2d(sv(stage) + BN * 128, &maps.v, hk * D + kTmaBoxCols, y, bar_full(stage));
          } else {
            mbar::Arrive(bar_full(stage));
          }
        } else {
          const int64_t offset = (seq.kv_begin + j0) * kv_stride + hk * D;
          wgmma::WarpgroupLoadRows(pt, sk(stage), BN, pr.k + offset, kv_stride, rows, pr.k);
          wgmma::WarpgroupLoadRows(pt, sv(stage), BN, pr.v + offset, kv_stride, rows, pr.v);
          mbar::CpAsyncArrive(bar_full(stage));
        }
        // The next item's sequence, once its tile has had a step's time to arrive.
        if (step == 0 && has_next) seq_next = pr.seqs[tile_next.b];
      };
      // The item's first K/V step before its Q. That stage was freed by an earlier item's step, while
      // Q waits until both consumers issued the previous tile's last S GEMM; loaded after Q, the
      // first step would have only that tile's last elementwise phase, P V and epilogue to arrive
      // in, and the consumers would wait for it at every item's start (cross attention's two-step
      // tiles; tools/bench/NOTES.md).
      load_step(0);
      // Q of the previous tile must be done with (both consumers issued their last S GEMM).
      if (q_iter > 0) mbar::Wait(bar_q_empty, static_cast<uint32_t>((q_iter - 1) & 1));
      if (q_rows == BM) {
        if (pt == 0) {
          const int y = static_cast<int>(seq.q_begin + tile.i0);
          tma::ArriveExpectTx(bar_q, Smem::kQBytes);
          tma::Load2d(sq, &maps.q, h * D, y, bar_q);
          tma::Load2d(sq + BM * 128, &maps.q, h * D + kTmaBoxCols, y, bar_q);
        } else {
          mbar::Arrive(bar_q);
        }
      } else {
        wgmma::WarpgroupLoadRows(pt, sq, BM, pr.q + (seq.q_begin + tile.i0) * q_stride + h * D, q_stride, q_rows, pr.q);
        mbar::CpAsyncArrive(bar_q);
      }
      for (int step = 1; step < steps; ++step) load_step(step);
      kv_iter += steps;
      ++q_iter;
    }
    CopyAsyncWait<0>();  // leave nothing in flight behind an exiting thread
    return;
  }

  // ---- consumers ----
  mbar::RegAlloc<kHopperWsConsumerRegs>();
  const int cw = role - 1;  // consumer warpgroup 0 or 1: rows cw*64 .. cw*64+63
  const int warp = (tid / 32) % 4;
  const bool lane0 = (tid & 31) == 0;
  const LaneCoords ln = Lane();
  constexpr bool softmax = kAct == HopperAct::kSoftmax;
  const TmaElementwiseConstants consts = MakeTmaElementwiseConstants<kAct>(pr);
  const int row[2] = {cw * 64 + warp * 16 + ln.g, cw * 64 + warp * 16 + ln.g + 8};

  // The MMA turn: wait for mine, and after issuing hand it to the other consumer. Consumer 0 goes
  // first (its barrier pre-armed with the other side's 128 arrivals).
  const int my_turn = kWsTurnBarrier + cw;
  const int other_turn = kWsTurnBarrier + (1 - cw);
  if (cw == 0) mbar::NamedArrive(my_turn, 256);

  int kv_iter = 0;
  // The item is recomputed from q_iter (items started) at each start rather than carried: carried, it
  // is the value ptxas spills around the elementwise phase, and its reload at every item's start
  // waits behind the previous epilogue's stores (Nsight Compute, tools/bench/NOTES.md).
  for (int q_iter = 0;; ++q_iter) {
    const int item = first_item + q_iter * item_stride;
    if (item >= total_items) break;
    const bool last_item = item + item_stride >= total_items;
    const int h = item % pr.heads;
    mbar::Wait(bar_item(q_iter), static_cast<uint32_t>((q_iter / kForwardItemSlots) & 1));
    const ForwardItem it = s_items[q_iter % kForwardItemSlots];
    const int q_rows = min(BM, it.lq - it.i0);
    const int steps = KeySteps(it.k_lo, it.k_hi, BN);
    const int kv_first = kv_iter;

    RowKeyRange keys[2];
    int full_lo = INT_MIN, full_hi = INT_MAX;  // keys every valid row of this warp sees
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      keys[r] = RowKeys(pr.options, it.i0 + row[r], it.lq, it.lk);
      if (row[r] < q_rows) {
        full_lo = max(full_lo, keys[r].begin);
        full_hi = min(full_hi, keys[r].end);
      }
    }
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      full_lo = max(full_lo, __shfl_xor_sync(0xffffffffu, full_lo, off));
      full_hi = min(full_hi, __shfl_xor_sync(0xffffffffu, full_hi, off));
    }

    const auto issue_scores = [&](int step, float (&s)[kSRegs]) {
      const uint32_t k_tile = sk((kv_first + step) % kStages);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t a = sq + static_cast<uint32_t>((kk >> 2) * BM * 128 + cw * 64 * 128 + (kk & 3) * 32);
        const uint32_t b = k_tile + static_cast<uint32_t>((kk >> 2) * BN * 128 + (kk & 3) * 32);
        wgmma::MmaSS<E>(s, wgmma::SwizzledDescriptor(a, 16, 1024), wgmma::SwizzledDescriptor(b, 16, 1024),
                        kk > 0 ? 1u : 0u);
      }
    };
    const auto wait_full = [&](int step) {
      const int it = kv_first + step;
      mbar::Wait(bar_full(it % kStages), static_cast<uint32_t>((it / kStages) & 1));
      wgmma::FenceProxyAsync();  // cp.async-filled stages, seen through the barrier, to the wgmma proxy
    };
    const auto release_q = [&] {
      __syncwarp();
      if (lane0) mbar::Arrive(bar_q_empty);
    };

    Log2Softmax online;
    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.f;
    uint32_t pa[BN / 16][4];
    float rescale[2] = {1.f, 1.f};
    const auto scores_to_p = [&](int step, float (&s)[kSRegs]) {
      const int j0 = it.k_lo + step * BN;
      const bool masked = !(j0 >= full_lo && j0 + BN <= full_hi);
      ScoresToPTma<kAct, BN>(*reinterpret_cast<float(*)[BN / 8][4]>(&s), j0, masked, ln.t, keys, consts, pr,
                             online, rescale);
      // Keep the elementwise work ahead of the wait for P V: without this the compiler sinks it
      // below wgmma.wait_group 0, so P V and this warpgroup's P would not overlap.
      wgmma::FenceRegisters(s);
      if constexpr (softmax) {
        wgmma::FenceRegisters(rescale);
        wgmma::FenceRegisters(online.l);
      }
    };
    const auto p_to_operand = [&](float (&s)[kSRegs]) {
      PToOperand<E, BN>(*reinterpret_cast<float(*)[BN / 8][4]>(&s), pa);
    };

    mbar::Wait(bar_q, static_cast<uint32_t>(q_iter & 1));
    wait_full(0);
    {
      float s0[kSRegs];
      mbar::NamedSync(my_turn, 256);
      wgmma::Fence();
      issue_scores(0, s0);
      wgmma::Commit();
      mbar::NamedArrive(other_turn, 256);
      wgmma::Wait<0>();
      wgmma::FenceRegisters(s0);
      if (steps == 1) release_q();
      scores_to_p(0, s0);
      p_to_operand(s0);
    }

    // Step s: wait for K/V(s+1); in my turn issue S(s+1) and O += P(s) V(s); P(s+1) from S(s+1)
    // while PV(s) runs (and the other consumer's MMAs follow on the tensor cores); release stage s.
    const auto run_step = [&](int step, auto has_next) {
      float sb[kSRegs];
      // O's rescale for P(s) before waiting for the turn (no wgmma is in flight here), and only in
      // threads whose row max moved (a factor of 1 changes nothing).
      if constexpr (softmax) {
        if (rescale[0] != 1.f || rescale[1] != 1.f) RescaleHopperRows(acc, rescale);
      }
      if constexpr (has_next) wait_full(step + 1);
      mbar::NamedSync(my_turn, 256);
      if constexpr (has_next) {
        wgmma::Fence();
        issue_scores(step + 1, sb);
        wgmma::Commit();
      }
      wgmma::Fence();
      const uint32_t v_tile = sv((kv_first + step) % kStages);
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        const uint32_t b = v_tile + static_cast<uint32_t>(kk * 16 * 128);
        wgmma::MmaRS<E>(acc, pa[kk], wgmma::SwizzledDescriptor(b, BN * 128, 1024), 1u);
      }
      wgmma::Commit();
      // Consumer 1's very last hand-over has no taker (consumer 0 issues nothing more): skipping
      // it keeps every named-barrier use complete.
      if (has_next || cw == 0 || !last_item) mbar::NamedArrive(other_turn, 256);
      if constexpr (has_next) {
        wgmma::Wait<1>();
        wgmma::FenceRegisters(sb);
        if (step + 2 == steps) release_q();  // S(steps - 1), the tile's last read of Q, is done
        scores_to_p(step + 1, sb);
      }
      wgmma::Wait<0>();
      wgmma::FenceRegisters(acc);
      __syncwarp();
      if (lane0) mbar::Arrive(bar_empty((kv_first + step) % kStages));  // this warp is done with the stage
      if constexpr (has_next) p_to_operand(sb);
    };
    for (int step = 0; step + 1 < steps; ++step) run_step(step, std::true_type{});
    run_step(steps - 1, std::false_type{});
    kv_iter += steps;

    // Softmax's normalisation as one multiply per output by post / row_sum (StoreHopperRows).
    StoreHopperRows<E, kAct, softmax>(acc, online, row, q_rows, it.out_row, p, h, ln.t);
  }
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_FORWARD_HOPPER_TMA_KERNEL_CUH_
