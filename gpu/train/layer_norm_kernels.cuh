// The fused backward of layer_norm.h's LayerNorm over fp32 rows of at most kFusedMaxWidth values:
// device code only, launched by layer_norm.cu and built by a host compiler for the CPU fiber
// emulation (tests/gpu/emulation), where the explicitly rounded operations are the host's own IEEE
// fp32 operations.
//
// One pass reads x and dy once for both gradients: a block takes kBlockRows rows, each of its warps
// kRowsPerWarp consecutive ones. Per row the warp computes dx exactly as the unfused input kernel
// does (the same lane order, butterfly and operations: the same bytes), and each lane adds the row's
// dy xhat and dy to its columns' running sums (lane l holds columns l, l + 32, ...). The warps' sums
// meet in shared memory and are added in warp order into the block's partial row of dgamma and of
// dbeta, which ColumnSums then adds in block order. Against the unfused kernels (each block's 64 rows
// summed one after another) the parameter gradients are a re-association of the same terms (eight
// groups of eight rows), in a fixed order: the same bytes on every run.
#ifndef GEMTB_GPU_TRAIN_LAYER_NORM_KERNELS_CUH_
#define GEMTB_GPU_TRAIN_LAYER_NORM_KERNELS_CUH_

#include <cstdint>

namespace gemtb::gpu::train::ln {

constexpr int kWarp = 32;
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarp;
constexpr int kBlockRows = 64;  // model_kernels.h's kColumnSumsBlockRows: the partial rows' blocks
constexpr int kRowsPerWarp = kBlockRows / kWarps;
constexpr int kFusedMaxWidth = 512;  // 16 columns per lane; the warps' sums fill 32 KB of shared memory

// The fused kernel's shared memory: every warp's sums of dy xhat and of dy, [2][kWarps][width] floats.
inline constexpr size_t FusedSharedBytes(int width) { return sizeof(float) * 2 * kWarps * static_cast<size_t>(width); }

// The sum of one value per lane by a fixed butterfly: every lane ends with the same bits.
__device__ inline float LaneSum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// dx (written, or added to with accumulate) for rows [blockIdx.x * kBlockRows, + kBlockRows) of n, and
// the block's partial sums over them of dy xhat and dy into g_part and b_part [gridDim.x, width].
// width <= kCols * kWarp.
template <int kCols>
__global__ void __launch_bounds__(kThreads)
    BackwardFusedKernel(const float* x, const float* gamma, const float* mean_in, const float* rstd_in, const float* dy,
                        int64_t n, int width, float* dx, bool accumulate, float* g_part, float* b_part) {
  extern __shared__ float sums[];
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  float g_acc[kCols], b_acc[kCols];
#pragma unroll
  for (int k = 0; k < kCols; ++k) g_acc[k] = b_acc[k] = 0.0f;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kBlockRows + warp * kRowsPerWarp;
  for (int r = 0; r < kRowsPerWarp && first + r < n; ++r) {
    const int64_t row = first + r;
    const float* xr = x + row * width;
    const float* dyr = dy + row * width;
    const float mean = mean_in[row], rstd = rstd_in[row];
    float sum = 0.0f, sum_h = 0.0f;
#pragma unroll
    for (int k = 0; k < kCols; ++k) {
      const int i = lane + k * kWarp;
      if (i >= width) continue;
      const float d = dyr[i];
      const float h = __fmul_rn(__fsub_rn(xr[i], mean), rstd);
      const float dh = __fmul_rn(d, gamma[i]);
      sum = __fadd_rn(sum, dh);
      sum_h = __fadd_rn(sum_h, __fmul_rn(dh, h));
      g_acc[k] = __fadd_rn(g_acc[k], __fmul_rn(d, h));
      b_acc[k] = __fadd_rn(b_acc[k], d);
    }
    sum = __fdiv_rn(LaneSum(sum), static_cast<float>(width));
    sum_h = __fdiv_rn(LaneSum(sum_h), static_cast<float>(width));
    float* dxr = dx + row * width;
#pragma unroll
    for (int k = 0; k < kCols; ++k) {
      const int i = lane + k * kWarp;
      if (i >= width) continue;
      const float h = __fmul_rn(__fsub_rn(xr[i], mean), rstd);
      const float dh = __fmul_rn(dyr[i], gamma[i]);
      const float g = __fmul_rn(rstd, __fsub_rn(__fsub_rn(dh, sum), __fmul_rn(h, sum_h)));
      dxr[i] = accumulate ? __fadd_rn(dxr[i], g) : g;
    }
  }
  float* g_sums = sums;
  float* b_sums = sums + kWarps * width;
#pragma unroll
  for (int k = 0; k < kCols; ++k) {
    const int i = lane + k * kWarp;
    if (i >= width) continue;
    g_sums[warp * width + i] = g_acc[k];
    b_sums[warp * width + i] = b_acc[k];
  }
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < width; i += kThreads) {
    float g = g_sums[i], b = b_sums[i];
    for (int w = 1; w < kWarps; ++w) {
      g = __fadd_rn(g, g_sums[w * width + i]);
      b = __fadd_rn(b, b_sums[w * width + i]);
    }
    g_part[static_cast<int64_t>(blockIdx.x) * width + i] = g;
    b_part[static_cast<int64_t>(blockIdx.x) * width + i] = b;
  }
}

}  // namespace gemtb::gpu::train::ln

#endif  // GEMTB_GPU_TRAIN_LAYER_NORM_KERNELS_CUH_
