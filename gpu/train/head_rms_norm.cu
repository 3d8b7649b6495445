#include "gpu/train/head_rms_norm.h"

#include "absl/strings/str_cat.h"
#include "gpu/train/kernel_utils.cuh"

namespace gemtb::gpu::train {
namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;  // one warp each
constexpr float kEps = 1e-6f;

__global__ void HeadRmsNormForwardKernel(const __nv_bfloat16* x, int64_t rows, int dh, __nv_bfloat16* y, float* inv) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarp;
  const __nv_bfloat16* xr = x + row * dh;
  float ss = 0.0f;
  for (int i = lane; i < dh; i += kWarp) {
    const float v = __bfloat162float(xr[i]);
    ss = __fadd_rn(ss, __fmul_rn(v, v));
  }
  const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(WarpSum(ss), static_cast<float>(dh)), kEps)));
  __nv_bfloat16* yr = y + row * dh;
  for (int i = lane; i < dh; i += kWarp) yr[i] = __float2bfloat16_rn(__fmul_rn(__bfloat162float(xr[i]), r));
  if (lane == 0) inv[row] = r;
}

__global__ void HeadRmsNormBackwardKernel(const __nv_bfloat16* x, const float* inv, const __nv_bfloat16* dy,
                                          int64_t rows, int dh, __nv_bfloat16* dx) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarp;
  const __nv_bfloat16* xr = x + row * dh;
  const __nv_bfloat16* dyr = dy + row * dh;
  const float r = inv[row];
  float s = 0.0f;
  for (int i = lane; i < dh; i += kWarp) {
    s = __fadd_rn(s, __fmul_rn(__bfloat162float(dyr[i]), __fmul_rn(__bfloat162float(xr[i]), r)));
  }
  s = __fdiv_rn(WarpSum(s), static_cast<float>(dh));
  __nv_bfloat16* dxr = dx + row * dh;
  for (int i = lane; i < dh; i += kWarp) {
    const float yv = __fmul_rn(__bfloat162float(xr[i]), r);
    dxr[i] = __float2bfloat16_rn(__fmul_rn(r, __fsub_rn(__bfloat162float(dyr[i]), __fmul_rn(yv, s))));
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

absl::Status HeadRmsNormForward(const HeadRowsShape& s, const __nv_bfloat16* x, __nv_bfloat16* y, float* inv,
                                cudaStream_t stream) {
  if (absl::Status v = ValidateHeadRowsShape(s); !v.ok()) return v;
  HeadRmsNormForwardKernel<<<RowBlocks(s.rows), kRowsPerBlock * kWarp, 0, stream>>>(x, s.rows, static_cast<int>(s.dh),
                                                                                    y, inv);
  return Launched("HeadRmsNormForward");
}

absl::Status HeadRmsNormBackward(const HeadRowsShape& s, const __nv_bfloat16* x, const float* inv,
                                 const __nv_bfloat16* dy, __nv_bfloat16* dx, cudaStream_t stream) {
  if (absl::Status v = ValidateHeadRowsShape(s); !v.ok()) return v;
  HeadRmsNormBackwardKernel<<<RowBlocks(s.rows), kRowsPerBlock * kWarp, 0, stream>>>(x, inv, dy, s.rows,
                                                                                     static_cast<int>(s.dh), dx);
  return Launched("HeadRmsNormBackward");
}

}  // namespace gemtb::gpu::train
