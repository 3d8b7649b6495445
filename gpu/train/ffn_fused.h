// The feed-forward block y = x + FFN(LayerNorm(x)) in bf16, one kernel each way
// (ffn_fused_kernels.cuh): LayerNorm, both products and GELU with each row's hidden values kept on
// chip between the products, instead of LayerNorm's kernels, two cuBLASLt products and GELU's
// elementwise pass. Row-major arrays as in linear.h: x, y, dx [n, d] fp32; h, ds [n, d] bf16; W1 [d,
// hidden]; W2 [hidden, d]; u, g, du [n, hidden]. LayerNorm is layer_norm.h's (the same bytes as its
// kernels given the same inputs), GELU the model's erf form as GeluForward/GeluBackward evaluate it,
// and every bf16 value is rounded where the separate kernels round it; only the order of each
// product's fp32 sums differs from cuBLASLt's. The weight gradients stay with linear.h's products
// (they sum over every row). All pointers are device memory, 16-byte aligned; calls are asynchronous
// on `stream`.
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

// Whether the fused kernels take a shape: n 1 .. 2^31-1, d 32, 64 or 128, hidden a positive multiple of
// 64 up to 2^20; the error names the field and its value.
absl::Status ValidateFfnShape(const FfnShape& s);

// The block's parameters: LayerNorm's gamma and beta [d] (fp32), the weights rounded to bf16 for the
// step, b1 [hidden] in bf16 and b2 [d] in fp32 (may be null: no bias).
struct FfnWeights {
  const float* gamma = nullptr;
  const float* beta = nullptr;
  const __nv_bfloat16* w1 = nullptr;
  const __nv_bfloat16* b1 = nullptr;
  const __nv_bfloat16* w2 = nullptr;
  const float* b2 = nullptr;
};

// What the forward keeps for the backward: h = bf16(LayerNorm(x)), its rows' mean and rstd [n],
// u = bf16(h W1 + b1) and g = bf16(GELU(u)).
struct FfnTape {
  __nv_bfloat16* h = nullptr;
  float* mean = nullptr;
  float* rstd = nullptr;
  __nv_bfloat16* u = nullptr;
  __nv_bfloat16* g = nullptr;
};

// y = (g W2 + b2) + x, writing the tape on the way (y may not alias x).
absl::Status FfnForwardFused(const FfnShape& s, const float* x, const FfnWeights& w, const FfnTape& tape, float* y,
                             cudaStream_t stream);

// From y's gradient in bf16 (ds): du = bf16(bf16(ds W2^T) GELU'(u)) written, and LayerNorm's
// backward of dh = du W1^T: its input gradient added to dx (the residual stream's gradient), its
// gamma's and beta's gradients added to dgamma and dbeta (LayerNormBackward's blocks of rows and
// sums; stream-ordered scratch). x is the forward's input.
absl::Status FfnBackwardFused(const FfnShape& s, const __nv_bfloat16* ds, const float* x, const FfnWeights& w,
                              const FfnTape& tape, __nv_bfloat16* du, float* dx, float* dgamma, float* dbeta,
                              cudaStream_t stream);

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_FFN_FUSED_H_
