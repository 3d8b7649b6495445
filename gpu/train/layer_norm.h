// LayerNorm and GELU of the GPU trainer, as reference/model/layers.h and ops.h define them: per row
// of `width`, y = (x - mean) * rstd * gamma + beta with the biased variance and eps 1e-5; GELU in
// its erf form, x Phi(x). Activations in bf16, statistics and parameters in fp32, math in fp32.
// Every reduction runs in a fixed order (the same bytes on every run). Device pointers; calls are
// asynchronous on `stream` and check their shape first (errors name the field).
#ifndef GEMTB_GPU_TRAIN_LAYER_NORM_H_
#define GEMTB_GPU_TRAIN_LAYER_NORM_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace gemtb::gpu::train {

struct RowsShape {
  int64_t n = 0;      // rows
  int64_t width = 0;  // features per row
};

// n in 1 .. 2^31-1, width in 1 .. 65536.
absl::Status ValidateRowsShape(const RowsShape& shape);

// y = LayerNorm(x); mean and rstd [n] are kept for the backward. One warp per row.
absl::Status LayerNormForward(const RowsShape& s, const __nv_bfloat16* x, const float* gamma, const float* beta,
                              __nv_bfloat16* y, float* mean, float* rstd, cudaStream_t stream);
// dx = rstd (dy g - mean(dy g) - xhat mean(dy g xhat)) per row (written); dgamma += sum over rows
// of dy xhat and dbeta += sum of dy (rows in increasing order, one thread per column).
absl::Status LayerNormBackward(const RowsShape& s, const __nv_bfloat16* x, const float* gamma, const float* mean,
                               const float* rstd, const __nv_bfloat16* dy, __nv_bfloat16* dx, float* dgamma,
                               float* dbeta, cudaStream_t stream);

// y = GELU(x) and dx = dy GELU'(x) (written), elementwise over `count` values.
absl::Status GeluForward(const __nv_bfloat16* x, int64_t count, __nv_bfloat16* y, cudaStream_t stream);
absl::Status GeluBackward(const __nv_bfloat16* x, const __nv_bfloat16* dy, int64_t count, __nv_bfloat16* dx,
                          cudaStream_t stream);

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_LAYER_NORM_H_
