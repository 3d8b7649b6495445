// The input gradient of the attention projections that read one LayerNorm's bf16 output, and that
// LayerNorm's backward, in one kernel (projection_backward_kernels.cuh): dh = sum_s dy_s W_s^T over the
// sources (a self-attention block's query, key and value projections; a cross-attention block's query
// projection), summed in fp32 in one accumulator and kept on chip, then LayerNorm's backward of dh
// (layer_norm.h's, the same bytes as LayerNormBackward given the same dh): added to dx, the
// parameters' gradients added to dgamma and dbeta. Instead of one product per source each reading and
// writing dh in fp32, and LayerNorm's backward reading it again. The weight gradients stay with
// linear.h's products. Row-major arrays: dy_s [n, d] bf16, W_s [d, d] bf16 ([in, out], as linear.h),
// x and dx [n, d] fp32. Device pointers, 16-byte aligned; asynchronous on `stream`.
#ifndef GEMTB_GPU_TRAIN_PROJECTION_BACKWARD_H_
#define GEMTB_GPU_TRAIN_PROJECTION_BACKWARD_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace gemtb::gpu::train {

struct ProjectionGrad {
  const __nv_bfloat16* dy = nullptr;  // the projection's output gradient
  const __nv_bfloat16* w = nullptr;   // its weight, rounded to bf16 for the step
};

// The LayerNorm before the projections: its input x, gamma, the forward's row statistics, and the
// gradients its backward adds to.
struct LayerNormGrads {
  const float* x = nullptr;
  const float* gamma = nullptr;
  const float* mean = nullptr;
  const float* rstd = nullptr;
  float* dx = nullptr;
  float* dgamma = nullptr;
  float* dbeta = nullptr;
};

// Whether the kernel takes the widths: n 1 .. 2^31-1, d 32, 64 or 128; the error names the field.
absl::Status ValidateProjectionsShape(int64_t n, int d);

// 1 to 3 sources.
absl::Status ProjectionsLayerNormBackward(int64_t n, int d, const std::vector<ProjectionGrad>& sources,
                                          const LayerNormGrads& ln, cudaStream_t stream);

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_PROJECTION_BACKWARD_H_
