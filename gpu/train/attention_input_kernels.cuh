// An attention block's input side in one kernel: LayerNorm of the block's input rows, the query (and,
// for a self-attention block, key and value) projections of the normalised rows with their biases,
// and the QK-norm (with RoPE where the block applies it) of the projected queries and keys. Device
// code only, launched by attention_input.cu and compiled by a host compiler for the CPU emulation
// (tests/gpu/emulation, through its cuda_shim.h).
//
// A CTA takes kRows rows; each warp normalises its 16 rows into the CTA's tile of bf16 rows
// (layer_norm_tile.cuh: LayerNormForward's bytes) and owns them through the products. Per projection
// the CTA stages its weight [kD][kD] in shared memory (cp.async, into one of two stages: the next
// projection's weight loads while the warps compute this one's, the first while the rows are
// normalised), each warp forms its rows' 16 x kD product in
// mma.sync accumulators (k in increasing steps), adds the bias and rounds to bf16: y, stored. Where
// the projection is normed, the lane's own values of each head then give the head's RMS norm and
// RoPE with qk_norm_rope_kernels.cuh's operations in its order: that kernel's lane g of a head's
// 8-lane group sums elements g, g + 8, ... in order and the group meets by a butterfly over offsets 4,
// 2, 1; here the lane holding columns 2t, 2t + 1 of each 8-column tile (mma's C layout) keeps those two
// lanes' sums (elements 2t + 8j and 2t + 1 + 8j, j in order) and the butterfly's offsets 4 and 2 are
// the quad's shuffles over t ^ 2 and t ^ 1, offset 1 its own pair. So, given the same y, the normed
// rows and inverse RMS are QkNormRopeForward's (HeadRmsNormForward's without RoPE) bytes.
#ifndef GEMTB_GPU_TRAIN_ATTENTION_INPUT_KERNELS_CUH_
#define GEMTB_GPU_TRAIN_ATTENTION_INPUT_KERNELS_CUH_

#include <cstddef>
#include <cstdint>

#include "gpu/common/dependent_launch.cuh"
#include "gpu/common/mma.cuh"
#include "gpu/common/tile_io.cuh"
#include "gpu/train/layer_norm_tile.cuh"
#include "model/common/element_type.h"

