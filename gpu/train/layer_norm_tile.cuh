// LayerNorm at the ends of the fused kernels that take a CTA's tile of rows through products on
// mma.sync (ffn_fused_kernels.cuh, attention_input_kernels.cuh, projection_backward_kernels.cuh):
// forward, the rows normalised into the tile of bf16 rows the first product reads (LayerNormForward's
// operations and bytes); backward, over a tile whose gradient dh sits in the warps' accumulators
// (warp w holding rows [16 w, 16 w + 16) as kD / 8 C tiles). dh is staged in shared memory and taken as
// layer_norm_kernels.cuh's fused backward takes its rows (blocks of ln::kBlockRows rows, ln::kRowsPerWarp
// rows a warp, the same row functions): given the same dh, LayerNormBackward's bytes. Device code, also
// compiled by a host compiler for the CPU emulation.
#ifndef GEMTB_GPU_TRAIN_LAYER_NORM_TILE_CUH_
#define GEMTB_GPU_TRAIN_LAYER_NORM_TILE_CUH_

#include <cstddef>
#include <cstdint>

#include "gpu/common/mma.cuh"
#include "gpu/train/layer_norm_kernels.cuh"
#include "model/common/element_type.h"

namespace gemtb::gpu::train::lnt {

// The CTA shape of the kernels these functions end (and begin): kWarps warps, LayerNorm's block of
// warps, each owning 16 rows of the CTA's kRows (one m16 tile of mma.sync).
constexpr int kWarp = 32;
constexpr int kWarps = ln::kWarps;
constexpr int kThreads = kWarps * kWarp;
constexpr int kRows = 16 * kWarps;
static_assert(kRows % ln::kBlockRows == 0, "a CTA's rows are whole LayerNorm blocks");

// The row functions below take a warp's rows kRowGroup at a time, their loads issued before any of
// them is reduced: a fused kernel's CTA holds few warps (two CTAs of 8 an SM), and one row at a time
// would leave each warp waiting on its loads. Larger groups spill the d = 128 feed-forward kernels.
constexpr int kRowGroup = 2;
static_assert(16 % kRowGroup == 0 && ln::kRowsPerWarp % kRowGroup == 0, "whole groups of rows");

// Rows [tile0 + 16 warp, + 16) of x [n, kD] normalised by the warp (RowStats and Normalized, per row:
// LayerNormForward's bytes), rounded to bf16 into rows 16 warp .. of the tile `xs` (rows ld elements
// apart) and into h [n, kD], the statistics into mean and rstd [n]; rows past n are zeros in the tile.
// The warp loads kRowGroup rows before it reduces any of them.
template <int kD>
__device__ __forceinline__ void NormalizeRowsToTile(const float* x, const float* gamma, const float* beta, int64_t n,
                                                    int64_t tile0, uint16_t* xs, int ld, uint16_t* h, float* mean,
                                                    float* rstd) {
  constexpr int kCols = kD / 32;  // lane l holds columns l, l + 32, ...
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  for (int r0 = warp * 16; r0 < warp * 16 + 16; r0 += kRowGroup) {
    float v[kRowGroup][kCols];
#pragma unroll
    for (int j = 0; j < kRowGroup; ++j) {
      const int64_t row = tile0 + r0 + j;
#pragma unroll
      for (int k = 0; k < kCols; ++k) v[j][k] = row < n ? x[row * kD + lane + 32 * k] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kRowGroup; ++j) {
      uint16_t* xrow = xs + (r0 + j) * ld;
      const int64_t row = tile0 + r0 + j;
      if (row >= n) {
#pragma unroll
        for (int k = 0; k < kCols; ++k) xrow[lane + 32 * k] = 0;
        continue;
      }
      float m, s;
      ln::RowStats(
          kD, lane, [&](int i) { return v[j][(i - lane) / 32]; }, m, s);
#pragma unroll
      for (int k = 0; k < kCols; ++k) {
        const uint16_t e = Storage<ElementType::kBFloat16>::FromFloat(
            ln::Normalized(v[j][k], m, s, gamma[lane + 32 * k], beta[lane + 32 * k]));
        xrow[lane + 32 * k] = e;
        h[row * kD + lane + 32 * k] = e;
      }
      if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
      }
    }
  }
}

