// Warp-specialised Hopper forward with cp.async loads (sm_90a, head dim 128; kernel_policy.h's
// kHopperWs): what the TMA forward falls back to when q, k or v is not 16-byte aligned, and
// `--forward-kernel hopper_ws`. One CTA per (tile, head) item, the loads and the two consumer
// warpgroups decoupled.
//
//   CTA = 3 warpgroups (384 threads): warpgroup 0 is the producer, warpgroups 1 and 2 each own 64
//   query rows of the 128-row tile. setmaxnreg moves registers from the producer (40 per thread)
//   to the consumers (232).
//   Producer: Q and then the K/V steps into three swizzled stages with cp.async (zero-filled past
//   the tile's rows); each of its 128 threads signals a
//   stage's "full" mbarrier once its copies have landed (cp.async.mbarrier.arrive.noinc), and it
//   refills a stage after both consumers have signalled its "empty" mbarrier.
//   Consumers: wait on "full" (no CTA-wide barrier per step, which would make both warpgroups'
//   elementwise phases coincide and leave the tensor cores idle), then per warpgroup: issue S(s+1)
//   and PV(s), softmax of S(s+1) while PV(s) runs.
//   Ping-pong: two named barriers hand the right to issue MMAs back and forth, so one consumer's
//   GEMMs run while the other does its elementwise work (FA3's warp scheduler barriers).
#ifndef GEMTB_GPU_ATTENTION_FORWARD_HOPPER_WS_KERNEL_CUH_
#define GEMTB_GPU_ATTENTION_FORWARD_HOPPER_WS_KERNEL_CUH_

#include "gpu/attention/forward_hopper_common.cuh"
#include "gpu/common/mbarrier.cuh"

