// Persistent Hopper forward for short query tiles ("split"; kernel_policy.h runs it when every tile
// of the launch has at most kSplitRows query rows and the act is pointwise, so no online softmax
// state needs merging; tiles of at most kSmallRows rows take forward_hopper_small_kernel.cuh).
//
// The TMA forward (forward_hopper_tma_kernel.cuh) gives each consumer warpgroup 64 rows of a
// 128-row tile: with 32 valid rows, consumer 1 computes nothing but padding and consumer 0 half
// padding. Here both consumers run wgmma m64 on the same rows 0..63 and split the keys of every step
// between them, consumer c on the step's keys c*64 .. c*64+63 (S on m64n64 against those K rows, O
// += P V on the same V rows), each into its own fp32 accumulator; at the end consumer 0 adds
// consumer 1's accumulator (through shared memory, in two column halves, each hand-off a bar.sync of
// both consumers) in a fixed order before the usual epilogue, so the same bytes run to run. Both
// finish a stage at about the same time, so one stage is held and two are in flight. No MMA turn
// between the consumers.
//
// Pipeline: the producer and the three-stage K/V ring as in the TMA forward (TMA for full steps,
// zero-filled cp.async for a sequence's last partial step).
//
// Q: only 64 rows (16 KB; the other 16 KB of the TMA forward's Q region carry the accumulator
// exchange), loaded only when it changes: under broadcast_q a CTA's items (b, head) all read the
// same Q rows of its head (the grid stride is a multiple of the head count), so Q is loaded once
// per CTA and there is no per-tile wait for it.
//
// Item ring: the producer alone loads each item's tile and sequence (ForwardItem), one item ahead
// (the next tile at an item's start, its sequence after the item's first step), and hands each item
// to the consumers through a 4-slot shared-memory ring with one mbarrier per slot: the consumers
// wait on the slot, never on global memory. A slot is rewritten for item n + 4 only after the
// producer waited for a stage the consumers released past item n's first step, i.e. after they read
// item n.
#ifndef GEMTB_GPU_ATTENTION_FORWARD_HOPPER_SPLIT_KERNEL_CUH_
#define GEMTB_GPU_ATTENTION_FORWARD_HOPPER_SPLIT_KERNEL_CUH_

#include "gpu/attention/forward_hopper_tma_kernel.cuh"
#include "gpu/attention/kernel_policy.h"

namespace gemtb::gpu {

// The named barrier of the accumulator exchange, a bar.sync of both consumer warpgroups (1..3 are
// the other Hopper forwards' turn and join barriers).
inline constexpr int kSplitExchangeBarrier = 4;

// The Q rows an item reads: (first Q row, head, rows). Two items with the same key share Q.
struct SplitQKey {
  int64_t first_row;
  int h, rows;
  __device__ __forceinline__ bool operator==(const SplitQKey& o) const {
    return first_row == o.first_row && h == o.h && rows == o.rows;
  }
};

template <ElementType E, HopperAct kAct>
__global__ void __launch_bounds__(kHopperWsThreads, 1)
    ForwardHopperSplitKernel(const __grid_constant__ ForwardParams p, const __grid_constant__ ForwardTmaMaps maps,
                             const int total_items) {
  static_assert(kAct != HopperAct::kSoftmax, "pointwise acts only: no (m, l) state to merge");
  constexpr int D = kHopperHeadDim;
  constexpr int BN = kHopperWsBlockN;
  constexpr int QM = kSplitRows;
  static_assert(BN == kTmaBoxRows && D == 2 * kTmaBoxCols, "one box = 128 rows x 64 columns");
  using Smem = HopperForwardSmem<BN>;
  static_assert(Smem::kQBytes == 2 * QM * D * 2, "Q (64 rows) and the exchange (16 KB) share the TMA forward's Q region");
  constexpr int kStages = Smem::kStages;
  constexpr int kSRegs = BN / 2;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t bars[2 + 2 * kStages + kForwardItemSlots];  // Q full, Q empty, stage full[],
                                                                            // stage empty[], item[]
  __shared__ __align__(16) ForwardItem s_items[kForwardItemSlots];
  const uint32_t raw = wgmma::SmemAddress(smem_raw);
  const uint32_t sq = (raw + 1023u) & ~1023u;
  const uint32_t sx = sq + static_cast<uint32_t>(QM * D * 2);  // exchange: 8 x 128 threads x 16 bytes
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
    mbar::Init(bar_q, 128);      // every producer thread (cp.async)
    mbar::Init(bar_q_empty, 8);  // lane 0 of each consumer warp, after its last S GEMM on this Q
    for (int s = 0; s < kStages; ++s) {
      mbar::Init(bar_full(s), 128);
      mbar::Init(bar_empty(s), 8);  // the owner after its P V, the other consumer after its wait
    }
    for (int n = 0; n < kForwardItemSlots; ++n) mbar::Init(bar_item(n), 1);  // producer thread 0
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    tma::Prefetch(&maps.k);
    tma::Prefetch(&maps.v);
  }
  __syncthreads();  // the only CTA-wide barrier

