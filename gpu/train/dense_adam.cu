#include "gpu/train/dense_adam.h"

#include "absl/strings/str_cat.h"
#include "gpu/common/dependent_launch.cuh"

namespace gemtb::gpu::train {
namespace {

__global__ void DenseAdamKernel(float* w, const float* g, float* m, float* v, int64_t count,
                                gemtb::embedding::AdamStep step, OptimizerConfig o, __nv_bfloat16* w_bf16) {
  AwaitPriorGrids();
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= count) return;
  embedding::AdamRow(w + e, g + e, 1, m + e, v + e, step, o);
  if (w_bf16) w_bf16[e] = __float2bfloat16_rn(w[e]);
}

}  // namespace

absl::Status DenseAdamStep(float* w, const float* g, float* m, float* v, int64_t count, gemtb::embedding::AdamStep step,
                           const OptimizerConfig& optimizer, __nv_bfloat16* w_bf16, cudaStream_t stream) {
  if (count < 1 || count >= (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(absl::StrCat("count=", count, ": want 1 .. 2^40-1"));
  }
  if (optimizer.kind != OptimizerKind::kAdam) {
    return absl::InvalidArgumentError("optimizer.kind: want adam");
  }
  constexpr int kThreads = 256;
  LaunchDependent(DenseAdamKernel, static_cast<unsigned>((count + kThreads - 1) / kThreads), kThreads, 0, stream, w, g,
                  m, v, count, step, optimizer, w_bf16);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return absl::InternalError(absl::StrCat("DenseAdamStep: ", cudaGetErrorString(e)));
  return absl::OkStatus();
}

}  // namespace gemtb::gpu::train
