// The feed-forward block's products with the hidden array kept on chip
// (ffn_fused_kernels.cuh): the bf16 block's forward, and its input gradient,
// each one kernel instead of two products and an elementwise GELU pass.
// Row-major arrays as in linear.h: h, ds [n, d]; W1 [d, hidden]; W2 [hidden,
// d]; u, g, du [n, hidden]. GELU is the model's erf form, evaluated as
// GeluForward/GeluBackward do, and every bf16 value is rounded where the chain
// of separate kernels rounds it; only the order of each product's fp32 sums
// differs from cuBLASLt's. All pointers are device memory, 16-byte aligned;
// calls are asynchronous on `stream`.
#ifndef GEMTB_GPU_TRAIN_FFN_FUSED_H_
#define GEMTB_GPU_TRAIN_FFN_FUSED_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace gemtb::gpu::train {

struct FfnShape {
  int64_t n = 0;  // rows
  int d = 0;      // the block's width
  int hidden = 0; // the hidden width
};

// Whether the fused kernels take a shape: n 1 .. 2^31-1, d 32, 64 or 128,
// hidden a positive multiple of 64 up to 2^20; the error names the field and
// its value.
absl::Status ValidateFfnShape(const FfnShape &s);

// u = bf16(h W1 + b1), g = bf16(GELU(u)), y = (g W2 + b2) + residual in fp32.
// b2 and residual may be null (not added); residual may be y.
absl::Status FfnForwardFused(const FfnShape &s, const __nv_bfloat16 *h,
                             const __nv_bfloat16 *w1, const __nv_bfloat16 *b1,
                             const __nv_bfloat16 *w2, const float *b2,
                             const float *residual, __nv_bfloat16 *u,
                             __nv_bfloat16 *g, float *y, cudaStream_t stream);

// dg = bf16(ds W2^T) (not stored), du = bf16(dg GELU'(u)), dh = du W1^T written
// in fp32.
absl::Status FfnBackwardInputFused(const FfnShape &s, const __nv_bfloat16 *ds,
                                   const __nv_bfloat16 *w2,
                                   const __nv_bfloat16 *u,
                                   const __nv_bfloat16 *w1, __nv_bfloat16 *du,
                                   float *dh, cudaStream_t stream);

} // namespace gemtb::gpu::train

#endif // GEMTB_GPU_TRAIN_FFN_FUSED_H_
