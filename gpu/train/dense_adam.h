// The dense parameters' optimizer step of the GPU trainer: Adam exactly as the oracle's trainer
// applies it (model/embedding/embedding_math.h's AdamRow, fp32 op by op with explicitly rounded
// operations, elementwise), so given the same gradients and states it writes the oracle's bytes.
// The fp32 weights are the master copy; the step also writes the bf16 copy the matmuls read.
#ifndef GEMTB_GPU_TRAIN_DENSE_ADAM_H_
#define GEMTB_GPU_TRAIN_DENSE_ADAM_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "model/embedding/embedding_config.h"
#include "model/embedding/embedding_math.h"

namespace gemtb::gpu::train {

// w, m, v updated in place for `count` elements with gradient g and this step's bias products
// (embedding::NextAdamStep of the previous step's); w_bf16, when not null, gets each updated
// weight rounded to bf16 (to nearest even). count in 1 .. 2^40-1, optimizer kind Adam.
absl::Status DenseAdamStep(float* w, const float* g, float* m, float* v, int64_t count, gemtb::embedding::AdamStep step,
                           const OptimizerConfig& optimizer, __nv_bfloat16* w_bf16, cudaStream_t stream);

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_DENSE_ADAM_H_
