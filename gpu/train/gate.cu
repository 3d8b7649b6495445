#include "gpu/train/gate.h"

#include "absl/strings/str_cat.h"
#include "gpu/train/kernel_utils.cuh"

namespace gemtb::gpu::train {
namespace {

constexpr int kThreads = 256;

// ops.h's Sigmoid: exp of a non-positive argument only.
__device__ float GateSigmoid(float x) {
  if (x >= 0.0f) return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x)));
  const float e = expf(x);
  return __fdiv_rn(e, __fadd_rn(1.0f, e));
}

__global__ void GateForwardKernel(const __nv_bfloat16* z, const __nv_bfloat16* a, int64_t count, __nv_bfloat16* y,
                                  float* sig) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= count) return;
  const float s = GateSigmoid(__bfloat162float(a[e]));
  sig[e] = s;
  y[e] = __float2bfloat16_rn(__fmul_rn(__bfloat162float(z[e]), s));
}

__global__ void GateBackwardKernel(const __nv_bfloat16* z, const float* sig, const __nv_bfloat16* dy, int64_t count,
                                   __nv_bfloat16* da, __nv_bfloat16* dz) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= count) return;
  const float s = sig[e], g = __bfloat162float(dy[e]);
  da[e] = __float2bfloat16_rn(__fmul_rn(__fmul_rn(__fmul_rn(g, __bfloat162float(z[e])), s), __fsub_rn(1.0f, s)));
  dz[e] = __float2bfloat16_rn(__fmul_rn(g, s));
}

unsigned Blocks(int64_t count) { return static_cast<unsigned>((count + kThreads - 1) / kThreads); }

}  // namespace

absl::Status GateForward(const __nv_bfloat16* z, const __nv_bfloat16* a, int64_t count, __nv_bfloat16* y, float* sig,
                         cudaStream_t stream) {
  if (absl::Status v = ValidateCount(count); !v.ok()) return v;
  GateForwardKernel<<<Blocks(count), kThreads, 0, stream>>>(z, a, count, y, sig);
  return Launched("GateForward");
}

absl::Status GateBackward(const __nv_bfloat16* z, const float* sig, const __nv_bfloat16* dy, int64_t count,
                          __nv_bfloat16* da, __nv_bfloat16* dz, cudaStream_t stream) {
  if (absl::Status v = ValidateCount(count); !v.ok()) return v;
  GateBackwardKernel<<<Blocks(count), kThreads, 0, stream>>>(z, sig, dy, count, da, dz);
  return Launched("GateBackward");
}

}  // namespace gemtb::gpu::train
