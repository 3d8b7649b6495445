// The bf16 feed-forward block's hidden gradient, du = bf16(bf16(dy W2ᵀ) GELU'(u)), and b1's gradient
// (du's column sums), as one Hopper kernel (ffn_hidden_grad_kernel.cuh) and the column-sum tree's upper
// levels, instead of a cuBLASLt product writing dg and GELU's backward reading it: dg stays in
// registers. Row-major arrays as in linear.h: dy [n, d] bf16 (the block's output gradient as rounded
// for its products), W2 [hidden, d] bf16 (as rounded for the step), u and du [n, hidden] bf16, db1
// [hidden] fp32. The same roundings as the separate kernels and the same column-sum tree
// (model_kernels.h's ColumnSums); only the order of the product's fp32 sums differs from cuBLASLt's,
// and it is fixed: the same bytes on every run. Needs an sm_90 GPU. All pointers are device memory,
// 16-byte aligned; calls are asynchronous on `stream`.
#ifndef GEMTB_GPU_TRAIN_FFN_HIDDEN_GRAD_H_
#define GEMTB_GPU_TRAIN_FFN_HIDDEN_GRAD_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "gpu/train/ffn_fused.h"

namespace gemtb::gpu::train {

// Whether the kernel takes a shape (ffn_forward.h's ValidateFfnHopperShape: n 1 .. 2^31-1, d 128,
// hidden a positive multiple of 128 up to 2^20); the error names the field and its value.
absl::Status ValidateFfnHiddenGradShape(const FfnShape& s);

// du written; db1 (+)= du's column sums (accumulate: added to what db1 holds, else written).
absl::Status FfnHiddenGradFused(const FfnShape& s, const __nv_bfloat16* dy, const __nv_bfloat16* w2,
                                const __nv_bfloat16* u, __nv_bfloat16* du, float* db1, bool accumulate,
                                cudaStream_t stream);

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_FFN_HIDDEN_GRAD_H_
