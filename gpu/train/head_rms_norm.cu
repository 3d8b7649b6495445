#include "gpu/train/head_rms_norm.h"

#include "absl/strings/str_cat.h"
#include "gpu/train/kernel_utils.cuh"

namespace gemtb::gpu::train {
namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 8;
constexpr float kEps = 1e-6f;

// A row is taken by a group of kLanes lanes of one warp (kWarp / kLanes rows per warp), lane g of the
// group holding elements g, g + kLanes, ...: short rows (head dims 16 .. 64) use 8 lanes each, so a
// lane has several independent loads in flight instead of one. The group's sum is a fixed butterfly.
template <int kLanes>
__device__ float GroupSum(float v) {
  for (int offset = kLanes / 2; offset > 0; offset /= 2) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

template <int kLanes>
constexpr int kRowsPerBlock = kWarpsPerBlock * (kWarp / kLanes);

template <typename T, int kLanes>
__global__ void HeadRmsNormForwardKernel(const T* x, int64_t rows, int dh, T* y, float* inv) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock<kLanes> + threadIdx.x / kLanes;
  // Every lane takes part in the butterfly; rows past the end compute on row 0's values and write nothing.
  const bool real = row < rows;
  const int g = threadIdx.x % kLanes;
  const T* xr = x + (real ? row : 0) * dh;
  float ss = 0.0f;
  for (int i = g; i < dh; i += kLanes) {
    const float v = ToFloat(xr[i]);
    ss = __fadd_rn(ss, __fmul_rn(v, v));
  }
  const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(GroupSum<kLanes>(ss), static_cast<float>(dh)), kEps)));
  if (!real) return;
  T* yr = y + row * dh;
  for (int i = g; i < dh; i += kLanes) yr[i] = FromFloat<T>(__fmul_rn(ToFloat(xr[i]), r));
  if (g == 0) inv[row] = r;
}

template <typename T, int kLanes>
__global__ void HeadRmsNormBackwardKernel(const T* x, const float* inv, const T* dy, int64_t rows, int dh, T* dx) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock<kLanes> + threadIdx.x / kLanes;
  const bool real = row < rows;
  const int g = threadIdx.x % kLanes;
  const int64_t at = (real ? row : 0) * dh;
  const T* xr = x + at;
  const T* dyr = dy + at;
  const float r = inv[real ? row : 0];
  float s = 0.0f;
  for (int i = g; i < dh; i += kLanes) {
    s = __fadd_rn(s, __fmul_rn(ToFloat(dyr[i]), __fmul_rn(ToFloat(xr[i]), r)));
  }
  s = __fdiv_rn(GroupSum<kLanes>(s), static_cast<float>(dh));
  if (!real) return;
  T* dxr = dx + row * dh;
  for (int i = g; i < dh; i += kLanes) {
    const float yv = __fmul_rn(ToFloat(xr[i]), r);
    dxr[i] = FromFloat<T>(__fmul_rn(r, __fsub_rn(ToFloat(dyr[i]), __fmul_rn(yv, s))));
  }
}

template <int kLanes>
unsigned RowBlocks(int64_t rows) {
  return static_cast<unsigned>((rows + kRowsPerBlock<kLanes> - 1) / kRowsPerBlock<kLanes>);
}

// Head dims up to 64 take 8 lanes per row, longer rows a whole warp.
bool ShortRows(int64_t dh) { return dh <= 64; }

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
  const int dh = static_cast<int>(s.dh);
  if (ShortRows(s.dh)) {
    HeadRmsNormForwardKernel<T, 8><<<RowBlocks<8>(s.rows), kWarpsPerBlock * kWarp, 0, stream>>>(x, s.rows, dh, y, inv);
  } else {
    HeadRmsNormForwardKernel<T, kWarp><<<RowBlocks<kWarp>(s.rows), kWarpsPerBlock * kWarp, 0, stream>>>(x, s.rows, dh,
                                                                                                        y, inv);
  }
  return Launched("HeadRmsNormForward");
}

template <typename T>
absl::Status HeadRmsNormBackward(const HeadRowsShape& s, const T* x, const float* inv, const T* dy, T* dx,
                                 cudaStream_t stream) {
  if (absl::Status v = ValidateHeadRowsShape(s); !v.ok()) return v;
  const int dh = static_cast<int>(s.dh);
  if (ShortRows(s.dh)) {
    HeadRmsNormBackwardKernel<T, 8><<<RowBlocks<8>(s.rows), kWarpsPerBlock * kWarp, 0, stream>>>(x, inv, dy, s.rows,
                                                                                                 dh, dx);
  } else {
    HeadRmsNormBackwardKernel<T, kWarp><<<RowBlocks<kWarp>(s.rows), kWarpsPerBlock * kWarp, 0, stream>>>(
        x, inv, dy, s.rows, dh, dx);
  }
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
