#include "gpu/bench/device_random.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"

namespace gemtb::gpu::bench {
namespace {

__device__ __forceinline__ uint64_t SplitMix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__global__ void FillKernel(uint16_t* x, int64_t n, bool bf16, uint64_t seed) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint64_t r = SplitMix64(seed * 0x100000001B3ull + static_cast<uint64_t>(i));
    const float u = static_cast<float>(r >> 40) * (1.f / 16777216.f);  // [0, 1)
    const float v = (2.f * u - 1.f) * 1.7320508f;
    x[i] = bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v)) : __half_as_ushort(__float2half_rn(v));
  }
}

}  // namespace

absl::Status FillUniform(uint16_t* x, int64_t n, ElementType type, uint64_t seed) {
  if (n <= 0) return absl::OkStatus();
  FillKernel<<<1024, 256>>>(x, n, type == ElementType::kBFloat16, seed);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return absl::InternalError(absl::StrCat("random fill: ", cudaGetErrorString(err)));
  return absl::OkStatus();
}

}  // namespace gemtb::gpu::bench
