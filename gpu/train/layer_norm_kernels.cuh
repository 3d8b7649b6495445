// layer_norm.h's LayerNorm as rows of one warp: the forward's statistics and normalised values (and the
// forward kernel of rows of at most kFusedMaxWidth values), and the fused backward over fp32 rows of at
// most kFusedMaxWidth values. Device code only, launched by layer_norm.cu, also inside the fused
// row-tile kernels (layer_norm_tile.cuh, whose LayerNorm is then these bytes), and built by a host
// compiler for the CPU fiber emulation (tests/gpu/emulation), where the explicitly rounded operations
// are the host's own IEEE fp32 operations.
//
// One pass reads x and dy once for both gradients: a block takes kBlockRows rows, each of its warps
// kRowsPerWarp consecutive ones. Per row the warp computes dx exactly as the unfused input kernel
// does (the same lane order, butterfly and operations: the same bytes), and each lane adds the row's
// dy xhat and dy to its columns' running sums (lane l holds columns l, l + 32, ...). The warps' sums
// meet in shared memory and are added in warp order into the block's partial row of dgamma and of
// dbeta, which ColumnSums then adds in block order. Against the unfused kernels (each block's 64 rows
// summed one after another) the parameter gradients are a re-association of the same terms (eight
// groups of eight rows), in a fixed order: the same bytes on every run. dy may be bf16 (widened
// exactly), and the kernel may hand the new dx on in bf16 (a third running sum, of the new dx, and its
// rows rounded to bf16): the next bf16 block's output gradient and its bias's partial sums.
#ifndef GEMTB_GPU_TRAIN_LAYER_NORM_KERNELS_CUH_
#define GEMTB_GPU_TRAIN_LAYER_NORM_KERNELS_CUH_

#include <cstdint>

#include "gpu/common/dependent_launch.cuh"
#include "gpu/common/mma.cuh"

namespace gemtb::gpu::train::ln {

constexpr int kWarp = 32;
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarp;
constexpr int kBlockRows = 64;  // model_kernels.h's kColumnSumsBlockRows: the partial rows' blocks
constexpr int kRowsPerWarp = kBlockRows / kWarps;
constexpr int kFusedMaxWidth = 512;  // 16 columns per lane; the warps' sums fill 32 KB of shared memory

// The fused kernel's shared memory: every warp's sums of dy xhat and of dy (and of the new dx where it
// hands dx on), [sums][kWarps][width] floats.
inline constexpr size_t FusedSharedBytes(int width, int sums = 2) {
  return sizeof(float) * sums * kWarps * static_cast<size_t>(width);
}

// The sum of one value per lane by a fixed butterfly: every lane ends with the same bits.
__device__ inline float LaneSum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

constexpr float kEps = 1e-5f;

// LayerNorm's forward statistics of one row of `width` values (x(i) gives value i), as one warp takes
// them: lane l sums columns l, l + 32, ... in order, the 32 lanes' sums meet by the butterfly; then the
// same for the squared deviations. Every lane ends with the same mean and rstd.
template <typename Load>
__device__ inline void RowStats(int width, int lane, const Load& x, float& mean, float& rstd) {
  float sum = 0.0f;
  for (int i = lane; i < width; i += kWarp) sum = __fadd_rn(sum, x(i));
  mean = __fdiv_rn(LaneSum(sum), static_cast<float>(width));
  float sq = 0.0f;
  for (int i = lane; i < width; i += kWarp) {
    const float d = __fsub_rn(x(i), mean);
    sq = __fadd_rn(sq, __fmul_rn(d, d));
  }
  const float var = __fdiv_rn(LaneSum(sq), static_cast<float>(width));
  rstd = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(var, kEps)));
}

// RowStats of a row held in registers, lane l holding columns l + 32 k (k < kCols, those below width)
// as x(k): the same operations in the same order, so the same bits.
template <int kCols, typename X>
__device__ inline void RowStatsOf(int width, int lane, const X& x, float& mean, float& rstd) {
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kCols; ++k) {
    if (lane + k * kWarp < width) sum = __fadd_rn(sum, x(k));
  }
  mean = __fdiv_rn(LaneSum(sum), static_cast<float>(width));
  float sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kCols; ++k) {
    if (lane + k * kWarp >= width) continue;
    const float d = __fsub_rn(x(k), mean);
    sq = __fadd_rn(sq, __fmul_rn(d, d));
  }
  const float var = __fdiv_rn(LaneSum(sq), static_cast<float>(width));
  rstd = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(var, kEps)));
}

