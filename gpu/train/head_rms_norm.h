// The QK-norm of the GPU trainer, as reference/model/layers.h defines it: a parameter-free RMSNorm of
// each head's vector, y = x / sqrt(mean(x^2) + 1e-6), over rows of `dh` values (n tokens x heads
// rows). Activations T in fp32 or bf16 (head_rms_norm.cu instantiates both), fp32 math and saved
// inverse RMS; 8 lanes per row (head dims up to 64) or a warp, its sum by a fixed butterfly, so every
// run gives the same bytes.
// Device pointers, asynchronous on `stream`; the shape is checked first (errors name the field).
#ifndef GEMTB_GPU_TRAIN_HEAD_RMS_NORM_H_
#define GEMTB_GPU_TRAIN_HEAD_RMS_NORM_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace gemtb::gpu::train {

struct HeadRowsShape {
  int64_t rows = 0;  // tokens x heads, 1 .. 2^31-1
  int64_t dh = 0;    // head dimension, 1 .. 1024
  // Where x and dx keep their rows: tokens of `heads` head rows (rows a multiple of it), token t's
  // head h at t * ld + h * dh. ld 0 (or heads * dh) is dense; a larger one reads x out of (and writes
  // dx into) wider rows, such as k's columns of one product for k and v together. y, dy and inv are
  // dense.
  int64_t heads = 1;  // 1 .. 65535
  int64_t ld = 0;     // 0, or heads * dh .. 2^31-1
};

absl::Status ValidateHeadRowsShape(const HeadRowsShape& shape);

// y = x * inv per row, inv [rows] kept for the backward.
template <typename T>
absl::Status HeadRmsNormForward(const HeadRowsShape& s, const T* x, T* y, float* inv, cudaStream_t stream);
// dx = inv (dy - y mean(dy y)) with y = x * inv recomputed in fp32 (written, not added).
template <typename T>
absl::Status HeadRmsNormBackward(const HeadRowsShape& s, const T* x, const float* inv, const T* dy, T* dx,
                                 cudaStream_t stream);

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_HEAD_RMS_NORM_H_
