// The self-attention's QK-norm and RoPE in one pass over the rows of jagged sequences: per head,
// y = RoPE_t(x / sqrt(mean(x^2) + 1e-6)), t the row's position in its sample (interleaved pairs
// (2m, 2m + 1) rotated by table row t: sin in columns [0, dh/2), cos in [dh/2, dh), as
// model/description's RopeTable lays it out), the inverse RMS kept; and the backward
// dx = NormBackward(x, inv, RoPE_tᵀ(dy)). Each element takes exactly the operations of
// head_rms_norm.h's 8-lane row followed by the reference's RoPE (explicitly rounded fp32, the same
// lane order and butterfly), so the bytes are those of the two separate passes, from one read and one
// write of the rows instead of two of each. Rows in fp32 or bf16 (one overload each; bf16 rows widen
// exactly, the math is the same fp32, and y or dx is rounded once as it is stored).
// Device pointers, asynchronous on `stream`; the shape is checked first (errors name the field).
#ifndef GEMTB_GPU_TRAIN_QK_NORM_ROPE_H_
#define GEMTB_GPU_TRAIN_QK_NORM_ROPE_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace gemtb::gpu::train {

// Rows of `batch` samples, sample b's rows [offsets[b], offsets[b + 1]) (device), each of heads x dh
// values (fp32 or bf16); `table` [max_rows, dh] on the device. Checks: batch 0 .. 2^31-1, max_rows
// 0 .. 2^20, heads 1 .. 65535, dh even 2 .. 64, ld 0 or heads * dh .. 2^31-1.
struct RopeRows {
  int64_t batch = 0;              // 0 .. 2^31-1
  const int32_t* offsets = nullptr;
  int32_t max_rows = 0;           // the longest sample, 0 .. 2^20
  int heads = 0;                  // 1 .. 65535
  int dh = 0;                     // even, 2 .. 64 (the trainer's head dims 16, 32, 64)
  const float* table = nullptr;
  // The row stride of x and dx in elements, 0: heads * dh (dense). A larger one reads x out of (and
  // writes dx into) wider rows, such as q's or k's columns of one product for q, k and v together; y,
  // dy and inv are dense.
  int64_t ld = 0;
};

absl::Status ValidateRopeRows(const RopeRows& rows);

// y [rows, heads, dh] and inv [rows, heads] from x (y may not alias x).
absl::Status QkNormRopeForward(const RopeRows& rows, const float* x, float* y, float* inv, cudaStream_t stream);
absl::Status QkNormRopeForward(const RopeRows& rows, const __nv_bfloat16* x, __nv_bfloat16* y, float* inv,
                               cudaStream_t stream);
// dx from the gradient dy of y, x and the forward's inv (dx may alias dy where ld is dense).
absl::Status QkNormRopeBackward(const RopeRows& rows, const float* x, const float* inv, const float* dy, float* dx,
                                cudaStream_t stream);
absl::Status QkNormRopeBackward(const RopeRows& rows, const __nv_bfloat16* x, const float* inv,
                                const __nv_bfloat16* dy, __nv_bfloat16* dx, cudaStream_t stream);

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_QK_NORM_ROPE_H_