// One normalised value: (x - mean) rstd gamma + beta, each operation rounded.
__device__ inline float Normalized(float x, float mean, float rstd, float gamma, float beta) {
  return __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(x, mean), rstd), gamma), beta);
}

// The backward of one row by one warp (lane l takes columns i = l + 32 k, k < kCols, those below
// `width`): x(k, i), dy(k, i) and gamma(k, i) give the row's values and the scale (from memory or the
// caller's registers), and dx(k, i, g) takes each input gradient g as the unfused input kernel
// computes it; the row's dy xhat and dy are added to the lane's running column sums.
template <int kCols, typename X, typename Gamma, typename Dy, typename Dx>
__device__ inline void BackwardRowOf(const X& x, const Gamma& gamma, float mean, float rstd, const Dy& dy, int width,
                                     int lane, const Dx& dx, float (&g_acc)[kCols], float (&b_acc)[kCols]) {
  float sum = 0.0f, sum_h = 0.0f;
#pragma unroll
  for (int k = 0; k < kCols; ++k) {
    const int i = lane + k * kWarp;
    if (i >= width) continue;
    const float d = dy(k, i);
    const float h = __fmul_rn(__fsub_rn(x(k, i), mean), rstd);
    const float dh = __fmul_rn(d, gamma(k, i));
    sum = __fadd_rn(sum, dh);
    sum_h = __fadd_rn(sum_h, __fmul_rn(dh, h));
    g_acc[k] = __fadd_rn(g_acc[k], __fmul_rn(d, h));
    b_acc[k] = __fadd_rn(b_acc[k], d);
  }
  sum = __fdiv_rn(LaneSum(sum), static_cast<float>(width));
  sum_h = __fdiv_rn(LaneSum(sum_h), static_cast<float>(width));
#pragma unroll
  for (int k = 0; k < kCols; ++k) {
    const int i = lane + k * kWarp;
    if (i >= width) continue;
    const float h = __fmul_rn(__fsub_rn(x(k, i), mean), rstd);
    const float dh = __fmul_rn(dy(k, i), gamma(k, i));
    dx(k, i, __fmul_rn(rstd, __fsub_rn(__fsub_rn(dh, sum), __fmul_rn(h, sum_h))));
  }
}

// A block's partial rows from its kWarps warps' column sums, kSums of them: acc(s, k) is sum s of the
// lane's column k, row(s) sum s's partial row [width]. The warps' sums meet in shared memory (`sums`,
// FusedSharedBytes(width, kSums)) and are added in warp order into the rows. Every thread of the block
// calls it; it begins and ends with a barrier, so that `sums` may be used again.
template <int kCols, int kSums, typename Acc, typename Row>
__device__ inline void BlockPartialsOf(float* sums, int width, int warp, int lane, const Acc& acc, const Row& row) {
  __syncthreads();
#pragma unroll
  for (int s = 0; s < kSums; ++s) {
#pragma unroll
    for (int k = 0; k < kCols; ++k) {
      const int i = lane + k * kWarp;
      if (i < width) sums[(s * kWarps + warp) * width + i] = acc(s, k);
    }
  }
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < width; i += kThreads) {
#pragma unroll
    for (int s = 0; s < kSums; ++s) {
      const float* of = sums + s * kWarps * width;
      float v = of[i];
      for (int w = 1; w < kWarps; ++w) v = __fadd_rn(v, of[w * width + i]);
      row(s)[i] = v;
    }
  }
  __syncthreads();
}

// BlockPartialsOf the sums of dy xhat and of dy into g_row and b_row.
template <int kCols>
__device__ inline void BlockPartials(float* sums, int width, int warp, int lane, const float (&g_acc)[kCols],
                                     const float (&b_acc)[kCols], float* g_row, float* b_row) {
  BlockPartialsOf<kCols, 2>(
      sums, width, warp, lane, [&](int s, int k) { return s == 0 ? g_acc[k] : b_acc[k]; },
      [&](int s) { return s == 0 ? g_row : b_row; });
}

