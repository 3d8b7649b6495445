// Prefills outputs that skipped (empty) tiles never write: LSE = -inf for rows without keys.
#include "gpu/attention/launch.h"
#include "gpu/common/cuda_check.cuh"

namespace gemtb::gpu {
namespace {

__global__ void FillKernel(float* x, int64_t n, float value) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = value;
  }
}

}  // namespace

absl::Status LaunchFill(float* x, int64_t n, float value) {
  if (n == 0) return absl::OkStatus();
  const int64_t blocks = (n + 255) / 256;
  FillKernel<<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), 256>>>(x, n, value);
  return CudaStatus(cudaGetLastError(), "fill kernel");
}

}  // namespace gemtb::gpu