namespace gemtb::gpu {

inline constexpr int kHopperWsProducerRegs = 40;
inline constexpr int kHopperWsConsumerRegs = 232;  // 128 x 40 + 256 x 232 <= 65536

// Named barrier ids: 1 and 2 are consumer 0's and consumer 1's turn to issue MMAs; 3 joins the two
// consumers once (mask bounds).
inline constexpr int kWsTurnBarrier = 1;
inline constexpr int kWsConsumersBarrier = 3;

template <ElementType E, HopperAct kAct, int BN>
__global__ void __launch_bounds__(kHopperWsThreads, 1) ForwardHopperWsKernel(const ForwardParams p) {
  constexpr int D = kHopperHeadDim;
  constexpr int BM = kHopperBlockM;
  static_assert(BN == 64 || BN == 128, "64 or 128 keys per step");
  using Smem = HopperForwardSmem<BN>;
  constexpr int kStages = Smem::kStages;
  constexpr int kSRegs = BN / 2;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t bars[1 + 2 * kStages];  // Q full, stage full[], stage empty[]
  __shared__ int s_full_lo, s_full_hi;
  const uint32_t raw = wgmma::SmemAddress(smem_raw);
  const uint32_t sq = (raw + 1023u) & ~1023u;
  const auto sk = [&](int stage) { return sq + Smem::kQBytes + static_cast<uint32_t>(stage) * 2u * Smem::kKvBytes; };
  const auto sv = [&](int stage) { return sk(stage) + Smem::kKvBytes; };
  const uint32_t bar_q = wgmma::SmemAddress(&bars[0]);
  const auto bar_full = [&](int stage) { return bar_q + 8u * static_cast<uint32_t>(1 + stage); };
  const auto bar_empty = [&](int stage) { return bar_q + 8u * static_cast<uint32_t>(1 + kStages + stage); };

  const ProblemParams& pr = p.problem;
  const int tile_index = static_cast<int>(blockIdx.x) / pr.heads;
  const int h = static_cast<int>(blockIdx.x) % pr.heads;
  const int hk = h / (pr.heads / pr.kv_heads);
  const ForwardTile tile = p.tiles[tile_index];
  const SeqInfo seq = pr.seqs[tile.b];
  const int tid = static_cast<int>(threadIdx.x);
  const int role = tid / 128;  // 0: producer; 1, 2: consumers
  const int64_t q_stride = static_cast<int64_t>(pr.heads) * D;
  const int64_t kv_stride = static_cast<int64_t>(pr.kv_heads) * D;
  const int q_rows = min(BM, seq.lq - tile.i0);
  const int steps = KeySteps(tile.k_lo, tile.k_hi, BN);

  if (tid == 0) {
    mbar::Init(bar_q, 128);
    for (int s = 0; s < kStages; ++s) {
      mbar::Init(bar_full(s), 128);  // every producer thread, once its copies landed
      mbar::Init(bar_empty(s), 8);   // lane 0 of each of the 8 consumer warps
    }
    s_full_lo = INT_MIN;
    s_full_hi = INT_MAX;
  }
  __syncthreads();  // the only CTA-wide barrier

  if (role == 0) {
    // ---- producer ----
    mbar::RegDealloc<kHopperWsProducerRegs>();
    const int pt = tid;
    wgmma::WarpgroupLoadRows(pt, sq, BM, pr.q + (seq.q_begin + tile.i0) * q_stride + h * D, q_stride, q_rows, pr.q);
    mbar::CpAsyncArrive(bar_q);
    for (int step = 0; step < steps; ++step) {
      const int stage = step % kStages;
      // Step `step` reuses the stage of step - kStages: wait for both consumers to release it.
      if (step >= kStages) mbar::Wait(bar_empty(stage), static_cast<uint32_t>((step / kStages - 1) & 1));
      const int j0 = tile.k_lo + step * BN;
      const int64_t offset = (seq.kv_begin + j0) * kv_stride + hk * D;
      const int rows = min(BN, tile.k_hi - j0);
      wgmma::WarpgroupLoadRows(pt, sk(stage), BN, pr.k + offset, kv_stride, rows, pr.k);
      wgmma::WarpgroupLoadRows(pt, sv(stage), BN, pr.v + offset, kv_stride, rows, pr.v);
      mbar::CpAsyncArrive(bar_full(stage));
    }
    CopyAsyncWait<0>();  // leave nothing in flight behind an exiting thread
    return;
  }

  // ---- consumers ----
  mbar::RegAlloc<kHopperWsConsumerRegs>();
  const int cw = role - 1;  // consumer warpgroup 0 or 1: rows cw*64 .. cw*64+63
  const int warp = (tid / 32) % 4;
  const LaneCoords ln = Lane();
  constexpr bool softmax = kAct == HopperAct::kSoftmax;
  const float score_scale = softmax ? pr.pre_scale * 1.44269504088896340736f : pr.pre_scale;

  const int row[2] = {cw * 64 + warp * 16 + ln.g, cw * 64 + warp * 16 + ln.g + 8};
  RowKeyRange keys[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) keys[r] = RowKeys(pr.options, tile.i0 + row[r], seq.lq, seq.lk);
  if (ln.t == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (row[r] < q_rows) {
        atomicMax(&s_full_lo, keys[r].begin);
        atomicMin(&s_full_hi, keys[r].end);
      }
    }
  }
  mbar::NamedSync(kWsConsumersBarrier, 256);
  const int full_lo = s_full_lo;
  const int full_hi = s_full_hi;

  // The MMA turn: wait for mine, and after issuing hand it to the other consumer. Consumer 0 goes
  // first (its barrier pre-armed with the other side's 128 arrivals).
  const int my_turn = kWsTurnBarrier + cw;
  const int other_turn = kWsTurnBarrier + (1 - cw);
  if (cw == 0) mbar::NamedArrive(my_turn, 256);

