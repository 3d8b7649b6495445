// The bf16 feed-forward block's hidden gradient as one Hopper kernel (sm_90a wgmma), launched by
// ffn_hidden_grad.cu: from the output gradient dy (bf16, the pass that rounds it sums b2's gradient)
// and the forward's pre-activation u,
//
//   dg = bf16(dy W2ᵀ)                    kept in registers, never stored
//   du = bf16(dg · GELU'(u))             stored (dW1 = hᵀ du reads it)
//   dh = du W1ᵀ                          fp32, stored (LayerNorm's backward reads it)
//   partial[b][c] = sum of du[r][c] over the 64 rows r of block b, in row order
//
// partial is the first level of model_kernels.h's column-sum tree (kColumnSumsBlockRows rows a
// block), so the launcher's ColumnSums over it gives b1's gradient with the separate kernels' bytes.
//
// Persistent and warp-specialised like ffn_forward_kernel.cuh: one CTA an SM walks tiles of kRows
// rows; warpgroup 0 copies (cp.async): a tile's rows of dy, then per chunk of kChunk hidden columns
// W1's columns, W2's rows and the tile's u of the chunk into one of kStages stages. Warpgroups 1 and 2
// take 64 rows each (one column-sum block): per chunk dy W2ᵀ as two 64-column products (one
// accumulator at a time beside dh's), dg rounded, du from u (read from the stage), du stored to memory
// and written over the warpgroup's rows of u in the stage; then dh += du W1[:, chunk]ᵀ from those rows
// (a K-major A operand) and W1's staged chunk (a K-major B operand), while each thread of the
// warpgroup sums one column of them over the 64 rows. dh is written once the tile's chunks are done.
// The consumers take turns to issue their products (ffn_forward_kernel.cuh's ping-pong). Shared memory
// holds one tile of dy (two would not fit beside the stages): the next tile's copies start once both
// consumers issued their last products of it, and land while they finish its last chunk.
//
// Every value is rounded where the separate kernels round it (dg by the product's bf16 output, du by
// GeluBackward's product with gelu.cuh's GeluGradOfBf16); only the order of the products' fp32 sums
// differs from cuBLASLt's. Every sum runs in a fixed order: the same bytes on every run. Device code
// only (wgmma has no CPU emulation).
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

constexpr int kD = ffn_hopper::kD;          // the block's width: K of the product
constexpr int kChunk = ffn_hopper::kChunk;  // hidden columns a step: N of the product
constexpr int kRows = 128;      // rows a tile: two column-sum blocks of 64
constexpr int kBlockRows = 64;  // a consumer's rows, model_kernels.h's kColumnSumsBlockRows
constexpr int kThreads = 384;   // a producer warpgroup and two consumers
constexpr int kStages = 2;
constexpr int kDyBuffers = 1;
constexpr int kProducerRegs = 40;
constexpr int kConsumerRegs = 232;
constexpr int kSumBarrier = 1;   // named barriers 1 and 2: a consumer's du written for its column sums
constexpr int kTurnBarrier = 3;  // named barriers 3 and 4: consumer 0's and consumer 1's turn to issue products

// Shared memory: the tile of dy ([kRows, kD], the K-major A operand), then kStages stages of W1[:,
// chunk] ([kD rows, kChunk columns], dh's K-major B operand), W2[chunk, :] ([kChunk rows, kD columns],
// a K-major B operand) and u[tile rows, chunk] ([kRows, kChunk], then du: dh's K-major A operand);
// every tile 128-byte swizzled (wgmma.cuh's SwizzledOffset), with 1024 bytes of slack to align them to
// the swizzle's period. 225 KB of the 227 an sm_90 CTA may have.
struct Layout {
  static constexpr uint32_t kDyBytes = kRows * kD * 2;
  static constexpr uint32_t kW1Bytes = kD * kChunk * 2;
  static constexpr uint32_t kW2Bytes = kChunk * kD * 2;
  static constexpr uint32_t kUBytes = kRows * kChunk * 2;
  static constexpr uint32_t kStageBytes = kW1Bytes + kW2Bytes + kUBytes;
  static constexpr size_t kBytes = 1024 + kDyBuffers * kDyBytes + kStages * kStageBytes;
};
static_assert(Layout::kBytes <= 227 * 1024, "an sm_90 CTA's shared memory");

struct Params {
  int64_t n = 0;   // rows
  int hidden = 0;  // a multiple of kChunk
  const uint16_t* dy = nullptr;  // [n, kD] bf16
  const uint16_t* w1 = nullptr;  // [kD, hidden] bf16
  const uint16_t* w2 = nullptr;  // [hidden, kD] bf16
  const uint16_t* u = nullptr;   // [n, hidden] bf16
  uint16_t* du = nullptr;        // [n, hidden] bf16
  float* dh = nullptr;           // [n, kD]
  float* partial = nullptr;      // [ceil(n / kBlockRows), hidden]
};