namespace gemtb::gpu::train::ain {

using bf16 = uint16_t;  // bf16 bit patterns

using lnt::kRows;  // the CTA shape: layer_norm_tile.cuh's
using lnt::kThreads;
using lnt::kWarp;
using lnt::kWarps;
constexpr int kMaxProjections = 3;
constexpr float kEps = 1e-6f;  // the QK-norm's

// Shared memory: the normalised rows [kRows][kLd] and two stages of a weight [kD][kLd], kLd = kD + 8.
template <int kD>
struct Layout {
  static constexpr int kLd = kD + 8;
  static constexpr size_t kXElems = static_cast<size_t>(kRows) * kLd;
  static constexpr size_t kWElems = static_cast<size_t>(kD) * kLd;
  static constexpr size_t kBytes = sizeof(bf16) * (kXElems + 2 * kWElems);
  static_assert(kD % 32 == 0, "kD: a multiple of 32");
};

struct Projection {
  const bf16* w = nullptr;     // [kD, kD], row-major [in][out]
  const bf16* bias = nullptr;  // [kD]
  bf16* y = nullptr;           // [n, kD]
  bf16* normed = nullptr;      // [n, kD], the QK-norm's output; null: not normed (the values)
  float* inv = nullptr;        // [n, heads]: the QK-norm's inverse RMS per row and head
};

struct Params {
  int64_t n = 0;
  // LayerNorm: x [n, kD] fp32, gamma and beta [kD]; h [n, kD] bf16 and the row statistics written.
  const float* x = nullptr;
  const float* gamma = nullptr;
  const float* beta = nullptr;
  bf16* h = nullptr;
  float* mean = nullptr;
  float* rstd = nullptr;
  int projections = 0;  // 1 .. kMaxProjections
  Projection proj[kMaxProjections];
  // RoPE of the normed rows (null table: none): row r sits at position r - offsets[b] of its sample
  // b (offsets [batch + 1]); table [positions, kDh], sin in columns [0, kDh/2), cos in [kDh/2, kDh).
  const float* table = nullptr;
  const int32_t* offsets = nullptr;
  int64_t batch = 0;
};

// The position of row `row` in its sample: the last b with offsets[b] <= row, by bisection.
__device__ __forceinline__ int64_t PositionOf(const int32_t* offsets, int64_t batch, int64_t row) {
  int64_t lo = 0, hi = batch;  // offsets[lo] <= row < offsets[hi]
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (offsets[mid] <= row) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return row - offsets[lo];
}

// The QK-norm (and RoPE) of the lane's values of one row: v[j][e] the row's bf16 value at column
// 8 j + 2 t + e, j over the row's kD / 8 tiles. Writes the normed pair of each tile to `out` (the
// row's kD values) and, from the quad's first lane, the heads' inverse RMS to inv (the row's heads).
template <int kD, int kDh>
__device__ __forceinline__ void NormRow(const float (&v)[kD / 8][2], const float* trow, bool store, bf16* out,
                                        float* inv) {
  constexpr int kTiles = kDh / 8, kHalf = kDh / 2;
  const int t = Lane().t;
#pragma unroll
  for (int h0 = 0; h0 < kD / 8; h0 += kTiles) {
    // The two lanes' sums of the 8-lane layout (elements 2t + 8j, then 2t + 1 + 8j, j in order).
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      s0 = __fadd_rn(s0, __fmul_rn(v[h0 + j][0], v[h0 + j][0]));
      s1 = __fadd_rn(s1, __fmul_rn(v[h0 + j][1], v[h0 + j][1]));
    }
    // The butterfly: offset 4 (lane t ^ 2), offset 2 (lane t ^ 1), offset 1 (the pair).
    s0 = __fadd_rn(s0, __shfl_xor_sync(0xffffffffu, s0, 2));
    s1 = __fadd_rn(s1, __shfl_xor_sync(0xffffffffu, s1, 2));
    s0 = __fadd_rn(s0, __shfl_xor_sync(0xffffffffu, s0, 1));
    s1 = __fadd_rn(s1, __shfl_xor_sync(0xffffffffu, s1, 1));
    const float ss = __fadd_rn(s0, s1);
    const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, static_cast<float>(kDh)), kEps)));
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      const float y0 = __fmul_rn(v[h0 + j][0], r), y1 = __fmul_rn(v[h0 + j][1], r);
      float o0 = y0, o1 = y1;
      if (trow != nullptr) {
        const int m = 4 * j + t;  // the pair (2m, 2m + 1) within the head
        const float sn = trow[m], cs = trow[kHalf + m];
        o0 = __fsub_rn(__fmul_rn(y0, cs), __fmul_rn(y1, sn));
        o1 = __fadd_rn(__fmul_rn(y1, cs), __fmul_rn(y0, sn));
      }
      if (store) {
        *reinterpret_cast<uint32_t*>(out + (h0 + j) * 8 + 2 * t) =
            PackHalves(Storage<ElementType::kBFloat16>::FromFloat(o0), Storage<ElementType::kBFloat16>::FromFloat(o1));
      }
    }
    if (store && t == 0) inv[h0 / kTiles] = r;
  }
}