// The rows a warp of the row-batched kernels (ForwardRowsKernel, BackwardFusedKernel) loads before it
// computes the first of them: several rows' loads in flight instead of one row's, each value read once.
template <int kCols>
__host__ __device__ constexpr int RowBatch() {
  return kCols >= 16 ? 1 : 16 / kCols;  // 4 rows at 4 columns a lane, 2 at 8, 1 at 16: 16 values an array
}
static_assert(kRowsPerWarp % RowBatch<4>() == 0 && kRowsPerWarp % RowBatch<8>() == 0, "whole batches");

// Values of fp32 rows, or of bf16 ones (uint16_t holding the bits: widened exactly, stored rounded to
// nearest even).
__device__ __forceinline__ float RowValue(const float* at) { return *at; }
__device__ __forceinline__ float RowValue(const uint16_t* at) { return Storage<ElementType::kBFloat16>::ToFloat(*at); }
__device__ __forceinline__ void SetRowValue(float* at, float v) { *at = v; }
__device__ __forceinline__ void SetRowValue(uint16_t* at, float v) {
  *at = Storage<ElementType::kBFloat16>::FromFloat(v);
}

// The forward of rows of at most 32 kCols values (T, TOut: float, or uint16_t for bf16): RowStatsOf and
// Normalized per row, so a row's bytes are those of a warp taking it alone (RowStats). Each warp takes
// RowBatch<kCols>() consecutive rows and loads all of them, and gamma and beta, into registers before
// it reduces any, instead of one row's loads in flight at a time. Blocks of kWarps warps.
template <int kCols>
inline unsigned ForwardRowsBlocks(int64_t n) {
  constexpr int64_t kRows = int64_t{kWarps} * RowBatch<kCols>();
  return static_cast<unsigned>((n + kRows - 1) / kRows);
}

template <int kCols, typename T, typename TOut>
__global__ void __launch_bounds__(kThreads)
    ForwardRowsKernel(const T* x, const float* gamma, const float* beta, int64_t n, int width, TOut* y,
                      float* mean_out, float* rstd_out) {
  AwaitPriorGrids();
  constexpr int kBatch = RowBatch<kCols>();
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kBatch;
  float v[kBatch][kCols], gam[kCols], bet[kCols];
#pragma unroll
  for (int b = 0; b < kBatch; ++b) {
    const int64_t row = first + b;
#pragma unroll
    for (int k = 0; k < kCols; ++k) {
      const int i = lane + k * kWarp;
      v[b][k] = row < n && i < width ? RowValue(x + row * width + i) : 0.0f;
    }
  }
#pragma unroll
  for (int k = 0; k < kCols; ++k) {
    const int i = lane + k * kWarp;
    gam[k] = i < width ? gamma[i] : 0.0f;
    bet[k] = i < width ? beta[i] : 0.0f;
  }
#pragma unroll
  for (int b = 0; b < kBatch; ++b) {
    const int64_t row = first + b;
    if (row >= n) break;
    float mean, rstd;
    RowStatsOf<kCols>(width, lane, [&](int k) { return v[b][k]; }, mean, rstd);
    TOut* yr = y + row * width;
#pragma unroll
    for (int k = 0; k < kCols; ++k) {
      const int i = lane + k * kWarp;
      if (i < width) SetRowValue(yr + i, Normalized(v[b][k], mean, rstd, gam[k], bet[k]));
    }
    if (lane == 0) {
      mean_out[row] = mean;
      rstd_out[row] = rstd;
    }
  }
}

// The backward's rows in batches of RowBatch<kCols>() rows: every load of a batch (x, dy, dx where
// accumulating, mean and rstd) is issued before the first row is computed (the row's second pass takes
// its values from registers). The values and operations are those of one row at a time: the same bytes.
template <int kCols>
struct RowValues {
  float x[kCols], dy[kCols], dx[kCols];
  float mean, rstd;
};

