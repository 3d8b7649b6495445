// The feed-forward block y = x + FFN(LayerNorm(x)) in one kernel each way, with the hidden array kept
// on chip between the two products: device code only, launched by ffn_fused.cu and compiled by a host
// compiler for the CPU emulation (tests/gpu/emulation, through its cuda_shim.h).
//
// Both directions are the same chain X [n, kD] -> H [n, hidden] -> [n, kD], the LayerNorm at its x end:
//   forward   h = bf16(LayerNorm(x)), u = bf16(h W1 + b1), g = bf16(GELU(u)), y = (g W2 + b2) + x
//             (h, the row statistics, u and g stored for the backward);
//   backward  dg = bf16(ds W2^T), du = bf16(dg GELU'(u)) (stored), dh = du W1^T, then LayerNorm's
//             backward of dh added to dx and its parameters' partial sums per 64-row block written.
// Every value is rounded where the separate kernels round it (LayerNorm's kernels, cuBLASLt products,
// GELU's elementwise kernels); the LayerNorm parts are layer_norm_kernels.cuh's own row functions,
// so given the same dh they give LayerNormBackward's bytes. Only the order of each product's fp32
// sums differs from cuBLASLt's.
//
// A CTA takes kRows rows of X, staged once in shared memory (forward: each warp normalises its own 16
// rows into it); each of its kWarps warps owns 16 of them. The hidden dimension is walked in chunks of
// kChunk columns: the CTA stages the chunk's columns of W1 and rows of W2 (both directions use the
// same two slices; cp.async, the next chunk's while the warps compute on this one's), each warp forms its 16 x kChunk block of the first product in registers
// (mma.sync m16n8k16), applies the pointwise step lane by lane, stores the block's bf16 values and
// feeds them, as the A fragments they already are, into its 16 x kD accumulator of the second
// product. The backward ends with LayerNorm's backward of those accumulators (dh), layer_norm_tile.cuh.
// Every sum runs in a fixed order (k in increasing steps within a product, chunks in increasing order
// across it): the same bytes on every run.
#ifndef GEMTB_GPU_TRAIN_FFN_FUSED_KERNELS_CUH_
#define GEMTB_GPU_TRAIN_FFN_FUSED_KERNELS_CUH_

#include <cstddef>
#include <cstdint>

#include "gpu/common/mma.cuh"
#include "gpu/common/tile_io.cuh"
#include "gpu/train/gelu.cuh"
#include "gpu/train/layer_norm_kernels.cuh"
#include "gpu/train/layer_norm_tile.cuh"
#include "model/common/element_type.h"

