#include "gpu/train/gate.h"

#include "absl/strings/str_cat.h"
#include "gpu/common/dependent_launch.cuh"
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

template <typename T>
__global__ void GateForwardKernel(const T* z, const T* a, int64_t count, T* y, float* sig) {
  AwaitPriorGrids();
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= count) return;
  const float s = GateSigmoid(ToFloat(a[e]));
  sig[e] = s;
  y[e] = FromFloat<T>(__fmul_rn(ToFloat(z[e]), s));
}

template <typename T>
__global__ void GateBackwardKernel(const T* z, const float* sig, const T* dy, int64_t count, T* da, T* dz) {
  AwaitPriorGrids();
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= count) return;
  const float s = sig[e], g = ToFloat(dy[e]);
  da[e] = FromFloat<T>(__fmul_rn(__fmul_rn(__fmul_rn(g, ToFloat(z[e])), s), __fsub_rn(1.0f, s)));
  dz[e] = FromFloat<T>(__fmul_rn(g, s));
}

unsigned Blocks(int64_t count) { return static_cast<unsigned>((count + kThreads - 1) / kThreads); }

}  // namespace

template <typename T>
absl::Status GateForward(const T* z, const T* a, int64_t count, T* y, float* sig, cudaStream_t stream) {
  if (absl::Status v = ValidateCount(count); !v.ok()) return v;
  LaunchDependent(GateForwardKernel<T>, Blocks(count), kThreads, 0, stream, z, a, count, y, sig);
  return Launched("GateForward");
}

template <typename T>
absl::Status GateBackward(const T* z, const float* sig, const T* dy, int64_t count, T* da, T* dz,
                          cudaStream_t stream) {
  if (absl::Status v = ValidateCount(count); !v.ok()) return v;
  LaunchDependent(GateBackwardKernel<T>, Blocks(count), kThreads, 0, stream, z, sig, dy, count, da, dz);
  return Launched("GateBackward");
}

template absl::Status GateForward<float>(const float*, const float*, int64_t, float*, float*, cudaStream_t);
template absl::Status GateForward<__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*, int64_t, __nv_bfloat16*,
                                                 float*, cudaStream_t);
template absl::Status GateBackward<float>(const float*, const float*, const float*, int64_t, float*, float*,
                                          cudaStream_t);
template absl::Status GateBackward<__nv_bfloat16>(const __nv_bfloat16*, const float*, const __nv_bfloat16*, int64_t,
                                                  __nv_bfloat16*, __nv_bfloat16*, cudaStream_t);

}  // namespace gemtb::gpu::train