  if (role == 0) {
    // ---- producer ----
    mbar::RegDealloc<kHopperWsProducerRegs>();
    const int pt = tid;
    int kv_iter = 0;  // K/V steps loaded so far (stage = kv_iter % kStages)
    int q_loads = 0;
    SplitQKey loaded{-1, -1, -1};
    // The next item's tile and sequence, loaded during this one.
    ForwardTile tile_next{};
    SeqInfo seq_next{};
    if (first_item < total_items) {
      tile_next = p.tiles[first_item / pr.heads];
      seq_next = pr.seqs[tile_next.b];
    }
    for (int item = first_item, n = 0; item < total_items; item += item_stride, ++n) {
      const int h = item % pr.heads;
      const int hk = h / (pr.heads / pr.kv_heads);
      const bool has_next = item + item_stride < total_items;
      const ForwardTile tile = tile_next;
      const SeqInfo seq = seq_next;
      if (has_next) tile_next = p.tiles[(item + item_stride) / pr.heads];
      if (pt == 0) {
        s_items[n % kForwardItemSlots] = MakeForwardItem(tile, seq);
        mbar::Arrive(bar_item(n));  // release: the consumers' wait sees the slot
      }
      const int steps = KeySteps(tile.k_lo, tile.k_hi, BN);
      const SplitQKey qk{seq.q_begin + tile.i0, h, min(QM, seq.lq - tile.i0)};
      if (!(qk == loaded)) {
        // The consumers arrive on "Q empty" after their last S GEMM on the old Q when the next
        // item reads another one.
        if (q_loads > 0) mbar::Wait(bar_q_empty, static_cast<uint32_t>((q_loads - 1) & 1));
        wgmma::WarpgroupLoadRows(pt, sq, QM, pr.q + qk.first_row * q_stride + h * D, q_stride, qk.rows, pr.q);
        mbar::CpAsyncArrive(bar_q);
        loaded = qk;
        ++q_loads;
      }
      for (int step = 0; step < steps; ++step, ++kv_iter) {
        const int stage = kv_iter % kStages;
        if (kv_iter >= kStages) mbar::Wait(bar_empty(stage), static_cast<uint32_t>((kv_iter / kStages - 1) & 1));
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
      }
    }
    CopyAsyncWait<0>();  // leave nothing in flight behind an exiting thread
    return;
  }

  // ---- consumers ----
  mbar::RegAlloc<kHopperWsConsumerRegs>();
  const int cw = role - 1;  // consumer 0 or 1, rows 0..63, keys cw*64 .. cw*64+63 of every step
  const int warp = (tid / 32) % 4;
  const int x = tid % 128;
  const bool lane0 = (tid & 31) == 0;
  const LaneCoords ln = Lane();
  const TmaElementwiseConstants consts = MakeTmaElementwiseConstants<kAct>(pr);
  const int row[2] = {warp * 16 + ln.g, warp * 16 + ln.g + 8};