  const auto issue_scores = [&](int step, float (&s)[kSRegs]) {
    const uint32_t k_tile = sk(step % kStages);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t a = sq + static_cast<uint32_t>((kk >> 2) * BM * 128 + cw * 64 * 128 + (kk & 3) * 32);
      const uint32_t b = k_tile + static_cast<uint32_t>((kk >> 2) * BN * 128 + (kk & 3) * 32);
      const uint64_t da = wgmma::SwizzledDescriptor(a, 16, 1024);
      const uint64_t db = wgmma::SwizzledDescriptor(b, 16, 1024);
      if constexpr (BN == 64) {
        wgmma::MmaSS64<E>(s, da, db, kk > 0 ? 1u : 0u);
      } else {
        wgmma::MmaSS<E>(s, da, db, kk > 0 ? 1u : 0u);
      }
    }
  };
  const auto wait_full = [&](int step) {
    mbar::Wait(bar_full(step % kStages), static_cast<uint32_t>((step / kStages) & 1));
    wgmma::FenceProxyAsync();  // the cp.async writes, seen through the barrier, to the wgmma proxy
  };

  Log2Softmax online;
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.f;

  uint32_t pa[BN / 16][4];
  float rescale[2] = {1.f, 1.f};
  const auto scores_to_p = [&](int step, float (&s)[kSRegs]) {
    const int j0 = tile.k_lo + step * BN;
    ScoresToP<kAct, BN>(*reinterpret_cast<float(*)[BN / 8][4]>(&s), j0,
                        !(j0 >= full_lo && j0 + BN <= full_hi), ln.t, keys, score_scale, pr, online,
                        rescale);
  };
  const auto p_to_operand = [&](float (&s)[kSRegs]) {
    PToOperand<E, BN>(*reinterpret_cast<float(*)[BN / 8][4]>(&s), pa);
  };

  mbar::Wait(bar_q, 0);
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
    scores_to_p(0, s0);
    p_to_operand(s0);
  }

  // Step s: wait for K/V(s+1); in my turn issue S(s+1) and O += P(s) V(s); P(s+1) from S(s+1)
  // while PV(s) runs (and the other consumer's MMAs follow on the tensor cores); release stage s.
  const auto run_step = [&](int step, auto has_next) {
    float sb[kSRegs];
    if constexpr (has_next) wait_full(step + 1);
    mbar::NamedSync(my_turn, 256);
    if constexpr (has_next) {
      wgmma::Fence();
      issue_scores(step + 1, sb);
      wgmma::Commit();
    }
    if constexpr (softmax) RescaleHopperRows(acc, rescale);
    wgmma::Fence();
    const uint32_t v_tile = sv(step % kStages);
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint32_t b = v_tile + static_cast<uint32_t>(kk * 16 * 128);
      wgmma::MmaRS<E>(acc, pa[kk], wgmma::SwizzledDescriptor(b, BN * 128, 1024), 1u);
    }
    wgmma::Commit();
    // Consumer 1's last hand-over has no taker (consumer 0 issues nothing more): skipping it keeps
    // every named-barrier use complete.
    if (has_next || cw == 0) mbar::NamedArrive(other_turn, 256);
    if constexpr (has_next) {
      wgmma::Wait<1>();
      wgmma::FenceRegisters(sb);
      scores_to_p(step + 1, sb);
    }
    wgmma::Wait<0>();
    wgmma::FenceRegisters(acc);
    __syncwarp();
    if ((tid & 31) == 0) mbar::Arrive(bar_empty(step % kStages));  // this warp is done with stage s
    if constexpr (has_next) p_to_operand(sb);
  };
  for (int step = 0; step + 1 < steps; ++step) run_step(step, std::true_type{});
  run_step(steps - 1, std::false_type{});

  // StoreHopperRows (forward_hopper_common.cuh) written out: calling it reschedules this kernel's
  // softmax instance.
  float row_sum[2] = {1.f, 1.f};
  float lse[2] = {-INFINITY, -INFINITY};
  if constexpr (softmax) online.Finish(row_sum, lse);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row[r] >= q_rows) continue;
    const int64_t out_row = seq.out_begin + tile.i0 + row[r];
    uint16_t* o = p.o + (out_row * pr.heads + h) * D + 2 * ln.t;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      float v0 = acc[4 * i + 2 * r];
      float v1 = acc[4 * i + 2 * r + 1];
      if constexpr (softmax) {
        v0 = row_sum[r] > 0.f ? (v0 / row_sum[r]) * pr.post_scale : 0.f;
        v1 = row_sum[r] > 0.f ? (v1 / row_sum[r]) * pr.post_scale : 0.f;
      }
      *reinterpret_cast<uint32_t*>(o + i * 8) = PackRounded<E>(v0, v1);
    }
    if (softmax && ln.t == 0) p.lse[h * pr.out_rows + out_row] = lse[r];
  }
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_FORWARD_HOPPER_WS_KERNEL_CUH_
