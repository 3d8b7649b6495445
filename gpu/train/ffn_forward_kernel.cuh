// The forward of the bf16 feed-forward block's products as one Hopper kernel (sm_90a wgmma), from
// LayerNorm's bf16 rows h to the fp32 residual stream, launched by ffn_forward.cu:
//
//   u = bf16(h W1 + b1)       stored (GELU's backward reads it)
//   g = bf16(GELU(u))         stored (W2's gradient reads it) and kept in registers
//   out = (g W2 + b2) + x     fp32, x the block's input (the residual)
//   out16 = bf16(out)         where asked for (the stream as the next layer's bf16 PMA reads it)
//
// The kernel is persistent: one CTA an SM, CTA c taking tiles of kRows rows c, c + gridDim.x, ... A CTA
// is warp-specialised (as the attention forward's forward_hopper_ws_kernel.cuh): warpgroup 0 copies
// (cp.async), warpgroups 1 and 2 compute, 64 rows of a tile each. The producer stages a tile's rows of
// h into one of two buffers (so that the next tile's arrive while this one computes: a CTA never waits
// for its first copies but once), then walks the hidden dimension in chunks of kChunk columns, copying
// W1's columns and W2's rows of a chunk into one of kStages stages (cycling across tiles) and
// signalling its "full" mbarrier; it refills a stage once both consumers signalled its "empty" one. A
// consumer, per chunk: its 64 x kChunk block of the first product (wgmma, both operands in shared
// memory), b1 added and u rounded, GELU of u, u and g stored, and g, already in the A fragment layout
// the accumulator gives, into its 64 x kD accumulator of the second product. No CTA-wide barrier per
// chunk; the consumers take turns to issue their products (two named barriers, FA3's ping-pong), so
// that one's products can run on the tensor cores while the other evaluates GELU. The separate
// kernels this replaces (two cuBLASLt products and GELU's elementwise kernel) wrote and read u and g
// in memory between them: here each is written once and neither is read.
//
// Every value is rounded where the separate kernels round it (u after the bias, g by gelu.cuh's
// GeluOfBf16, the elementwise kernel's evaluation); only the order of each product's fp32 sums
// differs from cuBLASLt's. Each sum runs in a fixed order (k in 16-wide steps within a chunk, chunks in
// increasing order): the same bytes on every run. Device code only (wgmma has no CPU emulation).
#ifndef GEMTB_GPU_TRAIN_FFN_FORWARD_KERNEL_CUH_
#define GEMTB_GPU_TRAIN_FFN_FORWARD_KERNEL_CUH_

#include <cstddef>
#include <cstdint>

#include "gpu/common/dependent_launch.cuh"
#include "gpu/common/mbarrier.cuh"
#include "gpu/common/mma.cuh"
#include "gpu/common/tile_io.cuh"
#include "gpu/common/wgmma.cuh"
#include "gpu/train/ffn_hopper_common.cuh"
#include "gpu/train/gelu.cuh"
#include "model/common/element_type.h"

