// The backward of the feed-forward block y = x + FFN(LayerNorm(x)) in bf16 up to the block's input
// gradient, one kernel (ffn_fused_kernels.cuh): both input-gradient products with GELU's derivative
// between them, each row's hidden values kept on chip, and LayerNorm's backward of the result,
// instead of two cuBLASLt products, GELU's elementwise backward and LayerNorm's backward kernel (at d =
// 128 the forward's products and GELU are ffn_forward.h's kernel). Row-major arrays as in linear.h: x,
// dx [n, d] fp32; ds [n, d] bf16; W1 [d, hidden]; W2 [hidden, d]; u, du [n, hidden]. LayerNorm is
// layer_norm.h's (the same bytes as LayerNormBackward given the same dh), GELU's derivative the model's erf form as
// GeluBackward evaluates it, and every bf16 value is rounded where the separate kernels round it;
// only the order of each product's fp32 sums differs from cuBLASLt's. The weight gradients stay with
// linear.h's products (they sum over every row). All pointers are device memory, 16-byte aligned;
// calls are asynchronous on `stream`.
#ifndef GEMTB_GPU_TRAIN_FFN_FUSED_H_
#define GEMTB_GPU_TRAIN_FFN_FUSED_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace gemtb::gpu::train {

struct FfnShape {
  int64_t n = 0;   // rows
  int d = 0;       // the block's width
  int hidden = 0;  // the hidden width
};

// Whether the fused kernel takes a shape: n 1 .. 2^31-1, d 32, 64 or 128, hidden a positive multiple of
// 64 up to 2^20; the error names the field and its value.
absl::Status ValidateFfnShape(const FfnShape& s);

// What the backward reads of the block: LayerNorm's gamma [d] (fp32) and the weights as the forward
// used them, rounded to bf16 for the step.
struct FfnWeights {
  const float* gamma = nullptr;
  const __nv_bfloat16* w1 = nullptr;
  const __nv_bfloat16* w2 = nullptr;
};

// What the forward kept: LayerNorm's row statistics mean and rstd [n] and u = bf16(h W1 + b1).
struct FfnTape {
  const float* mean = nullptr;
  const float* rstd = nullptr;
  const __nv_bfloat16* u = nullptr;
};

// From y's gradient in bf16 (ds): du = bf16(bf16(ds W2^T) GELU'(u)) written, and LayerNorm's
// backward of dh = du W1^T: its input gradient added to dx (the residual stream's gradient), its
// gamma's and beta's gradients added to dgamma and dbeta (LayerNormBackward's blocks of rows and
// sums; stream-ordered scratch). x is the forward's input.
absl::Status FfnBackwardFused(const FfnShape& s, const __nv_bfloat16* ds, const float* x, const FfnWeights& w,
                              const FfnTape& tape, __nv_bfloat16* du, float* dx, float* dgamma, float* dbeta,
                              cudaStream_t stream);

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_FFN_FUSED_H_
