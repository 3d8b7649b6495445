// The bf16 feed-forward block's hidden gradient as one Hopper kernel (sm_90a wgmma), launched by
// ffn_hidden_grad.cu: from the output gradient dy (bf16, the pass that rounds it sums b2's gradient)
// and LayerNorm's rows h (the forward's input to the first product),
//
//   u  = bf16(h W1 + b1)                 recomputed, never stored (the forward does not store it either)
//   g  = bf16(GELU(u))                   stored (W2's gradient reads it)
//   dg = bf16(dy W2ᵀ)                    kept in registers, never stored
//   du = bf16(dg · GELU'(u))             stored (dW1 = hᵀ du reads it)
//   dh = du W1ᵀ                          fp32, stored (LayerNorm's backward reads it)
//   partial[b][c] = sum of du[r][c] over the 64 rows r of block b, in row order
//
// u is ffn_forward_kernel.cuh's u bit for bit: the same wgmma instructions over the same staged
// layouts of h and W1[:, chunk] in the same k order, then the same bias add and rounding; so g is the
// forward's g. Recomputing u costs a 128-deep product a hidden value; storing u and g in the forward
// and reading u here cost 3 KB of memory traffic a row, and the tape's 2 KB a row.
//
// partial is the first level of model_kernels.h's column-sum tree (kColumnSumsBlockRows rows a
// block), so the launcher's ColumnSums over it gives b1's gradient with the separate kernels' bytes.
//
// Persistent and warp-specialised like ffn_forward_kernel.cuh: one CTA an SM walks tiles of kRows
// rows; warpgroup 0 copies (cp.async): a tile's rows of dy and h, then per chunk of kChunk hidden
// columns W1's columns and W2's rows of the chunk into one of kStages stages. Warpgroups 1 and 2 take
// 64 rows each (one column-sum block). Per chunk a consumer takes three products (wgmma, operands in
// shared memory): h W1, whose u it parks in its rows of a shared du tile (registers are what bounds
// this kernel: 168 a thread hold dh's accumulator and one product's); dy W2ᵀ, whose rounding dg with
// u gives g and du, both stored to memory and du written over u in the tile; and dh += du W1[:, chunk]ᵀ
// from that tile and W1's staged chunk (read as a K-major operand), while each thread of the
// warpgroup sums one column of the tile over the 64 rows. dh is written once the tile's chunks are
// done. The consumers take turns to issue their products (ffn_forward_kernel.cuh's ping-pong), so
// that one's run on the tensor cores while the other evaluates GELU and its derivative. Shared memory
// holds one tile of dy and h (two would not fit beside the stages): the next tile's copies start once
// both consumers issued their last products of this one, and land while they finish its last chunk.
//
// Every value is rounded where the separate kernels round it (u after the bias, g by gelu.cuh's
// GeluOfBf16, dg by the product's bf16 output, du by GeluBackward's product with GeluGradOfBf16); only
// the order of the products' fp32 sums differs from cuBLASLt's. Every sum runs in a fixed order: the
// same bytes on every run. Device code only (wgmma has no CPU emulation).
#ifndef GEMTB_GPU_TRAIN_FFN_HIDDEN_GRAD_KERNEL_CUH_
#define GEMTB_GPU_TRAIN_FFN_HIDDEN_GRAD_KERNEL_CUH_

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

