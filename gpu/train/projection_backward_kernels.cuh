// The input gradient of an attention block's projections that read one LayerNorm's output, with that
// LayerNorm's backward, in one kernel: dh = sum over sources s of dy_s W_s^T (the query, key and value
// projections of a self-attention block, or the query projection alone), then LayerNorm's backward of
// dh added to dx. Device code only, launched by projection_backward.cu and compiled by a host compiler
// for the CPU emulation (tests/gpu/emulation, through its cuda_shim.h).
//
// A CTA takes kRows rows; each of its kWarps warps owns 16 of them and keeps their 16 x kD block of
// dh in mma.sync accumulators. Per source the CTA stages its rows of dy_s and the whole W_s [kD][kD]
// (row-major [in][out]: B[k][n] = W_s[n][k], B's columns are the tile's rows) in shared memory, and
// each warp adds its rows' product, k in increasing steps, sources in order. The epilogue is
// layer_norm_tile.cuh's. Fixed summation orders: the same bytes on every run.
#ifndef GEMTB_GPU_TRAIN_PROJECTION_BACKWARD_KERNELS_CUH_
#define GEMTB_GPU_TRAIN_PROJECTION_BACKWARD_KERNELS_CUH_

#include <cstddef>
#include <cstdint>

#include "gpu/common/dependent_launch.cuh"
#include "gpu/common/mma.cuh"
#include "gpu/common/tile_io.cuh"
#include "gpu/train/layer_norm_tile.cuh"
#include "model/common/element_type.h"

namespace gemtb::gpu::train::proj {

using bf16 = uint16_t;  // bf16 bit patterns

using lnt::kRows;  // the CTA shape: layer_norm_tile.cuh's
using lnt::kThreads;
using lnt::kWarp;
using lnt::kWarps;
constexpr int kMaxSources = 3;

// Shared memory: the rows of dy_s [kRows][kLd] and W_s [kD][kLd] (kLd = kD + 8: ldmatrix's and the
// A loads' rows in distinct banks); the epilogue's after the last source.
template <int kD>
struct Layout {
  static constexpr int kLd = kD + 8;
  static constexpr size_t kDyElems = static_cast<size_t>(kRows) * kLd;
  static constexpr size_t kWElems = static_cast<size_t>(kD) * kLd;
  static constexpr size_t kMainBytes = sizeof(bf16) * (kDyElems + kWElems);
  static constexpr size_t kEpilogueBytes = lnt::kBytes<kD>;
  static constexpr size_t kBytes = kMainBytes > kEpilogueBytes ? kMainBytes : kEpilogueBytes;
  static_assert(kD % 32 == 0, "kD: a multiple of 32");
  static_assert(sizeof(bf16) * kDyElems % 16 == 0, "16-byte aligned tiles");
};

struct Params {
  int sources = 0;                   // 1 .. kMaxSources
  const bf16* dy[kMaxSources] = {};  // [n, kD] each
  const bf16* w[kMaxSources] = {};   // [kD, kD] each, row-major [in][out]
  lnt::Args ln;                      // the LayerNorm whose output the projections read (ln.n: the rows)
};

template <int kD>
__global__ void __launch_bounds__(kThreads, 2) ProjectionsBackwardKernel(const Params p) {
  AwaitPriorGrids();
  using L = Layout<kD>;
  constexpr ElementType kBf16 = ElementType::kBFloat16;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* dys = reinterpret_cast<bf16*>(smem);
  bf16* ws = dys + L::kDyElems;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int64_t tile0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int valid = static_cast<int>(p.ln.n - tile0 < kRows ? p.ln.n - tile0 : kRows);

  float acc[kD / 8][4] = {};
  for (int s = 0; s < p.sources; ++s) {
    __syncthreads();  // every warp is done with the last source's tiles
    LoadRowsZeroFill<kRows, kD, kThreads>(dys, L::kLd, p.dy[s] + tile0 * kD, kD, valid);
    LoadRowsZeroFill<kD, kD, kThreads>(ws, L::kLd, p.w[s], kD, kD);
    __syncthreads();
#pragma unroll
    for (int k0 = 0; k0 < kD; k0 += 16) {
      uint32_t a[4];
      LoadA(dys, L::kLd, warp * 16, k0, a);
      // W_s's rows are B's columns (B[k][n] = W_s[n][k]).
#pragma unroll
      for (int t = 0; t < kD / 8; t += 2) {
        uint32_t b_lo[2], b_hi[2];
        LoadBPairFromRows(ws, L::kLd, t * 8, k0, b_lo, b_hi);
        Mma16816<kBf16>(acc[t], a, b_lo);
        Mma16816<kBf16>(acc[t + 1], a, b_hi);
      }
    }
  }
  lnt::LayerNormBackwardOfTile<kD>(acc, tile0, p.ln, smem);
}

}  // namespace gemtb::gpu::train::proj

#endif  // GEMTB_GPU_TRAIN_PROJECTION_BACKWARD_KERNELS_CUH_