// The LayerNorm whose backward the tile feeds: its input x [n, kD] and gamma [kD], the forward's row
// statistics [n]; dx [n, kD] is added to, and each block of ln::kBlockRows rows writes its partial rows
// of dgamma's and dbeta's sums (g_part, b_part [ceil(n / ln::kBlockRows), kD]).
struct Args {
  int64_t n = 0;
  const float* x = nullptr;
  const float* gamma = nullptr;
  const float* mean = nullptr;
  const float* rstd = nullptr;
  float* dx = nullptr;
  float* g_part = nullptr;
  float* b_part = nullptr;
};

// Shared memory the epilogue takes: dh [kRows][kD + 8] fp32, then the warps' column sums.
template <int kD>
constexpr size_t kBytes = sizeof(float) * kRows * (kD + 8) + ln::FusedSharedBytes(kD);

// Called by every thread of the CTA (ln::kWarps warps) once its warps are done with `smem`'s other use;
// the tile's rows are [tile0, tile0 + kRows) of n.
template <int kD>
__device__ __forceinline__ void LayerNormBackwardOfTile(const float (&acc)[kD / 8][4], int64_t tile0, const Args& a,
                                                        unsigned char* smem) {
  static_assert(kD % 32 == 0, "whole lanes of columns");
  constexpr int kLd = kD + 8;
  constexpr int kCols = kD / 32;
  float* dh = reinterpret_cast<float*>(smem);
  float* sums = dh + kRows * kLd;
  const int warp = static_cast<int>(threadIdx.x) / 32, l = static_cast<int>(threadIdx.x) % 32;
  const LaneCoords lane = Lane();
  const int r_lo = warp * 16 + lane.g, r_hi = r_lo + 8;
  __syncthreads();  // every warp is done with the memory's other use
#pragma unroll
  for (int t = 0; t < kD / 8; ++t) {
    const int col = t * 8 + 2 * lane.t;
    *reinterpret_cast<float2*>(dh + r_lo * kLd + col) = make_float2(acc[t][0], acc[t][1]);
    *reinterpret_cast<float2*>(dh + r_hi * kLd + col) = make_float2(acc[t][2], acc[t][3]);
  }
  for (int block = 0; block < kRows / ln::kBlockRows; ++block) {
    const int64_t first = tile0 + block * ln::kBlockRows;
    if (first >= a.n) break;  // the same for the whole CTA
    __syncthreads();          // dh is complete
    float g_acc[kCols], b_acc[kCols];
#pragma unroll
    for (int k = 0; k < kCols; ++k) g_acc[k] = b_acc[k] = 0.0f;
    // The warp's rows in groups of kRowGroup, each row then as BackwardRowOf.
    for (int r0 = 0; r0 < ln::kRowsPerWarp; r0 += kRowGroup) {
      float x[kRowGroup][kCols], dx_in[kRowGroup][kCols], m[kRowGroup], s[kRowGroup];
#pragma unroll
      for (int j = 0; j < kRowGroup; ++j) {
        const int64_t row = tile0 + block * ln::kBlockRows + warp * ln::kRowsPerWarp + r0 + j;
        const bool in = row < a.n;
        m[j] = in ? a.mean[row] : 0.0f;
        s[j] = in ? a.rstd[row] : 0.0f;
#pragma unroll
        for (int k = 0; k < kCols; ++k) {
          x[j][k] = in ? a.x[row * kD + l + 32 * k] : 0.0f;
          dx_in[j][k] = in ? a.dx[row * kD + l + 32 * k] : 0.0f;
        }
      }
#pragma unroll
      for (int j = 0; j < kRowGroup; ++j) {
        const int tr = block * ln::kBlockRows + warp * ln::kRowsPerWarp + r0 + j;
        const int64_t row = tile0 + tr;
        if (row < a.n) {
          ln::BackwardRowOf<kCols>(
              [&](int k, int) { return x[j][k]; }, [&](int, int i) { return a.gamma[i]; }, m[j], s[j],
              [&](int, int i) { return dh[tr * kLd + i]; }, kD, l,
              [&](int k, int i, float g) { a.dx[row * kD + i] = __fadd_rn(dx_in[j][k], g); }, g_acc, b_acc);
        }
      }
    }
    const int64_t part = first / ln::kBlockRows;
    ln::BlockPartials<kCols>(sums, kD, warp, l, g_acc, b_acc, a.g_part + part * kD, a.b_part + part * kD);
  }
}

}  // namespace gemtb::gpu::train::lnt

#endif  // GEMTB_GPU_TRAIN_LAYER_NORM_TILE_CUH_