__global__ void __launch_bounds__(kThreads, 1) FfnHiddenGradKernel(const Params p) {
  AwaitPriorGrids();
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  using Barriers = ffn_hopper::PipelineBarriers<kDyBuffers, kStages>;
  __shared__ __align__(8) uint64_t bars[Barriers::kCount];
  const uint32_t dy_base = (wgmma::SmemAddress(smem_raw) + 1023u) & ~1023u;
  const auto dy_tile = [&](int buffer) { return dy_base + static_cast<uint32_t>(buffer) * Layout::kDyBytes; };
  const auto w1_tile = [&](int stage) {
    return dy_base + kDyBuffers * Layout::kDyBytes + static_cast<uint32_t>(stage) * Layout::kStageBytes;
  };
  const auto w2_tile = [&](int stage) { return w1_tile(stage) + Layout::kW1Bytes; };
  const auto u_tile = [&](int stage) { return w2_tile(stage) + Layout::kW2Bytes; };
  // The generic-proxy view of the same bytes, for the consumers' reads and writes of u and du.
  uint8_t* const smem = smem_raw + (dy_base - wgmma::SmemAddress(smem_raw));
  const auto u_bytes = [&](int stage) { return smem + (u_tile(stage) - dy_base); };
  const Barriers bar{wgmma::SmemAddress(&bars[0])};  // TileFull/TileEmpty guard the buffers of dy

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
      const int buffer = local % kDyBuffers;
      const int valid = static_cast<int>(p.n - first < kRows ? p.n - first : kRows);
      // Tile `local` reuses the dy buffer of tile local - kDyBuffers: wait for both consumers' last
      // product of that tile.
      if (local >= kDyBuffers) {
        mbar::Wait(bar.TileEmpty(buffer), static_cast<uint32_t>((local / kDyBuffers - 1) & 1));
      }
      wgmma::WarpgroupLoadRows(tid, dy_tile(buffer), kRows, p.dy + first * kD, kD, valid, p.dy);
      mbar::CpAsyncArrive(bar.TileFull(buffer));
      for (int chunk = 0; chunk < chunks; ++chunk) {
        const int q = local * chunks + chunk;  // the CTA's chunk count: stages cycle across tiles
        const int stage = q % kStages;
        if (q >= kStages) mbar::Wait(bar.Empty(stage), static_cast<uint32_t>((q / kStages - 1) & 1));
        const int c0 = chunk * kChunk;
        wgmma::WarpgroupLoadRows(tid, w1_tile(stage), kD, p.w1 + c0, p.hidden, kD, p.w1);  // W1[:, chunk]
        wgmma::WarpgroupLoadRows(tid, w2_tile(stage), kChunk, p.w2 + static_cast<int64_t>(c0) * kD, kD, kChunk,
                                 p.w2);  // W2[chunk, :]
        wgmma::WarpgroupLoadRows(tid, u_tile(stage), kRows, p.u + first * p.hidden + c0, p.hidden, valid,
                                 p.u);  // u[tile, chunk]
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
    const int buffer = local % kDyBuffers;
    const int64_t rows[2] = {first + tile_row0, first + tile_row0 + 8};
    const int64_t block_first = first + wg * kBlockRows;
    const int block_valid = static_cast<int>(
        p.n - block_first < kBlockRows ? (p.n > block_first ? p.n - block_first : 0) : kBlockRows);
    float dh[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) dh[i] = 0.f;

    mbar::Wait(bar.TileFull(buffer), static_cast<uint32_t>((local / kDyBuffers) & 1));
    for (int chunk = 0; chunk < chunks; ++chunk) {
      const int q = local * chunks + chunk;
      const int stage = q % kStages;
      mbar::Wait(bar.Full(stage), static_cast<uint32_t>((q / kStages) & 1));
      wgmma::FenceProxyAsync();  // the cp.async writes, seen through the barriers, to the wgmma proxy
      const int c0 = chunk * kChunk;
      uint8_t* const u_stage = u_bytes(stage);

      // s = dy W2[chunk, :]ᵀ in two halves of 64 columns (one product's accumulator at a time beside
      // dh's): k step kk is columns 16kk .. 16kk + 15 of the warpgroup's rows of dy and of the half's
      // rows of W2's chunk. Then du = bf16(bf16(s) GELU'(u)), four 8-column blocks at a time: u read
      // from the stage and du written over it, du stored to memory as it is done.
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float s[32];
        mbar::NamedSync(my_turn, 256);
        wgmma::Fence();
#pragma unroll
        for (int kk = 0; kk < kD / 16; ++kk) {
          const uint32_t a = dy_tile(buffer) +
                             static_cast<uint32_t>((kk >> 2) * kRows * 128 + wg * 64 * 128 + (kk & 3) * 32);
          const uint32_t b =
              w2_tile(stage) + static_cast<uint32_t>((kk >> 2) * kChunk * 128 + half * 64 * 128 + (kk & 3) * 32);
          wgmma::MmaSS64<ElementType::kBFloat16>(s, wgmma::SwizzledDescriptor(a, 16, 1024),
                                                 wgmma::SwizzledDescriptor(b, 16, 1024), kk > 0 ? 1u : 0u);
        }
        wgmma::Commit();
        mbar::NamedArrive(other_turn, 256);
        wgmma::Wait<0>();
        wgmma::FenceRegisters(s);
        // The tile's last read of dy: it goes back to the producer.
        if (half == 1 && chunk + 1 == chunks) ffn_hopper::WarpRelease(bar.TileEmpty(buffer));
#pragma unroll
        for (int i4 = 8 * half; i4 < 8 * half + 8; i4 += 4) {
          uint32_t dw[2][4];
#pragma unroll
          for (int i = i4; i < i4 + 4; ++i) {
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              uint32_t* const at = reinterpret_cast<uint32_t*>(
                  u_stage + wgmma::SwizzledOffset(kRows, tile_row0 + 8 * r, 8 * i + 2 * lane_t));
              const uint32_t uu = *at;
              const int e = 4 * (i - 8 * half) + 2 * r;
              const float dg_lo = Bf16Value(Bf16::FromFloat(s[e]));
              const float dg_hi = Bf16Value(Bf16::FromFloat(s[e + 1]));
              dw[r][i - i4] = PackHalves(
                  Bf16::FromFloat(__fmul_rn(dg_lo, GeluGradOfBf16(Bf16Value(static_cast<uint16_t>(uu & 0xFFFFu))))),
                  Bf16::FromFloat(__fmul_rn(dg_hi, GeluGradOfBf16(Bf16Value(static_cast<uint16_t>(uu >> 16))))));
              *at = dw[r][i - i4];
            }
          }
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const bool valid = rows[r] < p.n;
            StoreRowWords(dw[r], valid, p.du + (valid ? rows[r] : 0) * p.hidden + c0 + i4 * 8, lane_t);
          }
        }
      }
      wgmma::FenceProxyAsync();  // du's writes over u, to the wgmma proxy that reads them below
      mbar::NamedSync(kSumBarrier + wg, 128);
      // dh += du W1[:, chunk]ᵀ from the warpgroup's rows of du in the stage (a K-major A operand like
      // dy's) and W1's staged chunk (a K-major B operand: its rows are dh's columns): k step kk is
      // columns 16kk .. 16kk + 15 of both. Waited for after the column sums, which read the same rows.
      mbar::NamedSync(my_turn, 256);
      wgmma::Fence();
