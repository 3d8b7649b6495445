// Adds the bias gradient that a weight gradient's product wrote (cuBLASLt's BGRADA epilogue writes
// it; the layer's gradient accumulates over micro-batches) into the layer's bias gradient.
#include "gpu/train/linear.h"

namespace gemtb::gpu::train {
namespace {

__global__ void AddIntoKernel(const float* src, int64_t count, float* dst) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j < count) dst[j] = __fadd_rn(dst[j], src[j]);
}

}  // namespace

cudaError_t LaunchAddInto(const float* src, int64_t count, float* dst, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t blocks = (count + kThreads - 1) / kThreads;
  AddIntoKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(src, count, dst);
  return cudaGetLastError();
}

}  // namespace gemtb::gpu::train
