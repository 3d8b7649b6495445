#include "gpu/train/head_rms_norm.h"

#include "absl/strings/str_cat.h"
#include "gpu/train/kernel_utils.cuh"

namespace gemtb::gpu::train {
namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;  // one warp each
constexpr float kEps = 1e-6f;

template <typename T>
__global__ void HeadRmsNormForwardKernel(const T* x, int64_t rows, int dh, T* y, float* inv) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarp;
  const T* xr = x + row * dh;
  float ss = 0.0f;
  for (int i = lane; i < dh; i += kWarp) {
    const float v = ToFloat(xr[i]);
    ss = __fadd_rn(ss, __fmul_rn(v, v));
  }
  const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(WarpSum(ss), static_cast<float>(dh)), kEps)));
  T* yr = y + row * dh;
  for (int i = lane; i < dh; i += kWarp) yr[i] = FromFloat<T>(__fmul_rn(ToFloat(xr[i]), r));
  if (lane == 0) inv[row] = r;
}

template <typename T>
__global__ void HeadRmsNormBackwardKernel(const T* x, const float* inv, const T* dy, int64_t rows, int dh, T* dx) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarp;
  const T* xr = x + row * dh;
  const T* dyr = dy + row * dh;
  const float r = inv[row];
  float s = 0.0f;
  for (int i = lane; i < dh; i += kWarp) {
    s = __fadd_rn(s, __fmul_rn(ToFloat(dyr[i]), __fmul_rn(ToFloat(xr[i]), r)));
  }
  s = __fdiv_rn(WarpSum(s), static_cast<float>(dh));
  T* dxr = dx + row * dh;
  for (int i = lane; i < dh; i += kWarp) {
    const float yv = __fmul_rn(ToFloat(xr[i]), r);
    dxr[i] = FromFloat<T>(__fmul_rn(r, __fsub_rn(ToFloat(dyr[i]), __fmul_rn(yv, s))));
  }
}

unsigned RowBlocks(int64_t rows) { return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

absl::Status ValidateHeadRowsShape(const HeadRowsShape& s) {
  if (s.rows < 1 || s.rows >= (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat("rows=", s.rows, ": want 1 .. 2^31-1"));
  }
  if (s.dh < 1 || s.dh > 1024) return absl::InvalidArgumentError(absl::StrCat("dh=", s.dh, ": want 1 .. 1024"));
  return absl::OkStatus();
}

template <typename T>
absl::Status HeadRmsNormForward(const HeadRowsShape& s, const T* x, T* y, float* inv, cudaStream_t stream) {
  if (absl::Status v = ValidateHeadRowsShape(s); !v.ok()) return v;
  HeadRmsNormForwardKernel<T><<<RowBlocks(s.rows), kRowsPerBlock * kWarp, 0, stream>>>(
      x, s.rows, static_cast<int>(s.dh), y, inv);
  return Launched("HeadRmsNormForward");
}

template <typename T>
absl::Status HeadRmsNormBackward(const HeadRowsShape& s, const T* x, const float* inv, const T* dy, T* dx,
                                 cudaStream_t stream) {
  if (absl::Status v = ValidateHeadRowsShape(s); !v.ok()) return v;
  HeadRmsNormBackwardKernel<T><<<RowBlocks(s.rows), kRowsPerBlock * kWarp, 0, stream>>>(
      x, inv, dy, s.rows, static_cast<int>(s.dh), dx);
  return Launched("HeadRmsNormBackward");
}

template absl::Status HeadRmsNormForward<float>(const HeadRowsShape&, const float*, float*, float*, cudaStream_t);
template absl::Status HeadRmsNormForward<__nv_bfloat16>(const HeadRowsShape&, const __nv_bfloat16*, __nv_bfloat16*,
                                                        float*, cudaStream_t);
template absl::Status HeadRmsNormBackward<float>(const HeadRowsShape&, const float*, const float*, const float*,
                                                 float*, cudaStream_t);
template absl::Status HeadRmsNormBackward<__nv_bfloat16>(const HeadRowsShape&, const __nv_bfloat16*, const float*,
                                                         const __nv_bfloat16*, __nv_bfloat16*, cudaStream_t);

}  // namespace gemtb::gpu::train
