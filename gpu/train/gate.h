// The gate of reference/model/layers.h, y = z * sigmoid(z W_g + b_g), around its linear layer: the
// caller runs a = z W_g + b_g with LinearMatmuls::Forward, GateForward makes y and keeps sigmoid(a);
// GateBackward makes da (the linear's dy) and the gate's direct part of dz, which
// LinearMatmuls::BackwardInput takes as `add` (dz = da W_g^T + dy sigmoid(a)). Activations T in fp32
// or bf16 (gate.cu instantiates both), fp32 math and saved sigmoid; elementwise, asynchronous on
// `stream`; count checked first.
#ifndef GEMTB_GPU_TRAIN_GATE_H_
#define GEMTB_GPU_TRAIN_GATE_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace gemtb::gpu::train {

// y = z sigmoid(a), sig = sigmoid(a) (overflow-safe, as ops.h's), for `count` elements.
template <typename T>
absl::Status GateForward(const T* z, const T* a, int64_t count, T* y, float* sig, cudaStream_t stream);
// da = dy z sig (1 - sig) and dz = dy sig (both written).
template <typename T>
absl::Status GateBackward(const T* z, const float* sig, const T* dy, int64_t count, T* da, T* dz,
                          cudaStream_t stream);

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_GATE_H_