  int kv_iter = 0;
  int q_loads = 0;
  SplitQKey loaded{-1, -1, -1};
  for (int item = first_item, n = 0; item < total_items; item += item_stride, ++n) {
    const bool last_item = item + item_stride >= total_items;
    const int h = item % pr.heads;
    mbar::Wait(bar_item(n), static_cast<uint32_t>((n / kForwardItemSlots) & 1));
    const ForwardItem it = s_items[n % kForwardItemSlots];
    const int q_rows = min(QM, it.lq - it.i0);
    const int steps = KeySteps(it.k_lo, it.k_hi, BN);
    const int kv_first = kv_iter;
    const SplitQKey qk{it.q_row, h, q_rows};
    const bool new_q = !(qk == loaded);
    // Whether the next item reads other Q rows (then this item's last S GEMM releases Q). Asked
    // only at this item's last step, when the producer has issued every step of this item and so
    // handed over the next one (asked earlier, the wait could block the stage releases the producer
    // needs to get there).
    const auto next_new_q = [&] {
      if (last_item) return false;
      mbar::Wait(bar_item(n + 1), static_cast<uint32_t>(((n + 1) / kForwardItemSlots) & 1));
      const ForwardItem& nx = s_items[(n + 1) % kForwardItemSlots];
      return !(SplitQKey{nx.q_row, (item + item_stride) % pr.heads, min(QM, nx.lq - nx.i0)} == qk);
    };

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

    const auto wait_full = [&](int step) {
      const int it = kv_first + step;
      mbar::Wait(bar_full(it % kStages), static_cast<uint32_t>((it / kStages) & 1));
    };
    const auto release_stage = [&](int step) {
      __syncwarp();
      if (lane0) mbar::Arrive(bar_empty((kv_first + step) % kStages));
    };
    const auto release_q = [&] {
      __syncwarp();
      if (lane0) mbar::Arrive(bar_q_empty);
    };

    if (new_q) {
      mbar::Wait(bar_q, static_cast<uint32_t>(q_loads & 1));
      loaded = qk;
      ++q_loads;
    }
    Log2Softmax unused_online;  // StoreHopperRows' argument; pointwise acts keep no state
    float rescale_unused[2] = {1.f, 1.f};
    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.f;
    // Both consumers on every step, consumer c on its keys c*64 .. c*64+63: S on m64n64 against rows
    // c*64.. of the K stage, O += P V on V's same 64 rows.
    for (int step = 0; step < steps; ++step) {
      wait_full(step);
      wgmma::FenceProxyAsync();  // cp.async-filled stages, seen through the barrier, to the wgmma proxy
      const uint32_t stage = static_cast<uint32_t>((kv_first + step) % kStages);
      float s[kSRegs / 2];
      wgmma::Fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t a = sq + static_cast<uint32_t>((kk >> 2) * QM * 128 + (kk & 3) * 32);
        const uint32_t b = sk(static_cast<int>(stage)) +
                           static_cast<uint32_t>((kk >> 2) * BN * 128 + cw * 64 * 128 + (kk & 3) * 32);
        wgmma::MmaSS64<E>(s, wgmma::SwizzledDescriptor(a, 16, 1024), wgmma::SwizzledDescriptor(b, 16, 1024),
                          kk > 0 ? 1u : 0u);
      }
      wgmma::Commit();
      wgmma::Wait<0>();
      wgmma::FenceRegisters(s);
      if (step + 1 == steps && next_new_q()) release_q();  // the tile's last read of this Q
      const int j0 = it.k_lo + step * BN + cw * 64;
      const bool masked = !(j0 >= full_lo && j0 + 64 <= full_hi);
      ScoresToPTma<kAct, 64>(*reinterpret_cast<float(*)[8][4]>(&s), j0, masked, ln.t, keys, consts, pr,
                             unused_online, rescale_unused);
      uint32_t pa[4][4];
      PToOperand<E, 64>(*reinterpret_cast<float(*)[8][4]>(&s), pa);
      wgmma::Fence();
      const uint32_t v_tile = sv(static_cast<int>(stage)) + static_cast<uint32_t>(cw * 64 * 128);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const uint32_t b = v_tile + static_cast<uint32_t>(kk * 16 * 128);
        wgmma::MmaRS<E>(acc, pa[kk], wgmma::SwizzledDescriptor(b, BN * 128, 1024), 1u);
      }
      wgmma::Commit();
      wgmma::Wait<0>();
      wgmma::FenceRegisters(acc);
      release_stage(step);
    }
    kv_iter += steps;

    // O = consumer 0's sum + consumer 1's sum, one 64-column half at a time through sx (thread x's
    // eight float4 of a half at (k * 128 + x) * 16: each warp's stores are one contiguous 512-byte
    // run, no bank conflicts; both consumers hold the same rows and columns per thread). Each half
    // takes two uses of one named barrier, each a bar.sync of all 256 consumer threads: "written"
    // orders consumer 1's stores before consumer 0's loads of them, "read" orders consumer 0's loads
    // before consumer 1's next stores into the same bytes (the second half's, or the next item's
    // first half). Why both sides wait, where an arrive would do: consumer 0 could merely arrive
    // (bar.arrive) after its loads, PTX ordering an arriving thread's earlier accesses before the
    // accesses of the threads that wait on the barrier, but compute-sanitizer's racecheck does not
    // follow that one-sided hand-off and reports each load/store pair across it as a hazard; it
    // follows a barrier that both sides wait on. The price is consumer 1 waiting for consumer 0's
    // loads of the second half (16 KB of shared memory, ~0.1 us per item) before its next item,
    // while consumer 0 still issues its epilogue. Nothing between the two barriers waits on the
    // producer, so a pipeline stall cannot hold a barrier; every use completes, no arrival is left
    // pending when the CTA exits.
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      if (cw == 1) {
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const int i = 4 * (8 * half + k);
          const uint32_t addr = sx + static_cast<uint32_t>((k * 128 + x) * 16);
          asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "f"(acc[i]), "f"(acc[i + 1]),
                       "f"(acc[i + 2]), "f"(acc[i + 3])
                       : "memory");
        }
      }
      mbar::NamedSync(kSplitExchangeBarrier, 256);  // written
      if (cw == 0) {
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const int i = 4 * (8 * half + k);
          const uint32_t addr = sx + static_cast<uint32_t>((k * 128 + x) * 16);
          float o0, o1, o2, o3;
          asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                       : "=f"(o0), "=f"(o1), "=f"(o2), "=f"(o3)
                       : "r"(addr)
                       : "memory");
          acc[i] += o0;
          acc[i + 1] += o1;
          acc[i + 2] += o2;
          acc[i + 3] += o3;
        }
      }
      mbar::NamedSync(kSplitExchangeBarrier, 256);  // read
    }
    if (cw == 0) StoreHopperRows<E, kAct>(acc, unused_online, row, q_rows, it.out_row, p, h, ln.t);
  }
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_FORWARD_HOPPER_SPLIT_KERNEL_CUH_