namespace gemtb::gpu::train::ffn_forward {

using ffn_hopper::Bf16;
using ffn_hopper::Bf16Value;
using ffn_hopper::StoreRowWords;

constexpr int kD = ffn_hopper::kD;          // the block's width: K of the first product, N of the second
constexpr int kChunk = ffn_hopper::kChunk;  // hidden columns a step: N of the first product, K of the second
constexpr int kRows = 128;      // rows a CTA
constexpr int kThreads = 384;   // a producer warpgroup and two consumers of 64 rows each
constexpr int kStages = 2;
constexpr int kHBuffers = 2;  // a CTA's next tile of h copied while it computes this one
constexpr int kProducerRegs = 40;
constexpr int kConsumerRegs = 232;  // 128 x 40 + 256 x 232 <= 65536
// Named barrier ids 1 and 2: consumer 0's and consumer 1's turn to issue products.
constexpr int kTurnBarrier = 1;

// Shared memory: the CTA's rows of h ([kRows, kD], the K-major A operand of the first product), then
// kStages stages of W1[:, chunk] ([kD rows, kChunk columns]) and W2[chunk, :] ([kChunk rows, kD
// columns]), each read as an MN-major B operand; every tile 128-byte swizzled (wgmma.cuh), with 1024
// bytes of slack to align them to the swizzle's period.
struct Layout {
  static constexpr uint32_t kHBytes = kRows * kD * 2;
  static constexpr uint32_t kW1Bytes = kD * kChunk * 2;
  static constexpr uint32_t kW2Bytes = kChunk * kD * 2;
  static constexpr uint32_t kStageBytes = kW1Bytes + kW2Bytes;
  static constexpr size_t kBytes = 1024 + kHBuffers * kHBytes + kStages * kStageBytes;
};

struct Params {
  int64_t n = 0;   // rows
  int hidden = 0;  // a multiple of kChunk
  const uint16_t* h = nullptr;   // [n, kD] bf16
  const uint16_t* w1 = nullptr;  // [kD, hidden] bf16
  const uint16_t* b1 = nullptr;  // [hidden] bf16
  const uint16_t* w2 = nullptr;  // [hidden, kD] bf16
  const float* b2 = nullptr;     // [kD]
  const float* x = nullptr;      // [n, kD], may be out
  uint16_t* u = nullptr;         // [n, hidden] bf16
  uint16_t* g = nullptr;         // [n, hidden] bf16
  float* out = nullptr;          // [n, kD]
  uint16_t* out16 = nullptr;     // [n, kD] bf16(out), or null: not written
};

__global__ void __launch_bounds__(kThreads, 1) FfnForwardKernel(const Params p) {
  AwaitPriorGrids();
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  using Barriers = ffn_hopper::PipelineBarriers<kHBuffers, kStages>;
  __shared__ __align__(8) uint64_t bars[Barriers::kCount];
  const uint32_t h_base = (wgmma::SmemAddress(smem_raw) + 1023u) & ~1023u;
  const auto h_tile = [&](int buffer) { return h_base + static_cast<uint32_t>(buffer) * Layout::kHBytes; };
  const auto w1_tile = [&](int stage) {
    return h_base + kHBuffers * Layout::kHBytes + static_cast<uint32_t>(stage) * Layout::kStageBytes;
  };
  const auto w2_tile = [&](int stage) { return w1_tile(stage) + Layout::kW1Bytes; };
  const Barriers bar{wgmma::SmemAddress(&bars[0])};  // TileFull/TileEmpty guard the buffers of h

  const int tid = static_cast<int>(threadIdx.x);
  const int role = tid / 128;  // 0: producer; 1, 2: consumers
  const int chunks = p.hidden / kChunk;
  const int my_tiles = ffn_hopper::MyTiles<kRows>(p.n);

  if (tid == 0) bar.Init();
  __syncthreads();  // the only CTA-wide barrier

  if (role == 0) {
    // ---- producer ----
    mbar::RegDealloc<kProducerRegs>();
    for (int local = 0; local < my_tiles; ++local) {
      const int64_t first = ffn_hopper::TileFirstRow<kRows>(local);
      const int buffer = local % kHBuffers;
      // Tile `local` reuses the h buffer of tile local - kHBuffers: wait for both consumers' last first
      // product of that tile.
      if (local >= kHBuffers) {
        mbar::Wait(bar.TileEmpty(buffer), static_cast<uint32_t>((local / kHBuffers - 1) & 1));
      }
      // The tiles are 128 columns wide (kD = kChunk = 128): wgmma.cuh's warpgroup copy takes each.
      const int valid = static_cast<int>(p.n - first < kRows ? p.n - first : kRows);
      wgmma::WarpgroupLoadRows(tid, h_tile(buffer), kRows, p.h + first * kD, kD, valid, p.h);
      mbar::CpAsyncArrive(bar.TileFull(buffer));
      for (int chunk = 0; chunk < chunks; ++chunk) {
        const int q = local * chunks + chunk;  // the CTA's chunk count: stages cycle across tiles
        const int stage = q % kStages;
        // Chunk q reuses the stage of chunk q - kStages: wait for both consumers to release it.
        if (q >= kStages) mbar::Wait(bar.Empty(stage), static_cast<uint32_t>((q / kStages - 1) & 1));
        const int c0 = chunk * kChunk;
        wgmma::WarpgroupLoadRows(tid, w1_tile(stage), kD, p.w1 + c0, p.hidden, kD, p.w1);  // W1[:, chunk]
        wgmma::WarpgroupLoadRows(tid, w2_tile(stage), kChunk, p.w2 + static_cast<int64_t>(c0) * kD, kD, kChunk,
                                 p.w2);  // W2[chunk, :]
        mbar::CpAsyncArrive(bar.Full(stage));
      }
    }
    CopyAsyncWait<0>();  // leave nothing in flight behind an exiting thread
    return;
  }

  // ---- consumers ----
  mbar::RegAlloc<kConsumerRegs>();
  const int wg = role - 1;  // rows wg*64 .. wg*64+63 of a tile
  const int warp = (tid / 32) % 4;
  const int lane_g = (tid % 32) / 4;
  const int lane_t = tid % 4;

  // The turn to issue products alternates between the consumers (consumer 0 first: its barrier is
  // pre-armed with the other side's 128 arrivals), so that one's products run while the other
  // evaluates GELU or writes its tile's outputs.
  const int my_turn = kTurnBarrier + wg;
  const int other_turn = kTurnBarrier + (1 - wg);
  if (wg == 0) mbar::NamedArrive(my_turn, 256);

  for (int local = 0; local < my_tiles; ++local) {
    const int64_t first = ffn_hopper::TileFirstRow<kRows>(local);
    const int buffer = local % kHBuffers;
    // This thread's two rows: g and g + 8 of its warp's 16.
    const int64_t row0 = first + wg * 64 + warp * 16 + lane_g;
    const int64_t rows[2] = {row0, row0 + 8};

    float o[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) o[i] = 0.f;

    mbar::Wait(bar.TileFull(buffer), static_cast<uint32_t>((local / kHBuffers) & 1));
    for (int chunk = 0; chunk < chunks; ++chunk) {
      const int q = local * chunks + chunk;
      const int stage = q % kStages;
      mbar::Wait(bar.Full(stage), static_cast<uint32_t>((q / kStages) & 1));
      wgmma::FenceProxyAsync();  // the cp.async writes, seen through the barriers, to the wgmma proxy

      // s = h W1[:, chunk], 64 x kChunk a warpgroup: k step kk is columns 16kk .. 16kk + 15 of the
      // warpgroup's rows of h (within a 64-column block of the tile) and rows 16kk .. 16kk + 15 of W1's.
      float s[64];
      mbar::NamedSync(my_turn, 256);
      wgmma::Fence();
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        const uint32_t a =
            h_tile(buffer) + static_cast<uint32_t>((kk >> 2) * kRows * 128 + wg * 64 * 128 + (kk & 3) * 32);
        const uint32_t b = w1_tile(stage) + static_cast<uint32_t>(kk * 16 * 128);
        wgmma::MmaSS<ElementType::kBFloat16, true>(s, wgmma::SwizzledDescriptor(a, 16, 1024),
                                                   wgmma::SwizzledDescriptor(b, 128 * 128, 1024), kk > 0 ? 1u : 0u);
      }
      wgmma::Commit();
      mbar::NamedArrive(other_turn, 256);
      wgmma::Wait<0>();
      wgmma::FenceRegisters(s);
      if (chunk + 1 == chunks) ffn_hopper::WarpRelease(bar.TileEmpty(buffer));  // its last read of the tile's h

      // u = bf16(s + b1), g = bf16(GELU(u)): words of the thread's two rows, 8-column block i holding
      // columns 8i + 2t, 8i + 2t + 1.
      const int c0 = chunk * kChunk;
      uint32_t uw[2][kChunk / 8], gw[2][kChunk / 8];
#pragma unroll
      for (int i = 0; i < kChunk / 8; ++i) {
        const uint32_t bias = *reinterpret_cast<const uint32_t*>(p.b1 + c0 + 8 * i + 2 * lane_t);
        const float b_lo = Bf16Value(static_cast<uint16_t>(bias & 0xFFFFu));
        const float b_hi = Bf16Value(static_cast<uint16_t>(bias >> 16));
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const uint16_t u_lo = Bf16::FromFloat(__fadd_rn(s[4 * i + 2 * r], b_lo));
          const uint16_t u_hi = Bf16::FromFloat(__fadd_rn(s[4 * i + 2 * r + 1], b_hi));
          uw[r][i] = PackHalves(u_lo, u_hi);
          gw[r][i] = PackRounded<ElementType::kBFloat16>(GeluOfBf16(Bf16Value(u_lo)), GeluOfBf16(Bf16Value(u_hi)));
        }
      }
      // u and g of the chunk out to memory (before the product below: the registers of a wgmma's A
      // operand are not to be touched until the wgmma is waited for).
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const bool valid = rows[r] < p.n;
        const int64_t at = (valid ? rows[r] : 0) * p.hidden + c0;
        StoreRowWords(uw[r], valid, p.u + at, lane_t);
        StoreRowWords(gw[r], valid, p.g + at, lane_t);
      }
      // g as the A fragments of the second product: k step kk is accumulator blocks 2kk and 2kk + 1.
      uint32_t ga[kChunk / 16][4];
#pragma unroll
      for (int kk = 0; kk < kChunk / 16; ++kk) {
        ga[kk][0] = gw[0][2 * kk];
        ga[kk][1] = gw[1][2 * kk];
        ga[kk][2] = gw[0][2 * kk + 1];
        ga[kk][3] = gw[1][2 * kk + 1];
      }
      // o += g W2[chunk, :].
      mbar::NamedSync(my_turn, 256);
      wgmma::Fence();
#pragma unroll
      for (int kk = 0; kk < kChunk / 16; ++kk) {
        const uint32_t b = w2_tile(stage) + static_cast<uint32_t>(kk * 16 * 128);
        wgmma::MmaRS<ElementType::kBFloat16>(o, ga[kk], wgmma::SwizzledDescriptor(b, 128 * 128, 1024), 1u);
      }
      wgmma::Commit();
      // Consumer 1's very last hand-over has no taker (consumer 0 issues nothing more): skipping it
      // keeps every named-barrier use complete.
      if (wg == 0 || chunk + 1 < chunks || local + 1 < my_tiles) mbar::NamedArrive(other_turn, 256);
      wgmma::Wait<0>();
      wgmma::FenceRegisters(o);
      ffn_hopper::WarpRelease(bar.Empty(stage));
    }

    // out = (o + b2) + x, fp32 pairs, a row at a time: every load of the row's x issued before the
    // first sum (one memory latency a row, not one a pair; the chunks' registers are free by now).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (rows[r] >= p.n) continue;
      const int64_t at = rows[r] * kD + 2 * lane_t;
      float2 x[kD / 8], bias[kD / 8];
#pragma unroll
      for (int i = 0; i < kD / 8; ++i) {
        x[i] = *reinterpret_cast<const float2*>(p.x + at + 8 * i);
        bias[i] = *reinterpret_cast<const float2*>(p.b2 + 8 * i + 2 * lane_t);
      }
#pragma unroll
      for (int i = 0; i < kD / 8; ++i) {
        float2 y;
        y.x = __fadd_rn(__fadd_rn(o[4 * i + 2 * r], bias[i].x), x[i].x);
        y.y = __fadd_rn(__fadd_rn(o[4 * i + 2 * r + 1], bias[i].y), x[i].y);
        *reinterpret_cast<float2*>(p.out + at + 8 * i) = y;
        if (p.out16 != nullptr) {
          *reinterpret_cast<uint32_t*>(p.out16 + at + 8 * i) = PackRounded<ElementType::kBFloat16>(y.x, y.y);
        }
      }
    }
  }
}

}  // namespace gemtb::gpu::train::ffn_forward

#endif  // GEMTB_GPU_TRAIN_FFN_FORWARD_KERNEL_CUH_
