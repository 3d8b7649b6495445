// An attention block's input side in one kernel (attention_input_kernels.cuh): h = bf16(LayerNorm(x))
// (LayerNormForward's bytes, the row statistics kept), then the block's projections of h that the
// kernel is given (a self-attention block's query, key and value; a cross-attention block's query),
// y = bf16(h W + b) each, and for the normed ones (queries and keys) the QK-norm with RoPE where the
// block applies it (given the same y, QkNormRopeForward's or HeadRmsNormForward's bytes). Instead of
// LayerNorm's kernel, one cuBLASLt product per projection each reading h, and the norms' passes over
// the projected rows. Row-major: x [n, d] fp32; h, y, normed [n, d] bf16; W [d, d] bf16 ([in, out], as
// linear.h); inv [n, heads]. Device pointers, 16-byte aligned; asynchronous on `stream`.
#ifndef GEMTB_GPU_TRAIN_ATTENTION_INPUT_H_
#define GEMTB_GPU_TRAIN_ATTENTION_INPUT_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace gemtb::gpu::train {

struct AttentionInputShape {
  int64_t n = 0;  // rows, 1 .. 2^31-1
  int d = 0;      // 32, 64 or 128
  int dh = 0;     // the head width: 16, 32 or 64, at most d
};

absl::Status ValidateAttentionInputShape(const AttentionInputShape& s);

struct AttentionProjection {
  const __nv_bfloat16* w = nullptr;     // the weight rounded to bf16 for the step
  const __nv_bfloat16* bias = nullptr;  // [d], rounded to bf16
  __nv_bfloat16* y = nullptr;           // the projection
  __nv_bfloat16* normed = nullptr;      // its QK-norm, or null (the values: not normed)
  float* inv = nullptr;                 // the QK-norm's inverse RMS per row and head (with normed)
};

// The LayerNorm: input x, gamma and beta (fp32 [d]); its output h and the row statistics written.
struct AttentionNorm {
  const float* x = nullptr;
  const float* gamma = nullptr;
  const float* beta = nullptr;
  __nv_bfloat16* h = nullptr;
  float* mean = nullptr;
  float* rstd = nullptr;
};

// RoPE of the normed rows: samples' rows [offsets[b], offsets[b + 1]) (device, batch + 1 entries), a
// row at its position in its sample; table [positions, dh] as model/description's RopeTable (sin,
// then cos). A null table: no RoPE.
struct AttentionRope {
  const float* table = nullptr;
  const int32_t* offsets = nullptr;
  int64_t batch = 0;
};

// 1 to 3 projections.
absl::Status AttentionInputForward(const AttentionInputShape& s, const AttentionNorm& norm,
                                   const std::vector<AttentionProjection>& projections, const AttentionRope& rope,
                                   cudaStream_t stream);

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_ATTENTION_INPUT_H_
