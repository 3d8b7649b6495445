// The backward of the feed-forward block y = x + FFN(LayerNorm(x)) up to its input gradient in one
// kernel, with the hidden array kept on chip between the two products: device code only, launched by
// ffn_fused.cu and compiled by a host compiler for the CPU emulation (tests/gpu/emulation, through its
// cuda_shim.h).
//
//   dg = bf16(ds W2^T), du = bf16(dg GELU'(u)) (stored: W1's gradient reads it), dh = du W1^T, then
//   LayerNorm's backward of dh added to dx and its parameters' partial sums per 64-row block written.
// Every value is rounded where the separate kernels round it (cuBLASLt products, GELU's elementwise
// backward); the LayerNorm part is layer_norm_kernels.cuh's own row functions, so given the same dh
// it gives LayerNormBackward's bytes. Only the order of each product's fp32 sums differs from
// cuBLASLt's.
//
// A CTA takes kRows rows of ds, staged once in shared memory; each of its kWarps warps owns 16 of
// them. The hidden dimension is walked in chunks of kChunk columns: the CTA stages the chunk's rows of
// W2 and columns of W1 (cp.async, the next chunk's while the warps compute on this one's), each warp
// forms its 16 x kChunk block of the first product in registers (mma.sync m16n8k16), applies GELU's
// derivative lane by lane, stores the block's bf16 values and feeds them, as the A fragments they
// already are, into its 16 x kD accumulator of the second product. The kernel ends with LayerNorm's
// backward of those accumulators (dh), layer_norm_tile.cuh. Every sum runs in a fixed order (k in
// increasing steps within a product, chunks in increasing order across it): the same bytes on every
// run.
#ifndef GEMTB_GPU_TRAIN_FFN_FUSED_KERNELS_CUH_
#define GEMTB_GPU_TRAIN_FFN_FUSED_KERNELS_CUH_

#include <cstddef>
#include <cstdint>

#include "gpu/common/dependent_launch.cuh"
#include "gpu/common/mma.cuh"
#include "gpu/common/tile_io.cuh"
#include "gpu/train/gelu.cuh"
#include "gpu/train/layer_norm_kernels.cuh"
#include "gpu/train/layer_norm_tile.cuh"
#include "model/common/element_type.h"

