// LayerNorm and GELU of the GPU trainer, as reference/model/layers.h and ops.h define them: per row
// of `width`, y = (x - mean) * rstd * gamma + beta with the biased variance and eps 1e-5; GELU in
// its erf form, x Phi(x). Activations T in fp32 or bf16 (layer_norm.cu instantiates both),
// statistics and parameters in fp32, math in fp32. Every reduction runs in a fixed order (the same
// bytes on every run). Device pointers; calls are asynchronous on `stream` and check their shape
// first (errors name the field).
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
template <typename T>
absl::Status LayerNormForward(const RowsShape& s, const T* x, const float* gamma, const float* beta, T* y, float* mean,
                              float* rstd, cudaStream_t stream);
// The same from fp32 rows into bf16 ones (the statistics and math fp32; y rounded once, to nearest).
absl::Status LayerNormForward(const RowsShape& s, const float* x, const float* gamma, const float* beta,
                              __nv_bfloat16* y, float* mean, float* rstd, cudaStream_t stream);
// dx = rstd (dy g - mean(dy g) - xhat mean(dy g xhat)) per row (written; with accumulate_dx added to
// dx, one fp32 rounding, so that a residual's gradient needs no second array); dgamma += sum over
// rows of dy xhat and dbeta += sum of dy (the tree of model_kernels.h's ColumnSums over blocks of 64
// rows; stream-ordered scratch). fp32 rows of at most 512 values take one pass over x and dy for both
// (layer_norm_kernels.cuh: the same dx, each block's rows summed in eight groups of eight); others a
// pass for dx and one for the parameters.
template <typename T>
absl::Status LayerNormBackward(const RowsShape& s, const T* x, const float* gamma, const float* mean, const float* rstd,
                               const T* dy, T* dx, float* dgamma, float* dbeta, cudaStream_t stream,
                               bool accumulate_dx = false);

// Where a LayerNorm's backward hands the residual stream's gradient on to the next bf16 block, which
// reads it as a bf16 product's operand and sums it for its output bias (ToBf16WithColumnSums' two
// results, from the pass that forms it): rows [n, width] = the new dx rounded to bf16, and
// column_sums [width] += the new dx's column sums in fp32 (each block of 64 rows as eight warps' sums of
// eight rows in order, added in warp order; the blocks by ColumnSums' tree).
struct Bf16Handoff {
  __nv_bfloat16* rows = nullptr;
  float* column_sums = nullptr;
};

// LayerNormBackward<float> of rows of at most kBackwardRowsMaxWidth values in the fused kernel's one
// pass, with dy in fp32 or bf16 (Dy: float or __nv_bfloat16; bf16 widened exactly), and with `next`
// (null: none) the new dx also handed on in bf16. Wider rows are refused (the error names the width).
inline constexpr int64_t kBackwardRowsMaxWidth = 512;
template <typename Dy>
absl::Status LayerNormBackwardRows(const RowsShape& s, const float* x, const float* gamma, const float* mean,
                                   const float* rstd, const Dy* dy, float* dx, float* dgamma, float* dbeta,
                                   const Bf16Handoff* next, cudaStream_t stream, bool accumulate_dx = false);

// y = GELU(x) and dx = dy GELU'(x) (written), elementwise over `count` values.
template <typename T>
absl::Status GeluForward(const T* x, int64_t count, T* y, cudaStream_t stream);
template <typename T>
absl::Status GeluBackward(const T* x, const T* dy, int64_t count, T* dx, cudaStream_t stream);

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_LAYER_NORM_H_
