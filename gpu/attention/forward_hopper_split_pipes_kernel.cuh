// Persistent Hopper forward for short query tiles, "pipes" (split mode 3; tools/bench/NOTES.md,
// "Forward v9"): the split kernel's launches (every tile <= 64 query rows, a pointwise act: PMA's
// 32 seeds under broadcast_q), but the two consumer warpgroups run two independent pipelines
// instead of sharing every K/V stage.
//
// forward_hopper_split_kernel.cuh (mode 2) puts both consumers on every 128-key stage (64 keys
// each) and adds their accumulators at each item's end, so a stage is freed only when both are
// done with it, and one consumer's item boundary (the exchange, the epilogue) stops the other's
// stream as well; PMA (~35 items of ~4 steps per CTA) then kept ~80% of DRAM's rate. Here each
// consumer owns whole items (the CTA's items alternate between them) and has its own producer warp,
// ring of three 64-key K/V stages (32 KB each: what mode 2 gave it of a 64 KB stage), Q buffer and
// item ring, as two programs of Meta's Triton kernel would share an SM: while one consumer stores
// an item or waits for its next one, the other's loads keep streaming, and no accumulator is
// exchanged (each consumer's S GEMM is m64n64 against its stage's 64 keys and P V adds them, as in
// mode 2, so the MMA and elementwise work per pair is mode 2's).
//
// Per pipeline c (0, 1): producer warp c of the producer warpgroup (warps 2 and 3 only give back
// their registers), consumer warpgroup c. Items of pipeline c: first_item + (2k + c) * gridDim.x.
// Shared memory (v5's 225 KB): Q[c] (64 rows, 16 KB) at c * 16 KB, then stage s of pipeline c at
// 32 KB + (3c + s) * 32 KB: K (64 rows, two 64-column boxes of 8 KB) and V (the same). TMA loads
// full 64-key steps (maps.k64 / maps.v64: 64-row boxes); a sequence's partial last step and Q go
// through the producer warp's zero-filling cp.async. The item ring hands each item's tile and
// sequence from the producer warp to its consumer (as the split kernel's kItemRing).
#ifndef GEMTB_GPU_ATTENTION_FORWARD_HOPPER_SPLIT_PIPES_KERNEL_CUH_
#define GEMTB_GPU_ATTENTION_FORWARD_HOPPER_SPLIT_PIPES_KERNEL_CUH_

#include "gpu/attention/forward_hopper_split_kernel.cuh"