namespace gemtb::gpu::train::ffn {

using bf16 = uint16_t;  // bf16 bit patterns, in global and shared memory

using lnt::kRows;  // the CTA shape: layer_norm_tile.cuh's
using lnt::kThreads;
using lnt::kWarp;
using lnt::kWarps;
constexpr int kChunk = 64;          // hidden columns per step

// Shared memory: the ds tile [kRows][kLdX], then two stages, each W1's chunk of columns [kD][kLdW1]
// and W2's chunk of rows [kChunk][kLdX]: the next chunk's weights are copied (cp.async) while the
// warps compute on the current one's. The row strides (kD + 8 and kChunk + 8 elements) put the
// eight 16-byte rows of an ldmatrix load, and the eight rows of a lane group's 32-bit A loads, in
// distinct banks. The epilogue (layer_norm_tile.cuh) reuses the memory.
template <int kD>
struct Layout {
  static constexpr int kLdX = kD + 8;
  static constexpr int kLdW1 = kChunk + 8;
  static constexpr size_t kXElems = static_cast<size_t>(kRows) * kLdX;
  static constexpr size_t kW1Elems = static_cast<size_t>(kD) * kLdW1;
  static constexpr size_t kW2Elems = static_cast<size_t>(kChunk) * kLdX;
  static constexpr size_t kStageElems = kW1Elems + kW2Elems;
  static constexpr size_t kChainBytes = sizeof(bf16) * (kXElems + 2 * kStageElems);
  static constexpr size_t kEpilogueBytes = lnt::kBytes<kD>;
  static constexpr size_t kBytes = kChainBytes > kEpilogueBytes ? kChainBytes : kEpilogueBytes;
  static_assert(kD % kWarp == 0, "kD: a multiple of 32 (mma.sync's k; LayerNorm's lanes)");
  static_assert(sizeof(bf16) * kXElems % 16 == 0 && sizeof(bf16) * kW1Elems % 16 == 0 &&
                    sizeof(bf16) * kStageElems % 16 == 0,
                "16-byte aligned tiles");
};

struct Params {
  int64_t n = 0;             // rows
  int hidden = 0;            // a multiple of kChunk
  const bf16* w1 = nullptr;  // [kD, hidden]
  const bf16* w2 = nullptr;  // [hidden, kD]
  const bf16* ds = nullptr;  // [n, kD]: y's gradient, in bf16
  const bf16* u = nullptr;   // [n, hidden]: the forward's bf16(h W1 + b1)
  bf16* du = nullptr;        // [n, hidden]
  lnt::Args ln;              // the block's LayerNorm (ln.n == n): dx is added to, partial rows written
};

__device__ __forceinline__ float Bf16Value(bf16 bits) { return Storage<ElementType::kBFloat16>::ToFloat(bits); }
__device__ __forceinline__ bf16 Bf16Of(float v) { return Storage<ElementType::kBFloat16>::FromFloat(v); }

template <int kD>
__global__ void __launch_bounds__(kThreads, 2) FfnBackwardKernel(const Params p) {
  AwaitPriorGrids();
  using L = Layout<kD>;
  constexpr ElementType kBf16 = ElementType::kBFloat16;
  constexpr int kHiddenTiles = kChunk / 8;  // n-tiles of the first product per chunk
  constexpr int kOutTiles = kD / 8;         // n-tiles of the second product
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* xs = reinterpret_cast<bf16*>(smem);

  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const LaneCoords lane = Lane();
  const int64_t tile0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int valid = static_cast<int>(p.n - tile0 < kRows ? p.n - tile0 : kRows);
  // Chunk c's weights go to stage c % 2 (W1's columns, then W2's rows): chunk c + 1's copies are in
  // flight while chunk c is used.
  const auto w1_stage = [&](int c0) { return xs + L::kXElems + ((c0 / kChunk) % 2) * L::kStageElems; };
  const auto stage = [&](int c0) {
    bf16* w1s = w1_stage(c0);
    bf16* w2s = w1s + L::kW1Elems;
    CopyRowsAsync<kD, kChunk, kThreads>(w1s, L::kLdW1, p.w1 + c0, p.hidden);
    CopyRowsAsync<kChunk, kD, kThreads>(w2s, L::kLdX, p.w2 + static_cast<int64_t>(c0) * kD, kD);
    CopyAsyncCommit();
  };
  stage(0);  // the first chunk's weights load while the ds tile is staged
  LoadRowsZeroFill<kRows, kD, kThreads>(xs, L::kLdX, p.ds + tile0 * kD, kD, valid);
  // The lane's two rows in the C layout, within the tile and in ds.
  const int r_lo = warp * 16 + lane.g, r_hi = r_lo + 8;
  const bool in_lo = r_lo < valid, in_hi = r_hi < valid;
  const int64_t row_lo = tile0 + r_lo, row_hi = tile0 + r_hi;

  float acc[kOutTiles][4] = {};
  for (int c0 = 0; c0 < p.hidden; c0 += kChunk) {
    CopyAsyncWait<0>();  // this thread's copies of chunk c0 have landed
    // Every thread's copies of the chunk (and the ds tile) are in, and every warp is done with the last
    // chunk, whose stage the next chunk's copies take.
    __syncthreads();
    if (c0 + kChunk < p.hidden) stage(c0 + kChunk);
    const bf16* w1s = w1_stage(c0);
    const bf16* w2s = w1s + L::kW1Elems;

    // First product, the warp's 16 x kChunk block of ds W2[chunk, :]^T (W2's chunk stored [n][k]).
    float hid[kHiddenTiles][4] = {};
#pragma unroll
    for (int k0 = 0; k0 < kD; k0 += 16) {
      uint32_t a[4];
      LoadA(xs, L::kLdX, warp * 16, k0, a);
#pragma unroll
      for (int t = 0; t < kHiddenTiles; t += 2) {
        uint32_t b_lo[2], b_hi[2];
        LoadBPairFromRows(w2s, L::kLdX, t * 8, k0, b_lo, b_hi);
        Mma16816<kBf16>(hid[t], a, b_lo);
        Mma16816<kBf16>(hid[t + 1], a, b_hi);
      }
    }

    // GELU's derivative on the lane's values (rows r_lo, r_hi; columns 2 lane.t, +1 of each n-tile),
    // du stored and packed as the second product's A fragments: n-tiles 2j and 2j + 1 are k-step j's
    // columns 0-7 and 8-15.
    uint32_t a2[kHiddenTiles / 2][4];
#pragma unroll
    for (int t = 0; t < kHiddenTiles; ++t) {
      const int col = c0 + t * 8 + 2 * lane.t;
      const uint32_t u_lo = in_lo ? *reinterpret_cast<const uint32_t*>(p.u + row_lo * p.hidden + col) : 0u;
      const uint32_t u_hi = in_hi ? *reinterpret_cast<const uint32_t*>(p.u + row_hi * p.hidden + col) : 0u;
      const bf16 u[4] = {static_cast<bf16>(u_lo & 0xFFFFu), static_cast<bf16>(u_lo >> 16),
                         static_cast<bf16>(u_hi & 0xFFFFu), static_cast<bf16>(u_hi >> 16)};
      bf16 v[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float dg = Bf16Value(Bf16Of(hid[t][e]));
        v[e] = Bf16Of(__fmul_rn(dg, GeluGradOfBf16(Bf16Value(u[e]))));
      }
      if (in_lo) *reinterpret_cast<uint32_t*>(p.du + row_lo * p.hidden + col) = PackHalves(v[0], v[1]);
      if (in_hi) *reinterpret_cast<uint32_t*>(p.du + row_hi * p.hidden + col) = PackHalves(v[2], v[3]);
      a2[t / 2][(t % 2) * 2] = PackHalves(v[0], v[1]);
      a2[t / 2][(t % 2) * 2 + 1] = PackHalves(v[2], v[3]);
    }

    // Second product: the block times the chunk's rows of W1^T [hidden][kD] (W1's chunk stored [n][k]).
#pragma unroll
    for (int j = 0; j < kHiddenTiles / 2; ++j) {
#pragma unroll
      for (int t = 0; t < kOutTiles; t += 2) {
        uint32_t b_lo[2], b_hi[2];
        LoadBPairFromRows(w1s, L::kLdW1, t * 8, j * 16, b_lo, b_hi);
        Mma16816<kBf16>(acc[t], a2[j], b_lo);
        Mma16816<kBf16>(acc[t + 1], a2[j], b_hi);
      }
    }
  }

  // LayerNorm's backward of dh, the accumulators (the memory is the epilogue's once every warp is done
  // with the weights and the ds tile).
  lnt::LayerNormBackwardOfTile<kD>(acc, tile0, p.ln, smem);
}

}  // namespace gemtb::gpu::train::ffn

#endif  // GEMTB_GPU_TRAIN_FFN_FUSED_KERNELS_CUH_
