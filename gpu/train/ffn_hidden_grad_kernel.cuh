// The bf16 feed-forward block's hidden gradient as one Hopper kernel (sm_90a wgmma), launched by
// ffn_hidden_grad.cu: from the output gradient dy (bf16, the pass that rounds it sums b2's gradient)
// and the forward's pre-activation u,
//
//   dg = bf16(dy W2ᵀ)                    kept in registers, never stored
//   du = bf16(dg · GELU'(u))             stored (dW1 = hᵀ du and dh = du W1ᵀ read it)
//   partial[b][c] = sum of du[r][c] over the 64 rows r of block b, in row order
//
// partial is the first level of model_kernels.h's column-sum tree (kColumnSumsBlockRows rows a
// block), so the launcher's ColumnSums over it gives b1's gradient with the separate kernels' bytes.
//
// Persistent and warp-specialised like ffn_forward_kernel.cuh: one CTA an SM walks tiles of kRows
// rows; warpgroup 0 copies (cp.async): a tile's rows of dy into one of two buffers, then per chunk of
// kChunk hidden columns W2's rows of the chunk (the product's K-major B operand) and the tile's u of
// the chunk into one of kStages stages. Warpgroups 1 and 2 take 64 rows each (one column-sum block):
// per chunk the product (wgmma, both operands in shared memory), then dg rounded, du from u (read from
// the stage), du stored to memory and written over the warpgroup's rows of u in the stage, and each
// thread of the warpgroup sums one column of them over the 64 rows.
//
// Every value is rounded where the separate kernels round it (dg by the product's bf16 output, du by
// GeluBackward's product with gelu.cuh's GeluGradOfBf16); only the order of the product's fp32 sums
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
constexpr int kDyBuffers = 2;
constexpr int kProducerRegs = 40;
constexpr int kConsumerRegs = 232;
constexpr int kSumBarrier = 1;  // named barriers 1 and 2: a consumer's du written for its column sums

// Shared memory: kDyBuffers tiles of dy ([kRows, kD], the K-major A operand), then kStages stages of
// W2[chunk, :] ([kChunk rows, kD columns], the K-major B operand) and u[tile rows, chunk] ([kRows,
// kChunk]); every tile 128-byte swizzled (wgmma.cuh's SwizzledOffset), with 1024 bytes of slack to
// align them to the swizzle's period.
struct Layout {
  static constexpr uint32_t kDyBytes = kRows * kD * 2;
  static constexpr uint32_t kW2Bytes = kChunk * kD * 2;
  static constexpr uint32_t kUBytes = kRows * kChunk * 2;
  static constexpr uint32_t kStageBytes = kW2Bytes + kUBytes;
  static constexpr size_t kBytes = 1024 + kDyBuffers * kDyBytes + kStages * kStageBytes;
};

struct Params {
  int64_t n = 0;   // rows
  int hidden = 0;  // a multiple of kChunk
  const uint16_t* dy = nullptr;  // [n, kD] bf16
  const uint16_t* w2 = nullptr;  // [hidden, kD] bf16
  const uint16_t* u = nullptr;   // [n, hidden] bf16
  uint16_t* du = nullptr;        // [n, hidden] bf16
  float* partial = nullptr;      // [ceil(n / kBlockRows), hidden]
};

