// The bias gradient of a linear layer: column sums of dy in fp32, one thread per column, rows added
// in increasing order, so the sum is the same on every run. Adjacent threads read adjacent columns
// of a row, so each row is read coalesced.
#include "gpu/train/linear.h"

namespace gemtb::gpu::train {
namespace {

__global__ void BiasGradKernel(const __nv_bfloat16* dy, int64_t n, int64_t out, float* dbias) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= out) return;
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum = __fadd_rn(sum, __bfloat162float(dy[i * out + j]));
  dbias[j] = __fadd_rn(dbias[j], sum);
}

}  // namespace

cudaError_t LaunchBiasGrad(const __nv_bfloat16* dy, int64_t n, int64_t out, float* dbias, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t blocks = (out + kThreads - 1) / kThreads;
  BiasGradKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(dy, n, out, dbias);
  return cudaGetLastError();
}

}  // namespace gemtb::gpu::train