namespace gemtb::gpu::train::ffn {

using bf16 = uint16_t;  // bf16 bit patterns, in global and shared memory

constexpr int kWarp = 32;
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarp;
constexpr int kRows = 16 * kWarps;  // rows of X per CTA
constexpr int kChunk = 64;          // hidden columns per step

// Shared memory: the X tile [kRows][kLdX], then two stages, each W1's chunk of columns [kD][kLdW1]
// and W2's chunk of rows [kChunk][kLdX]: the next chunk's weights are copied (cp.async) while the
// warps compute on the current one's. The row strides (kD + 8 and kChunk + 8 elements) put the
// eight 16-byte rows of an ldmatrix load, and the eight rows of a lane group's 32-bit A loads, in
// distinct banks. The backward's epilogue (layer_norm_tile.cuh) reuses the memory.
template <int kD>
struct Layout {
  static constexpr int kLdX = kD + 8;
  static constexpr int kLdW1 = kChunk + 8;
  static constexpr size_t kXElems = static_cast<size_t>(kRows) * kLdX;
  static constexpr size_t kW1Elems = static_cast<size_t>(kD) * kLdW1;
  static constexpr size_t kW2Elems = static_cast<size_t>(kChunk) * kLdX;
  static constexpr size_t kStageElems = kW1Elems + kW2Elems;
  static constexpr size_t kChainBytes = sizeof(bf16) * (kXElems + 2 * kStageElems);
  static constexpr size_t kEpilogueBytes = lnt::kBytes<kD, kRows>;
  static constexpr size_t kBytes = kChainBytes > kEpilogueBytes ? kChainBytes : kEpilogueBytes;
  static_assert(kD % kWarp == 0, "kD: a multiple of 32 (mma.sync's k; LayerNorm's lanes)");
  static_assert(sizeof(bf16) * kXElems % 16 == 0 && sizeof(bf16) * kW1Elems % 16 == 0 &&
                    sizeof(bf16) * kStageElems % 16 == 0,
                "16-byte aligned tiles");
  static_assert(kRows % ln::kBlockRows == 0 && ln::kWarps == kWarps, "a CTA's rows are whole LayerNorm blocks");
};

struct Params {
  int64_t n = 0;             // rows
  int hidden = 0;            // a multiple of kChunk
  const bf16* w1 = nullptr;  // [kD, hidden]
  const bf16* w2 = nullptr;  // [hidden, kD]
  // The block's input x [n, kD] (fp32), its LayerNorm's gamma [kD], and the row statistics mean and
  // rstd [n] (the forward writes them, the backward reads them).
  const float* x = nullptr;
  const float* gamma = nullptr;
  float* mean = nullptr;
  float* rstd = nullptr;
  // Forward.
  const float* beta = nullptr;  // [kD]
  const bf16* b1 = nullptr;     // [hidden]
  const float* b2 = nullptr;    // [kD], or null
  bf16* h = nullptr;            // [n, kD]: LayerNorm's output
  bf16* u = nullptr;            // [n, hidden]
  bf16* g = nullptr;            // [n, hidden]
  float* y = nullptr;           // [n, kD]
  // Backward.
  const bf16* ds = nullptr;    // [n, kD]: y's gradient, in bf16
  const bf16* u_in = nullptr;  // [n, hidden]: the forward's u
  bf16* du = nullptr;          // [n, hidden]
  float* dx = nullptr;         // [n, kD]: LayerNorm's input gradient is added to it
  float* g_part = nullptr;     // [ceil(n / ln::kBlockRows), kD]: the blocks' sums of dh xhat
  float* b_part = nullptr;     // and of dh
};

__device__ __forceinline__ float Bf16Value(bf16 bits) { return Storage<ElementType::kBFloat16>::ToFloat(bits); }
__device__ __forceinline__ bf16 Bf16Of(float v) { return Storage<ElementType::kBFloat16>::FromFloat(v); }

template <int kD, bool kForward>
__global__ void __launch_bounds__(kThreads, 2) FfnChainKernel(const Params p) {
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
  // Chunk c's weights go to stage c % 2: chunk c + 1's copies are in flight while chunk c is used.
  const auto stage = [&](int c0) {
    bf16* w1s = xs + L::kXElems + ((c0 / kChunk) % 2) * L::kStageElems;
    bf16* w2s = w1s + L::kW1Elems;
    for (int i = static_cast<int>(threadIdx.x); i < kD * (kChunk / 8); i += kThreads) {
      const int r = i / (kChunk / 8), c = i % (kChunk / 8);
      CopyAsync16(w1s + r * L::kLdW1 + c * 8, p.w1 + static_cast<int64_t>(r) * p.hidden + c0 + c * 8);
    }
    for (int i = static_cast<int>(threadIdx.x); i < kChunk * (kD / 8); i += kThreads) {
      const int r = i / (kD / 8), c = i % (kD / 8);
      CopyAsync16(w2s + r * L::kLdX + c * 8, p.w2 + static_cast<int64_t>(c0 + r) * kD + c * 8);
    }
    CopyAsyncCommit();
  };
  stage(0);  // the first chunk's weights load while the X tile is formed
  if constexpr (kForward) {
    lnt::NormalizeRowsToTile<kD>(p.x, p.gamma, p.beta, p.n, tile0, xs, L::kLdX, p.h, p.mean, p.rstd);
  } else {
    LoadRowsZeroFill<kRows, kD, kThreads>(xs, L::kLdX, p.ds + tile0 * kD, kD, valid);
  }
  // The lane's two rows in the C layout, within the tile and in X.
  const int r_lo = warp * 16 + lane.g, r_hi = r_lo + 8;
  const bool in_lo = r_lo < valid, in_hi = r_hi < valid;
  const int64_t row_lo = tile0 + r_lo, row_hi = tile0 + r_hi;

  float acc[kOutTiles][4] = {};
  for (int c0 = 0; c0 < p.hidden; c0 += kChunk) {
    CopyAsyncWait<0>();  // this thread's copies of chunk c0 have landed
    // Every thread's copies of the chunk (and the X tile) are in, and every warp is done with the last
    // chunk, whose stage the next chunk's copies take.
    __syncthreads();
    if (c0 + kChunk < p.hidden) stage(c0 + kChunk);
    const bf16* w1s = xs + L::kXElems + ((c0 / kChunk) % 2) * L::kStageElems;
    const bf16* w2s = w1s + L::kW1Elems;

    // First product, the warp's 16 x kChunk block: forward h W1[:, chunk] (W1's chunk stored [k][n]);
    // backward ds W2[chunk, :]^T (W2's chunk stored [n][k]).
    float hid[kHiddenTiles][4] = {};
#pragma unroll
    for (int k0 = 0; k0 < kD; k0 += 16) {
      uint32_t a[4];
      LoadA(xs, L::kLdX, warp * 16, k0, a);
#pragma unroll
      for (int t = 0; t < kHiddenTiles; t += 2) {
        uint32_t b_lo[2], b_hi[2];
        if constexpr (kForward) {
          LoadBPairFromCols(w1s, L::kLdW1, k0, t * 8, b_lo, b_hi);
        } else {
          LoadBPairFromRows(w2s, L::kLdX, t * 8, k0, b_lo, b_hi);
        }
        Mma16816<kBf16>(hid[t], a, b_lo);
        Mma16816<kBf16>(hid[t + 1], a, b_hi);
      }
    }

    // The pointwise step on the lane's values (rows r_lo, r_hi; columns 2 lane.t, +1 of each n-tile),
    // its bf16 results stored and packed as the second product's A fragments: n-tiles 2j and 2j + 1
    // are k-step j's columns 0-7 and 8-15.
    uint32_t a2[kHiddenTiles / 2][4];
#pragma unroll
    for (int t = 0; t < kHiddenTiles; ++t) {
      const int col = c0 + t * 8 + 2 * lane.t;
      bf16 v[4];
      if constexpr (kForward) {
        const float bias0 = Bf16Value(p.b1[col]), bias1 = Bf16Value(p.b1[col + 1]);
        bf16 u[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          u[e] = Bf16Of(__fadd_rn(hid[t][e], e % 2 == 0 ? bias0 : bias1));
          v[e] = Bf16Of(GeluOf(Bf16Value(u[e])));
        }
        if (in_lo) {
          *reinterpret_cast<uint32_t*>(p.u + row_lo * p.hidden + col) = PackHalves(u[0], u[1]);
          *reinterpret_cast<uint32_t*>(p.g + row_lo * p.hidden + col) = PackHalves(v[0], v[1]);
        }
        if (in_hi) {
          *reinterpret_cast<uint32_t*>(p.u + row_hi * p.hidden + col) = PackHalves(u[2], u[3]);
          *reinterpret_cast<uint32_t*>(p.g + row_hi * p.hidden + col) = PackHalves(v[2], v[3]);
        }
      } else {
        const uint32_t u_lo = in_lo ? *reinterpret_cast<const uint32_t*>(p.u_in + row_lo * p.hidden + col) : 0u;
        const uint32_t u_hi = in_hi ? *reinterpret_cast<const uint32_t*>(p.u_in + row_hi * p.hidden + col) : 0u;
        const bf16 u[4] = {static_cast<bf16>(u_lo & 0xFFFFu), static_cast<bf16>(u_lo >> 16),
                           static_cast<bf16>(u_hi & 0xFFFFu), static_cast<bf16>(u_hi >> 16)};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float dg = Bf16Value(Bf16Of(hid[t][e]));
          v[e] = Bf16Of(__fmul_rn(dg, GeluGradOf(Bf16Value(u[e]))));
        }
        if (in_lo) *reinterpret_cast<uint32_t*>(p.du + row_lo * p.hidden + col) = PackHalves(v[0], v[1]);
        if (in_hi) *reinterpret_cast<uint32_t*>(p.du + row_hi * p.hidden + col) = PackHalves(v[2], v[3]);
      }
      a2[t / 2][(t % 2) * 2] = PackHalves(v[0], v[1]);
      a2[t / 2][(t % 2) * 2 + 1] = PackHalves(v[2], v[3]);
    }

    // Second product: the block times the chunk's rows of B [hidden][kD]: forward W2 (W2's chunk
    // stored [k][n]); backward W1^T (W1's chunk stored [n][k]).
#pragma unroll
    for (int j = 0; j < kHiddenTiles / 2; ++j) {
#pragma unroll
      for (int t = 0; t < kOutTiles; t += 2) {
        uint32_t b_lo[2], b_hi[2];
        if constexpr (kForward) {
          LoadBPairFromCols(w2s, L::kLdX, j * 16, t * 8, b_lo, b_hi);
        } else {
          LoadBPairFromRows(w1s, L::kLdW1, t * 8, j * 16, b_lo, b_hi);
        }
        Mma16816<kBf16>(acc[t], a2[j], b_lo);
        Mma16816<kBf16>(acc[t + 1], a2[j], b_hi);
      }
    }
  }

