#include "gpu/train/head_rms_norm.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "gpu/train/block_copy.cuh"
#include "gpu/train/kernel_utils.cuh"

namespace gemtb::gpu::train {
namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 8;
constexpr float kEps = 1e-6f;

// A row is taken by a group of kLanes lanes of one warp (kWarp / kLanes rows per warp), lane g of the
// group holding elements g, g + kLanes, ...: short rows (head dims 16 .. 64) use 8 lanes each. The
// group's sum is a fixed butterfly.
template <int kLanes>
__device__ float GroupSum(float v) {
  for (int offset = kLanes / 2; offset > 0; offset /= 2) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

constexpr int kThreads = kWarpsPerBlock * kWarp;
// Rows the block's groups take at a time.
template <int kLanes>
constexpr int kRowsPerPass = kWarpsPerBlock * (kWarp / kLanes);
// A block stages its rows (x, and dy backward) in shared memory, about kStageElems elements a tensor,
// so that global memory sees contiguous 16-byte moves (block_copy.cuh) instead of a lane's 2- or
// 4-byte loads strided over the row; the arithmetic is the same. A block takes `passes` passes of
// kRowsPerPass rows.
constexpr int kStageElems = 4096;

template <int kLanes>
int Passes(int64_t dh) {
  return static_cast<int>(std::max<int64_t>(1, kStageElems / (dh * kRowsPerPass<kLanes>)));
}

template <int kLanes>
int64_t RowsPerBlock(int64_t dh) {
  return int64_t{Passes<kLanes>(dh)} * kRowsPerPass<kLanes>;
}

// Rows [blockIdx.x * block_rows, + block_rows), block_rows = passes * kRowsPerPass. Every lane takes
// part in the butterfly; rows past the end compute on zeros and write nothing. y is written over the
// staged x (a lane writes only the elements it read), then copied out.
template <typename T, int kLanes>
__global__ void __launch_bounds__(kThreads)
    HeadRmsNormForwardKernel(const T* x, int64_t rows, int dh, T* y, float* inv, int block_rows) {
  extern __shared__ __align__(16) unsigned char staged[];
  T* xs = reinterpret_cast<T*>(staged);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * block_rows;
  const int n = static_cast<int>(std::min<int64_t>(block_rows, rows - first));
  BlockCopy<kThreads>(xs, x + first * dh, n * dh);
  __syncthreads();
  const int g = threadIdx.x % kLanes;
  for (int base = 0; base < n; base += kRowsPerPass<kLanes>) {
    const int row = base + static_cast<int>(threadIdx.x) / kLanes;
    const bool real = row < n;
    T* xr = xs + row * dh;
    float ss = 0.0f;
    for (int i = g; i < dh; i += kLanes) {
      const float v = real ? ToFloat(xr[i]) : 0.0f;
      ss = __fadd_rn(ss, __fmul_rn(v, v));
    }
    const float r =
        __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(GroupSum<kLanes>(ss), static_cast<float>(dh)), kEps)));
    if (!real) continue;
    for (int i = g; i < dh; i += kLanes) xr[i] = FromFloat<T>(__fmul_rn(ToFloat(xr[i]), r));
    if (g == 0) inv[first + row] = r;
  }
  __syncthreads();
  BlockCopy<kThreads>(y + first * dh, xs, n * dh);
}

