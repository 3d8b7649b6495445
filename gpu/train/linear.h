// The GPU trainer's linear layers on cuBLASLt, in reference/model/layers.h's convention: row-major
// x [n, in], W [in, out], y [n, out] = x W + b. Operands in bf16, products accumulated in fp32:
//   Forward         y = x W (+ b, added in the matmul's epilogue), y in bf16;
//   BackwardInput   dx = dy W^T (+ another gradient of x, added in the epilogue), in bf16;
//   BackwardWeight  dW += x^T dy into fp32 gradients, and db += the column sums of dy (fp32, summed
//                   by the same product's epilogue).
// cuBLASLt works on column-major matrices: a row-major [r, c] array is the column-major [c, r]
// matrix, its transpose, so each product above is computed transposed (y^T = W^T x^T, ...) with
// the same memory. All pointers are device memory; calls are asynchronous on `stream`.
#ifndef GEMTB_GPU_TRAIN_LINEAR_H_
#define GEMTB_GPU_TRAIN_LINEAR_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gemtb::gpu::train {

struct LinearShape {
  int64_t n = 0;    // rows (tokens or samples)
  int64_t in = 0;   // input features
  int64_t out = 0;  // output features
};

// Checks that a shape is one the matmuls take: every dimension >= 1 and < 2^31, and in and out
// multiples of 8 (16-byte rows of bf16, what cuBLASLt's tensor-core kernels need); the error names
// the field.
absl::Status ValidateLinearShape(const LinearShape& shape);

class LinearMatmuls {
 public:
  // A cuBLASLt handle and a workspace of `workspace_bytes` on the current device.
  static absl::StatusOr<std::unique_ptr<LinearMatmuls>> Create(size_t workspace_bytes = size_t{32} << 20);
  ~LinearMatmuls();
  LinearMatmuls(const LinearMatmuls&) = delete;
  LinearMatmuls& operator=(const LinearMatmuls&) = delete;

  // bias may be null (no bias).
  absl::Status Forward(const LinearShape& s, const __nv_bfloat16* x, const __nv_bfloat16* w,
                       const __nv_bfloat16* bias, __nv_bfloat16* y, cudaStream_t stream);
  // add may be null; else dx = dy W^T + add (a gradient that reaches x another way, such as a gate's
  // or a residual's), added by cuBLASLt's epilogue as its beta term; add may be dx itself. On the
  // H200 that sum is within a bf16 rounding of the product plus one of the result (as if the product
  // were rounded before the addition), not the single rounding of an fp32 sum.
  absl::Status BackwardInput(const LinearShape& s, const __nv_bfloat16* dy, const __nv_bfloat16* w,
                             const __nv_bfloat16* add, __nv_bfloat16* dx, cudaStream_t stream);
  // The same two products with fp32 results, for a bf16 block between fp32 ones: y = x W + bias +
  // residual (bias fp32 [out] and residual fp32 in y's layout, either may be null; residual may be y),
  // and dx = dy W^T + add (add fp32 in dx's layout, null: written; add may be dx itself, to accumulate).
  absl::Status ForwardToFp32(const LinearShape& s, const __nv_bfloat16* x, const __nv_bfloat16* w, const float* bias,
                             const float* residual, float* y, cudaStream_t stream);
  absl::Status BackwardInputToFp32(const LinearShape& s, const __nv_bfloat16* dy, const __nv_bfloat16* w,
                                   const float* add, float* dx, cudaStream_t stream);
  // dbias may be null (a layer without bias); else dy's column sums (model_kernels.h's ColumnSums,
  // fp32, a fixed tree) are added to dbias.
  absl::Status BackwardWeight(const LinearShape& s, const __nv_bfloat16* x, const __nv_bfloat16* dy, float* dw,
                              float* dbias, cudaStream_t stream);

 private:
  struct Handles;
  explicit LinearMatmuls(std::unique_ptr<Handles> h);
  std::unique_ptr<Handles> h_;
};

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_LINEAR_H_