// Dy: float, or uint16_t holding bf16 bits.
template <int kCols, typename Dy>
__device__ inline void LoadRow(const float* __restrict__ x, const Dy* __restrict__ dy, const float* dx,
                               const float* __restrict__ mean, const float* __restrict__ rstd, int64_t row,
                               int width, int lane, bool accumulate, RowValues<kCols>& v) {
  const int64_t base = row * width;
#pragma unroll
  for (int k = 0; k < kCols; ++k) {
    const int i = lane + k * kWarp;
    v.x[k] = i < width ? x[base + i] : 0.0f;
    v.dy[k] = i < width ? RowValue(dy + base + i) : 0.0f;
    v.dx[k] = accumulate && i < width ? dx[base + i] : 0.0f;
  }
  v.mean = mean[row];
  v.rstd = rstd[row];
}

// Where the fused backward writes the new dx it hands on (layer_norm.h's Bf16Handoff): its rows
// [n, width] rounded to bf16 (bits), and the blocks' partial column sums of it (fp32, before the
// rounding) into part [gridDim.x, width], summed as dbeta's are (eight warps' sums of eight rows,
// added in warp order).
struct HandoffOut {
  uint16_t* rows = nullptr;
  float* part = nullptr;
};

// dx (written, or added to with accumulate) for rows [blockIdx.x * kBlockRows, + kBlockRows) of n, and
// the block's partial sums over them of dy xhat and dy into g_part and b_part [gridDim.x, width]; with
// kHandOn, the new dx handed on (`next`). width <= kCols * kWarp; dy fp32 or bf16 bits (Dy uint16_t).
template <int kCols, typename Dy = float, bool kHandOn = false>
__global__ void __launch_bounds__(kThreads)
    BackwardFusedKernel(const float* x, const float* gamma, const float* mean_in, const float* rstd_in, const Dy* dy,
                        int64_t n, int width, float* dx, bool accumulate, float* g_part, float* b_part,
                        HandoffOut next = {}) {
  AwaitPriorGrids();
  extern __shared__ float sums[];
  constexpr int kBatch = RowBatch<kCols>();
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  float g_acc[kCols], b_acc[kCols], e_acc[kCols], gam[kCols];
#pragma unroll
  for (int k = 0; k < kCols; ++k) {
    g_acc[k] = b_acc[k] = e_acc[k] = 0.0f;
    gam[k] = lane + k * kWarp < width ? gamma[lane + k * kWarp] : 0.0f;
  }
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kBlockRows + warp * kRowsPerWarp;
  for (int r0 = 0; r0 < kRowsPerWarp && first + r0 < n; r0 += kBatch) {
    RowValues<kCols> v[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (first + r0 + b < n) LoadRow<kCols>(x, dy, dx, mean_in, rstd_in, first + r0 + b, width, lane, accumulate, v[b]);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int64_t row = first + r0 + b;
      if (row >= n) break;
      float* dxr = dx + row * width;
      BackwardRowOf<kCols>([&](int k, int) { return v[b].x[k]; }, [&](int k, int) { return gam[k]; }, v[b].mean, v[b].rstd,
                           [&](int k, int) { return v[b].dy[k]; }, width, lane,
                           [&](int k, int i, float g) {
                             const float out = accumulate ? __fadd_rn(v[b].dx[k], g) : g;
                             dxr[i] = out;
                             if constexpr (kHandOn) {
                               SetRowValue(next.rows + row * width + i, out);
                               e_acc[k] = __fadd_rn(e_acc[k], out);
                             }
                           },
                           g_acc, b_acc);
    }
  }
  const int64_t at = static_cast<int64_t>(blockIdx.x) * width;
  if constexpr (kHandOn) {
    BlockPartialsOf<kCols, 3>(
        sums, width, warp, lane, [&](int s, int k) { return s == 0 ? g_acc[k] : s == 1 ? b_acc[k] : e_acc[k]; },
        [&](int s) { return (s == 0 ? g_part : s == 1 ? b_part : next.part) + at; });
  } else {
    BlockPartials<kCols>(sums, width, warp, lane, g_acc, b_acc, g_part + at, b_part + at);
  }
}

}  // namespace gemtb::gpu::train::ln

#endif  // GEMTB_GPU_TRAIN_LAYER_NORM_KERNELS_CUH_