// dx is written over the staged dy, then copied out.
template <typename T, int kLanes>
__global__ void __launch_bounds__(kThreads) HeadRmsNormBackwardKernel(const T* x, const float* inv, const T* dy,
                                                                      int64_t rows, int dh, T* dx, int block_rows) {
  extern __shared__ __align__(16) unsigned char staged[];
  const int64_t first = static_cast<int64_t>(blockIdx.x) * block_rows;
  const int n = static_cast<int>(std::min<int64_t>(block_rows, rows - first));
  T* xs = reinterpret_cast<T*>(staged);
  T* ds = xs + block_rows * dh;
  BlockCopy<kThreads>(xs, x + first * dh, n * dh);
  BlockCopy<kThreads>(ds, dy + first * dh, n * dh);
  __syncthreads();
  const int g = threadIdx.x % kLanes;
  for (int base = 0; base < n; base += kRowsPerPass<kLanes>) {
    const int row = base + static_cast<int>(threadIdx.x) / kLanes;
    const bool real = row < n;
    const T* xr = xs + row * dh;
    T* dr = ds + row * dh;
    const float r = real ? inv[first + row] : 0.0f;
    float s = 0.0f;
    for (int i = g; i < dh; i += kLanes) {
      if (real) s = __fadd_rn(s, __fmul_rn(ToFloat(dr[i]), __fmul_rn(ToFloat(xr[i]), r)));
    }
    s = __fdiv_rn(GroupSum<kLanes>(s), static_cast<float>(dh));
    if (!real) continue;
    for (int i = g; i < dh; i += kLanes) {
      const float yv = __fmul_rn(ToFloat(xr[i]), r);
      dr[i] = FromFloat<T>(__fmul_rn(r, __fsub_rn(ToFloat(dr[i]), __fmul_rn(yv, s))));
    }
  }
  __syncthreads();
  BlockCopy<kThreads>(dx + first * dh, ds, n * dh);
}

// Launches kernel over `rows` rows with `tensors` staged tensors of T.
template <typename T, int kLanes, typename Kernel, typename... Args>
absl::Status LaunchStaged(Kernel* kernel, int tensors, const HeadRowsShape& s, cudaStream_t stream, const char* what,
                          Args... args) {
  const int64_t block_rows = RowsPerBlock<kLanes>(s.dh);
  const size_t bytes = static_cast<size_t>(tensors * block_rows * s.dh) * sizeof(T);
  if (bytes > 48 * 1024) {  // rows longer than 512 values
    if (absl::Status a = AllowSharedMemory(kernel, bytes, what); !a.ok()) return a;
  }
  const auto blocks = static_cast<unsigned>((s.rows + block_rows - 1) / block_rows);
  kernel<<<blocks, kThreads, bytes, stream>>>(args..., static_cast<int>(block_rows));
  return Launched(what);
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
  constexpr const char* kWhat = "HeadRmsNormForward";
  return ShortRows(s.dh) ? LaunchStaged<T, 8>(HeadRmsNormForwardKernel<T, 8>, 1, s, stream, kWhat, x, s.rows, dh, y, inv)
                         : LaunchStaged<T, kWarp>(HeadRmsNormForwardKernel<T, kWarp>, 1, s, stream, kWhat, x, s.rows,
                                                  dh, y, inv);
}

template <typename T>
absl::Status HeadRmsNormBackward(const HeadRowsShape& s, const T* x, const float* inv, const T* dy, T* dx,
                                 cudaStream_t stream) {
  if (absl::Status v = ValidateHeadRowsShape(s); !v.ok()) return v;
  const int dh = static_cast<int>(s.dh);
  constexpr const char* kWhat = "HeadRmsNormBackward";
  return ShortRows(s.dh) ? LaunchStaged<T, 8>(HeadRmsNormBackwardKernel<T, 8>, 2, s, stream, kWhat, x, inv, dy,
                                              s.rows, dh, dx)
                         : LaunchStaged<T, kWarp>(HeadRmsNormBackwardKernel<T, kWarp>, 2, s, stream, kWhat, x, inv,
                                                  dy, s.rows, dh, dx);
}

template absl::Status HeadRmsNormForward<float>(const HeadRowsShape&, const float*, float*, float*, cudaStream_t);
template absl::Status HeadRmsNormForward<__nv_bfloat16>(const HeadRowsShape&, const __nv_bfloat16*, __nv_bfloat16*,
                                                        float*, cudaStream_t);
template absl::Status HeadRmsNormBackward<float>(const HeadRowsShape&, const float*, const float*, const float*,
                                                 float*, cudaStream_t);
template absl::Status HeadRmsNormBackward<__nv_bfloat16>(const HeadRowsShape&, const __nv_bfloat16*, const float*,
                                                         const __nv_bfloat16*, __nv_bfloat16*, cudaStream_t);

}  // namespace gemtb::gpu::train