template <int kD, int kDh>
__global__ void __launch_bounds__(kThreads, 2) AttentionInputKernel(const Params p) {
  AwaitPriorGrids();
  static_assert(kDh % 16 == 0 && kDh <= 64 && kD % kDh == 0, "heads of 16, 32 or 64 columns");
  using L = Layout<kD>;
  constexpr ElementType kBf16 = ElementType::kBFloat16;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* xs = reinterpret_cast<bf16*>(smem);
  // Projection s's weight goes to stage s % 2.
  const auto w_stage = [&](int j) { return xs + L::kXElems + (j % 2) * L::kWElems; };
  const auto stage = [&](int j) {
    CopyRowsAsync<kD, kD, kThreads>(w_stage(j), L::kLd, p.proj[j].w, kD);
    CopyAsyncCommit();
  };
  stage(0);
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const LaneCoords lc = Lane();
  const int64_t tile0 = static_cast<int64_t>(blockIdx.x) * kRows;
  lnt::NormalizeRowsToTile<kD>(p.x, p.gamma, p.beta, p.n, tile0, xs, L::kLd, p.h, p.mean, p.rstd);
  const int64_t rows[2] = {tile0 + warp * 16 + lc.g, tile0 + warp * 16 + lc.g + 8};
  const bool in[2] = {rows[0] < p.n, rows[1] < p.n};
  const float* trow[2] = {nullptr, nullptr};
  if (p.table != nullptr) {
    for (int i = 0; i < 2; ++i) {
      trow[i] = p.table + (in[i] ? PositionOf(p.offsets, p.batch, rows[i]) : 0) * kDh;
    }
  }
  constexpr int kHeads = kD / kDh;

  for (int s = 0; s < p.projections; ++s) {
    const Projection& pr = p.proj[s];
    CopyAsyncWait<0>();  // this thread's copies of the weight have landed
    // Every thread's copies are in (and the tile is complete), and every warp is done with the last
    // projection, whose stage the next weight's copies take.
    __syncthreads();
    if (s + 1 < p.projections) stage(s + 1);
    const bf16* ws = w_stage(s);
    float acc[kD / 8][4] = {};
#pragma unroll
    for (int k0 = 0; k0 < kD; k0 += 16) {
      uint32_t a[4];
      LoadA(xs, L::kLd, warp * 16, k0, a);
      // The weight stored [in][out] = [k][n]: its rows are B's rows.
#pragma unroll
      for (int t = 0; t < kD / 8; t += 2) {
        uint32_t b_lo[2], b_hi[2];
        LoadBPairFromCols(ws, L::kLd, k0, t * 8, b_lo, b_hi);
        Mma16816<kBf16>(acc[t], a, b_lo);
        Mma16816<kBf16>(acc[t + 1], a, b_hi);
      }
    }
    // y = bf16(acc + bias), stored; its values kept (widened) for the norm.
    float v[2][kD / 8][2];
#pragma unroll
    for (int t = 0; t < kD / 8; ++t) {
      const int col = t * 8 + 2 * lc.t;
      const float b0 = Storage<kBf16>::ToFloat(pr.bias[col]), b1 = Storage<kBf16>::ToFloat(pr.bias[col + 1]);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const bf16 y0 = Storage<kBf16>::FromFloat(__fadd_rn(acc[t][2 * i], b0));
        const bf16 y1 = Storage<kBf16>::FromFloat(__fadd_rn(acc[t][2 * i + 1], b1));
        if (in[i]) *reinterpret_cast<uint32_t*>(pr.y + rows[i] * kD + col) = PackHalves(y0, y1);
        v[i][t][0] = Storage<kBf16>::ToFloat(y0);
        v[i][t][1] = Storage<kBf16>::ToFloat(y1);
      }
    }
    if (pr.normed == nullptr) continue;  // the same for the whole CTA
#pragma unroll  // v[i] in registers: a run-time index would put v in local memory
    for (int i = 0; i < 2; ++i) {
      const int64_t row = in[i] ? rows[i] : 0;
      NormRow<kD, kDh>(v[i], trow[i], in[i], pr.normed + row * kD, pr.inv + row * kHeads);
    }
  }
}

}  // namespace gemtb::gpu::train::ain

#endif  // GEMTB_GPU_TRAIN_ATTENTION_INPUT_KERNELS_CUH_