namespace gemtb::gpu::train::ffn_hidden_grad {

using ffn_hopper::Bf16;
using ffn_hopper::Bf16Value;
using ffn_hopper::StoreRowWords;

constexpr int kD = ffn_hopper::kD;          // the block's width: K of the first two products, N of dh's
constexpr int kChunk = ffn_hopper::kChunk;  // hidden columns a step: N of the first two products, K of dh's
constexpr int kRows = 128;      // rows a tile: two column-sum blocks of 64
constexpr int kBlockRows = 64;  // a consumer's rows, model_kernels.h's kColumnSumsBlockRows
constexpr int kThreads = 384;   // a producer warpgroup and two consumers
constexpr int kStages = 2;
constexpr int kTileBuffers = 1;
constexpr int kProducerRegs = 40;
constexpr int kConsumerRegs = 232;
constexpr int kSumBarrier = 1;   // named barriers 1 and 2: a consumer's rows of the du tile free, then written
constexpr int kTurnBarrier = 3;  // named barriers 3 and 4: consumer 0's and consumer 1's turn to issue products

// Shared memory: the tile's rows of dy and of h ([kRows, kD] each, the K-major A operands), kStages
// stages of W1[:, chunk] ([kD rows, kChunk columns], an MN-major B operand as the forward reads it,
// and a K-major one for dh) and W2[chunk, :] ([kChunk rows, kD columns], a K-major B operand), then
// the consumers' u and then du of a chunk ([kRows, kChunk], the K-major A operand of dh's product and
// the column sums' input); every tile 128-byte swizzled (wgmma.cuh's
// SwizzledOffset), with 1024 bytes of slack to align them to the swizzle's period. 225 KB of the
// 227 an sm_90 CTA may have.
struct Layout {
  static constexpr uint32_t kTileBytes = kRows * kD * 2;
  static constexpr uint32_t kW1Bytes = kD * kChunk * 2;
  static constexpr uint32_t kW2Bytes = kChunk * kD * 2;
  static constexpr uint32_t kStageBytes = kW1Bytes + kW2Bytes;
  static constexpr uint32_t kDuBytes = kRows * kChunk * 2;
  static constexpr size_t kBytes = 1024 + 2 * kTileBytes + kStages * kStageBytes + kDuBytes;
};
static_assert(Layout::kBytes <= 227 * 1024, "an sm_90 CTA's shared memory");

struct Params {
  int64_t n = 0;   // rows
  int hidden = 0;  // a multiple of kChunk
  const uint16_t* dy = nullptr;  // [n, kD] bf16
  const uint16_t* h = nullptr;   // [n, kD] bf16
  const uint16_t* w1 = nullptr;  // [kD, hidden] bf16
  const uint16_t* b1 = nullptr;  // [hidden] bf16
  const uint16_t* w2 = nullptr;  // [hidden, kD] bf16
  uint16_t* g = nullptr;         // [n, hidden] bf16
  uint16_t* du = nullptr;        // [n, hidden] bf16
  float* dh = nullptr;           // [n, kD]
  float* partial = nullptr;      // [ceil(n / kBlockRows), hidden]
};

__global__ void __launch_bounds__(kThreads, 1) FfnHiddenGradKernel(const Params p) {
  AwaitPriorGrids();
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  using Barriers = ffn_hopper::PipelineBarriers<kTileBuffers, kStages>;
  __shared__ __align__(8) uint64_t bars[Barriers::kCount];
  const uint32_t dy_tile = (wgmma::SmemAddress(smem_raw) + 1023u) & ~1023u;
  const uint32_t h_tile = dy_tile + Layout::kTileBytes;
  const auto w1_tile = [&](int stage) {
    return h_tile + Layout::kTileBytes + static_cast<uint32_t>(stage) * Layout::kStageBytes;
  };
  const auto w2_tile = [&](int stage) { return w1_tile(stage) + Layout::kW1Bytes; };
  const uint32_t du_tile = w1_tile(kStages);
  // The generic-proxy view of the du tile, for the consumers' writes and column sums.
  uint8_t* const du_bytes = smem_raw + (du_tile - wgmma::SmemAddress(smem_raw));
  const Barriers bar{wgmma::SmemAddress(&bars[0])};  // TileFull/TileEmpty guard the tile of dy and h

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
      const int buffer = local % kTileBuffers;
      const int valid = static_cast<int>(p.n - first < kRows ? p.n - first : kRows);
      // Tile `local` reuses the buffer of tile local - kTileBuffers: wait for both consumers' last
      // products of that tile.
      if (local >= kTileBuffers) {
        mbar::Wait(bar.TileEmpty(buffer), static_cast<uint32_t>((local / kTileBuffers - 1) & 1));
      }
      wgmma::WarpgroupLoadRows(tid, dy_tile, kRows, p.dy + first * kD, kD, valid, p.dy);
      wgmma::WarpgroupLoadRows(tid, h_tile, kRows, p.h + first * kD, kD, valid, p.h);
      mbar::CpAsyncArrive(bar.TileFull(buffer));
      for (int chunk = 0; chunk < chunks; ++chunk) {
        const int q = local * chunks + chunk;  // the CTA's chunk count: stages cycle across tiles
        const int stage = q % kStages;
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
  const int wg = role - 1;       // rows wg*64 .. wg*64+63 of a tile
  const int thread = tid % 128;  // within the warpgroup: the column it sums
  const int warp = thread / 32;
  const int lane_g = (tid % 32) / 4;
  const int lane_t = tid % 4;
  // This thread's two rows within the tile: g and g + 8 of its warp's 16.
  const int tile_row0 = wg * 64 + warp * 16 + lane_g;
  // The turn to issue products alternates between the consumers (consumer 0 first: its barrier is
  // pre-armed with the other side's 128 arrivals).
  const int my_turn = kTurnBarrier + wg;
  const int other_turn = kTurnBarrier + (1 - wg);
  if (wg == 0) mbar::NamedArrive(my_turn, 256);

  for (int local = 0; local < my_tiles; ++local) {
    const int64_t first = ffn_hopper::TileFirstRow<kRows>(local);
    const int buffer = local % kTileBuffers;
    const int64_t rows[2] = {first + tile_row0, first + tile_row0 + 8};
    const int64_t block_first = first + wg * kBlockRows;
    const int block_valid = static_cast<int>(
        p.n - block_first < kBlockRows ? (p.n > block_first ? p.n - block_first : 0) : kBlockRows);

    float dh[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) dh[i] = 0.f;

    mbar::Wait(bar.TileFull(buffer), static_cast<uint32_t>((local / kTileBuffers) & 1));
    for (int chunk = 0; chunk < chunks; ++chunk) {
      const int q = local * chunks + chunk;
      const int stage = q % kStages;
      mbar::Wait(bar.Full(stage), static_cast<uint32_t>((q / kStages) & 1));
      wgmma::FenceProxyAsync();  // the cp.async writes, seen through the barriers, to the wgmma proxy

      // The warpgroup's rows of the du tile are free once every thread of it summed the last chunk's
      // columns (the last chunk's dh product, which reads them, was waited for before).
      mbar::NamedSync(kSumBarrier + wg, 128);
      // a = h W1[:, chunk] (ffn_forward_kernel.cuh's first product, instruction for instruction), 64 x
      // kChunk a warpgroup: k step kk is columns 16kk .. 16kk + 15 of the warpgroup's rows of h (within
      // a 64-column block of the tile) and rows 16kk .. 16kk + 15 of W1's chunk. u = bf16(a + b1) goes
      // to the du tile, each word (columns 8i + 2t, 8i + 2t + 1 of one of the thread's two rows) where
      // this thread writes du's below: registers for the next product, not a round trip to memory.
      const int c0 = chunk * kChunk;
      {
        float a[64];
        mbar::NamedSync(my_turn, 256);
        wgmma::Fence();
#pragma unroll
        for (int kk = 0; kk < kD / 16; ++kk) {
          const uint32_t at = static_cast<uint32_t>((kk >> 2) * kRows * 128 + wg * 64 * 128 + (kk & 3) * 32);
          const uint32_t b = w1_tile(stage) + static_cast<uint32_t>(kk * 16 * 128);
          wgmma::MmaSS<ElementType::kBFloat16, true>(a, wgmma::SwizzledDescriptor(h_tile + at, 16, 1024),
                                                     wgmma::SwizzledDescriptor(b, 128 * 128, 1024), kk > 0 ? 1u : 0u);
        }
        wgmma::Commit();
        mbar::NamedArrive(other_turn, 256);
        wgmma::Wait<0>();
        wgmma::FenceRegisters(a);
#pragma unroll
        for (int i = 0; i < kChunk / 8; ++i) {
          const uint32_t bias = *reinterpret_cast<const uint32_t*>(p.b1 + c0 + 8 * i + 2 * lane_t);
          const float b_lo = Bf16Value(static_cast<uint16_t>(bias & 0xFFFFu));
          const float b_hi = Bf16Value(static_cast<uint16_t>(bias >> 16));
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            *reinterpret_cast<uint32_t*>(du_bytes +
                                         wgmma::SwizzledOffset(kRows, tile_row0 + 8 * r, 8 * i + 2 * lane_t)) =
                PackHalves(Bf16::FromFloat(__fadd_rn(a[4 * i + 2 * r], b_lo)),
                           Bf16::FromFloat(__fadd_rn(a[4 * i + 2 * r + 1], b_hi)));
          }
        }
      }
      // s = dy W2[chunk, :]ᵀ in two halves of 64 columns (one product's accumulator at a time beside
      // dh's): k step kk is columns 16kk .. 16kk + 15 of the warpgroup's rows of dy and of the half's
      // rows of W2's chunk. Then g = bf16(GELU(u)) and du = bf16(bf16(s) GELU'(u)), four 8-column blocks
      // at a time: du written over u in the du tile, both stored to memory as they are done.
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float s[32];
        mbar::NamedSync(my_turn, 256);
        wgmma::Fence();
#pragma unroll
        for (int kk = 0; kk < kD / 16; ++kk) {
          const uint32_t at = static_cast<uint32_t>((kk >> 2) * kRows * 128 + wg * 64 * 128 + (kk & 3) * 32);
          const uint32_t b =
              w2_tile(stage) + static_cast<uint32_t>((kk >> 2) * kChunk * 128 + half * 64 * 128 + (kk & 3) * 32);
          wgmma::MmaSS64<ElementType::kBFloat16>(s, wgmma::SwizzledDescriptor(dy_tile + at, 16, 1024),
                                                 wgmma::SwizzledDescriptor(b, 16, 1024), kk > 0 ? 1u : 0u);
        }
        wgmma::Commit();
        mbar::NamedArrive(other_turn, 256);
        wgmma::Wait<0>();
        wgmma::FenceRegisters(s);
        // The tile's last products read: it goes back to the producer.
        if (half == 1 && chunk + 1 == chunks) ffn_hopper::WarpRelease(bar.TileEmpty(buffer));
#pragma unroll
        for (int i4 = 8 * half; i4 < 8 * half + 8; i4 += 4) {
          uint32_t gw[2][4], dw[2][4];
#pragma unroll
          for (int i = i4; i < i4 + 4; ++i) {
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              uint32_t* const at = reinterpret_cast<uint32_t*>(
                  du_bytes + wgmma::SwizzledOffset(kRows, tile_row0 + 8 * r, 8 * i + 2 * lane_t));
              const uint32_t uu = *at;
              const float u_lo = Bf16Value(static_cast<uint16_t>(uu & 0xFFFFu));
              const float u_hi = Bf16Value(static_cast<uint16_t>(uu >> 16));
              gw[r][i - i4] = PackRounded<ElementType::kBFloat16>(GeluOfBf16(u_lo), GeluOfBf16(u_hi));
              const int e = 4 * (i - 8 * half) + 2 * r;
              const float dg_lo = Bf16Value(Bf16::FromFloat(s[e]));
              const float dg_hi = Bf16Value(Bf16::FromFloat(s[e + 1]));
              dw[r][i - i4] = PackHalves(Bf16::FromFloat(__fmul_rn(dg_lo, GeluGradOfBf16(u_lo))),
                                         Bf16::FromFloat(__fmul_rn(dg_hi, GeluGradOfBf16(u_hi))));
              *at = dw[r][i - i4];
            }
          }
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const bool valid = rows[r] < p.n;
            const int64_t at = (valid ? rows[r] : 0) * p.hidden + c0 + i4 * 8;
            StoreRowWords(gw[r], valid, p.g + at, lane_t);
            StoreRowWords(dw[r], valid, p.du + at, lane_t);
          }
        }
      }
      wgmma::FenceProxyAsync();  // the du tile's writes, to the wgmma proxy that reads them below
      mbar::NamedSync(kSumBarrier + wg, 128);
      // dh += du W1[:, chunk]ᵀ from the du tile (the warpgroup's rows, a K-major A operand like dy's) and
      // W1's staged chunk (a K-major B operand: its rows are dh's columns): k step kk is columns 16kk ..
      // 16kk + 15 of both. Waited for after the column sums, which read the same tile.
      mbar::NamedSync(my_turn, 256);
      wgmma::Fence();
#pragma unroll
      for (int kk = 0; kk < kChunk / 16; ++kk) {
        const uint32_t at = static_cast<uint32_t>((kk >> 2) * kRows * 128 + wg * 64 * 128 + (kk & 3) * 32);
        const uint32_t b = w1_tile(stage) + static_cast<uint32_t>((kk >> 2) * kD * 128 + (kk & 3) * 32);
        wgmma::MmaSS<ElementType::kBFloat16>(dh, wgmma::SwizzledDescriptor(du_tile + at, 16, 1024),
                                             wgmma::SwizzledDescriptor(b, 16, 1024), 1u);
      }
      wgmma::Commit();
      // Consumer 1's very last hand-over has no taker (consumer 0 issues nothing more): skipping it
      // keeps every named-barrier use complete.
      if (wg == 0 || chunk + 1 < chunks || local + 1 < my_tiles) mbar::NamedArrive(other_turn, 256);
      // Thread j sums column j of the du tile over the block's valid rows, in row order from +0 (the
      // tree's first level: the same sum bit for bit).
      float sum = 0.f;
#pragma unroll 8
      for (int r = 0; r < block_valid; ++r) {
        const uint16_t v =
            *reinterpret_cast<const uint16_t*>(du_bytes + wgmma::SwizzledOffset(kRows, wg * 64 + r, thread));
        sum = __fadd_rn(sum, Bf16Value(v));
      }
      if (block_valid > 0) p.partial[(block_first / kBlockRows) * p.hidden + c0 + thread] = sum;
      wgmma::Wait<0>();
      wgmma::FenceRegisters(dh);
      ffn_hopper::WarpRelease(bar.Empty(stage));  // the chunk's three products read the stage
    }

    // dh, fp32 pairs: columns 8i + 2t, 8i + 2t + 1 of the thread's two rows.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (rows[r] >= p.n) continue;
      float* const at = p.dh + rows[r] * kD + 2 * lane_t;
#pragma unroll
      for (int i = 0; i < kD / 8; ++i) {
        *reinterpret_cast<float2*>(at + 8 * i) = make_float2(dh[4 * i + 2 * r], dh[4 * i + 2 * r + 1]);
      }
    }
  }
}

}  // namespace gemtb::gpu::train::ffn_hidden_grad

#endif  // GEMTB_GPU_TRAIN_FFN_HIDDEN_GRAD_KERNEL_CUH_