namespace gemtb::gpu {

inline constexpr int kPipesBlockN = 64;  // keys per K/V stage
inline constexpr int kPipesStages = 3;   // stages per pipeline
// Registers after setmaxnreg: a producer warp holds its next item's tile and sequence and the
// cp.async addressing (40, the split kernel's, spilled ~50 values per item), the consumers less
// than the split kernel's (no accumulator exchange). 128 x 56 + 256 x 224 <= 65536.
inline constexpr int kPipesProducerRegs = 56;
inline constexpr int kPipesConsumerRegs = 224;

// Rows [0, valid_rows) of a [tile_rows, 128] tile into the swizzled tile at `dst` by the 32 lanes of
// one warp (WsLoadRows with a warp's stride), zero-filling the rest.
__device__ __forceinline__ void PipesLoadRows(int lane, uint32_t dst, int tile_rows, const uint16_t* src,
                                              int64_t src_stride, int valid_rows, const uint16_t* any_valid) {
  constexpr int kChunks = kHopperHeadDim / 8;  // 16-byte chunks per row
#pragma unroll 2
  for (int idx = lane; idx < tile_rows * kChunks; idx += 32) {
    const int r = idx / kChunks;
    const int c = idx % kChunks;
    const bool ok = r < valid_rows;
    wgmma::CpAsync16(dst + wgmma::SwizzledOffset(tile_rows, r, c * 8), ok ? src + r * src_stride + c * 8 : any_valid,
                     ok ? 16u : 0u);
  }
}

template <ElementType E, HopperAct kAct>
__global__ void __launch_bounds__(kHopperWsThreads, 1)
    ForwardHopperSplitPipesKernel(const __grid_constant__ ForwardParams p, const __grid_constant__ ForwardTmaMaps maps,
                                  const int total_items) {
  static_assert(kAct != HopperAct::kSoftmax, "pointwise acts only");
  constexpr int D = kHopperHeadDim;
  constexpr int BN = kPipesBlockN;
  constexpr int QM = kSplitRows;
  constexpr int kStages = kPipesStages;
  constexpr uint32_t kQBytes = QM * D * 2;      // 16 KB
  constexpr uint32_t kTileBytes = BN * D * 2;   // 16 KB: K or V of one stage
  constexpr uint32_t kBoxBytes = BN * 128;      // one 64-column box of a K or V tile
  static_assert(1024 + 2 * kQBytes + 2 * kStages * 2 * kTileBytes <= HopperForwardSmem<kHopperWsBlockN>::kBytes,
                "fits v5's shared memory, which the persistent launcher sets");
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  // Per pipeline: Q full, Q empty, stage full[3], stage empty[3], item[4].
  constexpr int kBars = 2 + 2 * kStages + kSplitItemSlots;
  __shared__ __align__(8) uint64_t bars[2][kBars];
  __shared__ __align__(16) SplitItem s_items[2][kSplitItemSlots];
  const uint32_t raw = wgmma::SmemAddress(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;

  const ProblemParams& pr = p.problem;
  const int tid = static_cast<int>(threadIdx.x);
  const int role = tid / 128;  // 0: producer warps; 1, 2: consumers of pipelines 0, 1
  const int64_t q_stride = static_cast<int64_t>(pr.heads) * D;
  const int64_t kv_stride = static_cast<int64_t>(pr.kv_heads) * D;
  // This pipeline's items: first_item + k * item_stride, k = 0, 1, ...
  const int pipe = role == 0 ? tid / 32 : role - 1;
  const int first_item = static_cast<int>(blockIdx.x + pipe * gridDim.x);
  const int item_stride = static_cast<int>(2 * gridDim.x);

  const uint32_t sq = base + static_cast<uint32_t>(pipe) * kQBytes;
  const auto sk = [&](int stage) {
    return base + 2 * kQBytes + static_cast<uint32_t>(pipe * kStages + stage) * 2u * kTileBytes;
  };
  const auto sv = [&](int stage) { return sk(stage) + kTileBytes; };
  const uint32_t bar0 = wgmma::SmemAddress(&bars[pipe % 2][0]);
  const uint32_t bar_q = bar0;
  const uint32_t bar_q_empty = bar0 + 8u;
  const auto bar_full = [&](int stage) { return bar0 + 8u * static_cast<uint32_t>(2 + stage); };
  const auto bar_empty = [&](int stage) { return bar0 + 8u * static_cast<uint32_t>(2 + kStages + stage); };
  const auto bar_item = [&](int n) {
    return bar0 + 8u * static_cast<uint32_t>(2 + 2 * kStages + n % kSplitItemSlots);
  };
  SplitItem* const items = s_items[pipe % 2];

  if (tid == 0) {
    for (int c = 0; c < 2; ++c) {
      const uint32_t b = wgmma::SmemAddress(&bars[c][0]);
      mbar::Init(b, 32);       // Q full: the producer warp's lanes (cp.async)
      mbar::Init(b + 8u, 4);   // Q empty: lane 0 of each consumer warp, after its last S GEMM on this Q
      for (int s = 0; s < kStages; ++s) {
        mbar::Init(b + 8u * (2 + s), 32);           // full: lane 0 with the TMA bytes and 31 plain arrivals,
                                                    // or 32 cp.async arrivals
        mbar::Init(b + 8u * (2 + kStages + s), 4);  // empty: lane 0 of each consumer warp after its P V
      }
      for (int n = 0; n < kSplitItemSlots; ++n) mbar::Init(b + 8u * (2 + 2 * kStages + n), 1);  // producer lane 0
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    tma::Prefetch(&maps.k64);
    tma::Prefetch(&maps.v64);
  }
  __syncthreads();  // the only CTA-wide barrier

  if (role == 0) {
    // ---- producer warps 0 and 1, one per pipeline ----
    mbar::RegDealloc<kPipesProducerRegs>();
    if (pipe >= 2) return;  // warps 2 and 3 have no pipeline
    const int lane = tid % 32;
    int kv_iter = 0;  // K/V steps loaded so far (stage = kv_iter % kStages)
    int q_loads = 0;
    SplitQKey loaded{-1, -1, -1};
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
      if (lane == 0) {
        items[n % kSplitItemSlots] = MakeSplitItem(tile, seq);
        mbar::Arrive(bar_item(n));  // release: the consumer's wait sees the slot
      }
      const int steps = (tile.k_hi - tile.k_lo + BN - 1) / BN;
      const SplitQKey qk{seq.q_begin + tile.i0, h, min(QM, seq.lq - tile.i0)};
      if (!(qk == loaded)) {
        if (q_loads > 0) mbar::Wait(bar_q_empty, static_cast<uint32_t>((q_loads - 1) & 1));
        PipesLoadRows(lane, sq, QM, pr.q + qk.first_row * q_stride + h * D, q_stride, qk.rows, pr.q);
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
          if (lane == 0) {
            const int y = static_cast<int>(seq.kv_begin + j0);
            tma::ArriveExpectTx(bar_full(stage), 2u * kTileBytes);
            tma::Load2d(sk(stage), &maps.k64, hk * D, y, bar_full(stage));
            tma::Load2d(sk(stage) + kBoxBytes, &maps.k64, hk * D + kTmaBoxCols, y, bar_full(stage));
            tma::Load2d(sv(stage), &maps.v64, hk * D, y, bar_full(stage));
            tma::Load2d(sv(stage) + kBoxBytes, &maps.v64, hk * D + kTmaBoxCols, y, bar_full(stage));
          } else {
            mbar::Arrive(bar_full(stage));
          }
        } else {
          const int64_t offset = (seq.kv_begin + j0) * kv_stride + hk * D;
          PipesLoadRows(lane, sk(stage), BN, pr.k + offset, kv_stride, rows, pr.k);
          PipesLoadRows(lane, sv(stage), BN, pr.v + offset, kv_stride, rows, pr.v);
          mbar::CpAsyncArrive(bar_full(stage));
        }
        // The next item's sequence, once its tile has had a step's time to arrive.
        if (step == 0 && has_next) seq_next = pr.seqs[tile_next.b];
      }
    }
    wgmma::CpAsyncWait<0>();  // leave nothing in flight behind an exiting thread
    return;
  }

  // ---- consumer of pipeline `pipe` ----
  mbar::RegAlloc<kPipesConsumerRegs>();
  const int warp = (tid / 32) % 4;
  const bool lane0 = (tid & 31) == 0;
  const LaneCoords ln = Lane();
  const TmaElementwiseConstants consts = MakeTmaElementwiseConstants<kAct>(pr);
  const int row[2] = {warp * 16 + ln.g, warp * 16 + ln.g + 8};
  Log2Softmax unused_online;  // StoreHopperRows' argument; pointwise acts keep no state
  float rescale_unused[2] = {1.f, 1.f};

  int kv_iter = 0;
  int q_loads = 0;
  SplitQKey loaded{-1, -1, -1};
  for (int item = first_item, n = 0; item < total_items; item += item_stride, ++n) {
    const bool last_item = item + item_stride >= total_items;
    const int h = item % pr.heads;
    mbar::Wait(bar_item(n), static_cast<uint32_t>((n / kSplitItemSlots) & 1));
    const SplitItem it = items[n % kSplitItemSlots];
    const int q_rows = min(QM, it.lq - it.i0);
    const int steps = (it.k_hi - it.k_lo + BN - 1) / BN;
    const int kv_first = kv_iter;
    const SplitQKey qk{it.q_row, h, q_rows};
    // Whether the next item reads other Q rows, asked at this item's last step (the producer has
    // issued every step of this item by then, and so handed over the next item).
    const auto next_new_q = [&] {
      if (last_item) return false;
      mbar::Wait(bar_item(n + 1), static_cast<uint32_t>(((n + 1) / kSplitItemSlots) & 1));
      const SplitItem& nx = items[(n + 1) % kSplitItemSlots];
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

    if (!(qk == loaded)) {
      mbar::Wait(bar_q, static_cast<uint32_t>(q_loads & 1));
      loaded = qk;
      ++q_loads;
    }
    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.f;
    for (int step = 0; step < steps; ++step) {
      const int it_step = kv_first + step;
      const int stage = it_step % kStages;
      mbar::Wait(bar_full(stage), static_cast<uint32_t>((it_step / kStages) & 1));
      wgmma::FenceProxyAsync();  // cp.async-filled stages, seen through the barrier, to the wgmma proxy
      float s[BN / 2];
      wgmma::Fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t a = sq + static_cast<uint32_t>((kk >> 2) * QM * 128 + (kk & 3) * 32);
        const uint32_t b = sk(stage) + static_cast<uint32_t>((kk >> 2) * kBoxBytes + (kk & 3) * 32);
        wgmma::MmaSS64<E>(s, wgmma::SwizzledDescriptor(a, 16, 1024), wgmma::SwizzledDescriptor(b, 16, 1024),
                          kk > 0 ? 1u : 0u);
      }
      wgmma::Commit();
      wgmma::Wait<0>();
      wgmma::FenceRegisters(s);
      if (step + 1 == steps && next_new_q()) {  // the item's last read of this Q
        __syncwarp();
        if (lane0) mbar::Arrive(bar_q_empty);
      }
      const int j0 = it.k_lo + step * BN;
      const bool masked = !(j0 >= full_lo && j0 + BN <= full_hi);
      ScoresToPTma<kAct, BN>(*reinterpret_cast<float(*)[BN / 8][4]>(&s), j0, masked, ln.t, keys, consts, pr,
                             unused_online, rescale_unused);
      uint32_t pa[BN / 16][4];
      PToOperand<E, BN>(*reinterpret_cast<float(*)[BN / 8][4]>(&s), pa);
      wgmma::Fence();
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        const uint32_t b = sv(stage) + static_cast<uint32_t>(kk * 16 * 128);
        wgmma::MmaRS<E>(acc, pa[kk], wgmma::SwizzledDescriptor(b, kBoxBytes, 1024), 1u);
      }
      wgmma::Commit();
      wgmma::Wait<0>();
      wgmma::FenceRegisters(acc);
      __syncwarp();
      if (lane0) mbar::Arrive(bar_empty(stage));
    }
    kv_iter += steps;
    StoreHopperRows<E, kAct>(acc, unused_online, row, q_rows, it.out_row, p, h, ln.t);
  }
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_FORWARD_HOPPER_SPLIT_PIPES_KERNEL_CUH_