#pragma unroll
      for (int kk = 0; kk < kChunk / 16; ++kk) {
        const uint32_t a =
            u_tile(stage) + static_cast<uint32_t>((kk >> 2) * kRows * 128 + wg * 64 * 128 + (kk & 3) * 32);
        const uint32_t b = w1_tile(stage) + static_cast<uint32_t>((kk >> 2) * kD * 128 + (kk & 3) * 32);
        wgmma::MmaSS<ElementType::kBFloat16>(dh, wgmma::SwizzledDescriptor(a, 16, 1024),
                                             wgmma::SwizzledDescriptor(b, 16, 1024), 1u);
      }
      wgmma::Commit();
      // Consumer 1's very last hand-over has no taker (consumer 0 issues nothing more): skipping it
      // keeps every named-barrier use complete.
      if (wg == 0 || chunk + 1 < chunks || local + 1 < my_tiles) mbar::NamedArrive(other_turn, 256);
      // Thread j sums column j of the warpgroup's du over the block's valid rows, in row order from +0
      // (the tree's first level: the same sum bit for bit).
      float sum = 0.f;
#pragma unroll 8
      for (int r = 0; r < block_valid; ++r) {
        const uint16_t v =
            *reinterpret_cast<const uint16_t*>(u_stage + wgmma::SwizzledOffset(kRows, wg * 64 + r, thread));
        sum = __fadd_rn(sum, Bf16Value(v));
      }
      if (block_valid > 0) p.partial[(block_first / kBlockRows) * p.hidden + c0 + thread] = sum;
      wgmma::Wait<0>();
      wgmma::FenceRegisters(dh);
      ffn_hopper::WarpRelease(bar.Empty(stage));  // the chunk's products and sums read the stage
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