  if constexpr (kForward) {
    // y = (acc + b2) + x, fp32 pairs.
#pragma unroll
    for (int t = 0; t < kOutTiles; ++t) {
      const int col = t * 8 + 2 * lane.t;
      float lo0 = acc[t][0], lo1 = acc[t][1], hi0 = acc[t][2], hi1 = acc[t][3];
      if (p.b2 != nullptr) {
        lo0 = __fadd_rn(lo0, p.b2[col]);
        lo1 = __fadd_rn(lo1, p.b2[col + 1]);
        hi0 = __fadd_rn(hi0, p.b2[col]);
        hi1 = __fadd_rn(hi1, p.b2[col + 1]);
      }
      if (in_lo) {
        const float* xr = p.x + row_lo * kD + col;
        *reinterpret_cast<float2*>(p.y + row_lo * kD + col) = make_float2(__fadd_rn(lo0, xr[0]), __fadd_rn(lo1, xr[1]));
      }
      if (in_hi) {
        const float* xr = p.x + row_hi * kD + col;
        *reinterpret_cast<float2*>(p.y + row_hi * kD + col) = make_float2(__fadd_rn(hi0, xr[0]), __fadd_rn(hi1, xr[1]));
      }
    }
  } else {
    // LayerNorm's backward of dh, the accumulators (the memory is the epilogue's once every warp is
    // done with the weights and the X tile).
    lnt::Args a;
    a.n = p.n;
    a.x = p.x;
    a.gamma = p.gamma;
    a.mean = p.mean;
    a.rstd = p.rstd;
    a.dx = p.dx;
    a.g_part = p.g_part;
    a.b_part = p.b_part;
    lnt::LayerNormBackwardOfTile<kD, kRows>(acc, tile0, a, smem);
  }
}

}  // namespace gemtb::gpu::train::ffn

#endif  // GEMTB_GPU_TRAIN_FFN_FUSED_KERNELS_CUH_
