// The forward of the bf16 feed-forward block's products, y = x + GELU(h W1 + b1) W2 + b2 from
// LayerNorm's bf16 rows h, as one Hopper kernel (ffn_forward_kernel.cuh) instead of two cuBLASLt
// products and GELU's elementwise kernel: the hidden arrays u = bf16(h W1 + b1) and g = bf16(GELU(u))
// are written once (the backward reads both) and not read back. Row-major arrays as in linear.h: h
// [n, d] bf16; W1 [d, hidden], b1 [hidden] and W2 [hidden, d] bf16 (the weights as rounded for the
// step); b2 [d], x and y [n, d] fp32; u, g [n, hidden] bf16. The same roundings as the separate
// kernels; only the order of each product's fp32 sums differs from cuBLASLt's, and it is fixed: the
// same bytes on every run. Needs an sm_90 GPU. All pointers are device memory, 16-byte aligned; calls
// are asynchronous on `stream`.
#ifndef GEMTB_GPU_TRAIN_FFN_FORWARD_H_
#define GEMTB_GPU_TRAIN_FFN_FORWARD_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "gpu/train/ffn_fused.h"

namespace gemtb::gpu::train {

// Whether the Hopper feed-forward kernels (this forward, ffn_hidden_grad.h's) take a shape: n 1 ..
// 2^31-1, d 128, hidden a positive multiple of 128 up to 2^20; the error starts with `what` and names
// the field and its value.
absl::Status ValidateFfnHopperShape(const FfnShape& s, const char* what);
// Whether this forward takes a shape (ValidateFfnHopperShape).
absl::Status ValidateFfnForwardShape(const FfnShape& s);

// The block's parameters as the forward reads them.
struct FfnForwardWeights {
  const __nv_bfloat16* w1 = nullptr;
  const __nv_bfloat16* b1 = nullptr;
  const __nv_bfloat16* w2 = nullptr;
  const float* b2 = nullptr;
};

// y = x + (g W2 + b2), with u and g written; x may be y. y16, where not null ([n, d] bf16, 16-byte
// aligned), also gets y rounded to bf16 (RNE, ToBf16's bytes) from the registers that hold y, sparing a
// consumer of bf16 rows (the next layer's PMA keys) a pass that reads y back.
absl::Status FfnForwardFused(const FfnShape& s, const __nv_bfloat16* h, const FfnForwardWeights& w, const float* x,
                             __nv_bfloat16* u, __nv_bfloat16* g, float* y, __nv_bfloat16* y16, cudaStream_t stream);

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_FFN_FORWARD_H_