__global__ void __launch_bounds__(kThreads, 1) FfnHiddenGradKernel(const Params p) {
  AwaitPriorGrids();
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  using Barriers = ffn_hopper::PipelineBarriers<kDyBuffers, kStages>;
  __shared__ __align__(8) uint64_t bars[Barriers::kCount];
  const uint32_t dy_base = (wgmma::SmemAddress(smem_raw) + 1023u) & ~1023u;
  const auto dy_tile = [&](int buffer) { return dy_base + static_cast<uint32_t>(buffer) * Layout::kDyBytes; };
  const auto w2_tile = [&](int stage) {
    return dy_base + kDyBuffers * Layout::kDyBytes + static_cast<uint32_t>(stage) * Layout::kStageBytes;
  };
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

  for (int local = 0; local < my_tiles; ++local) {
    const int64_t first = ffn_hopper::TileFirstRow<kRows>(local);
    const int buffer = local % kDyBuffers;
    const int64_t rows[2] = {first + tile_row0, first + tile_row0 + 8};
    const int64_t block_first = first + wg * kBlockRows;
    const int block_valid = static_cast<int>(
        p.n - block_first < kBlockRows ? (p.n > block_first ? p.n - block_first : 0) : kBlockRows);

    mbar::Wait(bar.TileFull(buffer), static_cast<uint32_t>((local / kDyBuffers) & 1));
    for (int chunk = 0; chunk < chunks; ++chunk) {
      const int q = local * chunks + chunk;
      const int stage = q % kStages;
      mbar::Wait(bar.Full(stage), static_cast<uint32_t>((q / kStages) & 1));
      wgmma::FenceProxyAsync();  // the cp.async writes, seen through the barriers, to the wgmma proxy

      // s = dy W2[chunk, :]ᵀ, 64 x kChunk a warpgroup: k step kk is columns 16kk .. 16kk + 15 of the
      // warpgroup's rows of dy and of the chunk's rows of W2 (each within a 64-column block).
      float s[64];
      wgmma::Fence();
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        const uint32_t a =
            dy_tile(buffer) + static_cast<uint32_t>((kk >> 2) * kRows * 128 + wg * 64 * 128 + (kk & 3) * 32);
        const uint32_t b = w2_tile(stage) + static_cast<uint32_t>((kk >> 2) * kChunk * 128 + (kk & 3) * 32);
        wgmma::MmaSS<ElementType::kBFloat16>(s, wgmma::SwizzledDescriptor(a, 16, 1024),
                                             wgmma::SwizzledDescriptor(b, 16, 1024), kk > 0 ? 1u : 0u);
      }
      wgmma::Commit();
      wgmma::Wait<0>();
      wgmma::FenceRegisters(s);
      if (chunk + 1 == chunks) ffn_hopper::WarpRelease(bar.TileEmpty(buffer));  // its last read of the tile's dy

      // du = bf16(bf16(s) GELU'(u)): words of the thread's two rows, 8-column block i holding columns
      // 8i + 2t, 8i + 2t + 1; u read from the stage at the same places, du written over it.
      uint8_t* const u_stage = u_bytes(stage);
      uint32_t dw[2][kChunk / 8];
#pragma unroll
      for (int i = 0; i < kChunk / 8; ++i) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          uint32_t* const at = reinterpret_cast<uint32_t*>(
              u_stage + wgmma::SwizzledOffset(kRows, tile_row0 + 8 * r, 8 * i + 2 * lane_t));
          const uint32_t uu = *at;
          const float dg_lo = Bf16Value(Bf16::FromFloat(s[4 * i + 2 * r]));
          const float dg_hi = Bf16Value(Bf16::FromFloat(s[4 * i + 2 * r + 1]));
          const uint16_t du_lo =
              Bf16::FromFloat(__fmul_rn(dg_lo, GeluGradOfBf16(Bf16Value(static_cast<uint16_t>(uu & 0xFFFFu)))));
          const uint16_t du_hi =
              Bf16::FromFloat(__fmul_rn(dg_hi, GeluGradOfBf16(Bf16Value(static_cast<uint16_t>(uu >> 16)))));
          dw[r][i] = PackHalves(du_lo, du_hi);
          *at = dw[r][i];
        }
      }
      const int c0 = chunk * kChunk;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const bool valid = rows[r] < p.n;
        const int64_t at = (valid ? rows[r] : 0) * p.hidden + c0;
        StoreRowWords(dw[r], valid, p.du + at, lane_t);
      }
      // The warpgroup's du in the stage: thread j sums column j over its valid rows, in row order from
      // +0 (the tree's first level: the same sum bit for bit).
      mbar::NamedSync(kSumBarrier + wg, 128);
      float sum = 0.f;
#pragma unroll 8
      for (int r = 0; r < block_valid; ++r) {
        const uint16_t v =
            *reinterpret_cast<const uint16_t*>(u_stage + wgmma::SwizzledOffset(kRows, wg * 64 + r, thread));
        sum = __fadd_rn(sum, Bf16Value(v));
      }
      if (block_valid > 0) p.partial[(block_first / kBlockRows) * p.hidden + c0 + thread] = sum;
      ffn_hopper::WarpRelease(bar.Empty(stage));
    }
  }
}

}  // namespace gemtb::gpu::train::ffn_hidden_grad

#endif  // GEMTB_GPU_TRAIN_FFN_HIDDEN_GRAD_KERNEL_CUH_
