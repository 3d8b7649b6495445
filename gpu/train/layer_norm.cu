#include "gpu/train/layer_norm.h"

#include <cstdint>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "gpu/common/dependent_launch.cuh"
#include "gpu/train/gelu.cuh"
#include "gpu/train/kernel_utils.cuh"
#include "gpu/train/layer_norm_kernels.cuh"
#include "gpu/train/layer_norm_partials.cuh"
#include "gpu/train/model_kernels.h"

namespace gemtb::gpu::train {
namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;  // one warp each

template <typename T, typename TOut = T>
__global__ void LayerNormForwardKernel(const T* x, const float* gamma, const float* beta, int64_t n, int width, TOut* y,
                                       float* mean_out, float* rstd_out) {
  AwaitPriorGrids();
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= n) return;
  const int lane = threadIdx.x % kWarp;
  const T* xr = x + row * width;
  float mean, rstd;
  ln::RowStats(width, lane, [&](int i) { return ToFloat(xr[i]); }, mean, rstd);
  TOut* yr = y + row * width;
  for (int i = lane; i < width; i += kWarp) {
    yr[i] = FromFloat<TOut>(ln::Normalized(ToFloat(xr[i]), mean, rstd, gamma[i], beta[i]));
  }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

template <typename T>
__global__ void LayerNormBackwardInputKernel(const T* x, const float* gamma, const float* mean_in, const float* rstd_in,
                                             const T* dy, int64_t n, int width, T* dx, bool accumulate) {
  AwaitPriorGrids();
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= n) return;
  const int lane = threadIdx.x % kWarp;
  const T* xr = x + row * width;
  const T* dyr = dy + row * width;
  const float mean = mean_in[row], rstd = rstd_in[row];
  float sum = 0.0f, sum_h = 0.0f;
  for (int i = lane; i < width; i += kWarp) {
    const float h = __fmul_rn(__fsub_rn(ToFloat(xr[i]), mean), rstd);
    const float dh = __fmul_rn(ToFloat(dyr[i]), gamma[i]);
    sum = __fadd_rn(sum, dh);
    sum_h = __fadd_rn(sum_h, __fmul_rn(dh, h));
  }
  sum = __fdiv_rn(WarpSum(sum), static_cast<float>(width));
  sum_h = __fdiv_rn(WarpSum(sum_h), static_cast<float>(width));
  T* dxr = dx + row * width;
  for (int i = lane; i < width; i += kWarp) {
    const float h = __fmul_rn(__fsub_rn(ToFloat(xr[i]), mean), rstd);
    const float dh = __fmul_rn(ToFloat(dyr[i]), gamma[i]);
    const float g = __fmul_rn(rstd, __fsub_rn(__fsub_rn(dh, sum), __fmul_rn(h, sum_h)));
    dxr[i] = FromFloat<T>(accumulate ? __fadd_rn(ToFloat(dxr[i]), g) : g);
  }
}

// Rows [blockIdx.y kColumnSumsBlockRows, + kColumnSumsBlockRows) of sum_i dy[i,j] xhat[i,j] and
// sum_i dy[i,j], in increasing order, into g_part[blockIdx.y, j] and b_part[blockIdx.y, j].
template <typename T>
__global__ void LayerNormBackwardParamsKernel(const T* x, const float* mean_in, const float* rstd_in, const T* dy,
                                              int64_t n, int width, float* g_part, float* b_part) {
  AwaitPriorGrids();
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= width) return;
  const int64_t i0 = static_cast<int64_t>(blockIdx.y) * kColumnSumsBlockRows;
  const int64_t i1 = i0 + kColumnSumsBlockRows < n ? i0 + kColumnSumsBlockRows : n;
  float g = 0.0f, b = 0.0f;
  for (int64_t i = i0; i < i1; ++i) {
    const float d = ToFloat(dy[i * width + j]);
    const float h = __fmul_rn(__fsub_rn(ToFloat(x[i * width + j]), mean_in[i]), rstd_in[i]);
    g = __fadd_rn(g, __fmul_rn(d, h));
    b = __fadd_rn(b, d);
  }
  g_part[blockIdx.y * static_cast<int64_t>(width) + j] = g;
  b_part[blockIdx.y * static_cast<int64_t>(width) + j] = b;
}

// GELU's elementwise kernels move 16-byte chunks (8 bf16 or 4 fp32 values: one load and one store of
// each array instead of one per value) when every pointer is 16-byte aligned, else the same values one
// at a time; each value gets the same operations either way. A forward thread takes kGeluForwardChunks
// chunks, a block's width apart, and issues all their loads before it computes, so that more loads are
// in flight. A backward thread takes one chunk: at fp32 its evaluation (erfc and exp), not its loads,
// bounds it, and more chunks a thread cost it registers and occupancy.
template <typename T>
constexpr int kGeluVector = 16 / sizeof(T);

// gelu.cuh's evaluation for a result stored as T: the tail form at bf16, erfcf's at fp32.
template <typename T>
__device__ __forceinline__ float GeluFor(float v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return GeluOfBf16(v);
  } else {
    return GeluOf(v);
  }
}
template <typename T>
__device__ __forceinline__ float GeluGradFor(float v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return GeluGradOfBf16(v);
  } else {
    return GeluGradOf(v);
  }
}
constexpr int kGeluThreads = 256;
constexpr int kGeluForwardChunks = 4;

template <typename T>
__global__ void __launch_bounds__(kGeluThreads) GeluForwardKernel(const T* x, int64_t count, T* y, bool vector) {
  AwaitPriorGrids();
  constexpr int kN = kGeluVector<T>;
  // The thread's chunks: first + j kGeluThreads.
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kGeluThreads * kGeluForwardChunks + threadIdx.x;
  uint4 in[kGeluForwardChunks];
#pragma unroll
  for (int j = 0; j < kGeluForwardChunks; ++j) {
    const int64_t c = first + j * kGeluThreads;
    if (vector && (c + 1) * kN <= count) in[j] = __ldg(reinterpret_cast<const uint4*>(x) + c);
  }
#pragma unroll
  for (int j = 0; j < kGeluForwardChunks; ++j) {
    const int64_t c = first + j * kGeluThreads, e0 = c * kN;
    if (vector && e0 + kN <= count) {
      const T* xs = reinterpret_cast<const T*>(&in[j]);
      uint4 out;
      T* ys = reinterpret_cast<T*>(&out);
#pragma unroll
      for (int i = 0; i < kN; ++i) ys[i] = FromFloat<T>(GeluFor<T>(ToFloat(xs[i])));
      reinterpret_cast<uint4*>(y)[c] = out;
    } else {
      for (int64_t e = e0; e < e0 + kN && e < count; ++e) y[e] = FromFloat<T>(GeluFor<T>(ToFloat(x[e])));
    }
  }
}

template <typename T>
__global__ void GeluBackwardKernel(const T* x, const T* dy, int64_t count, T* dx, bool vector) {
  AwaitPriorGrids();
  constexpr int kN = kGeluVector<T>;
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t e0 = chunk * kN;
  if (e0 >= count) return;
  if (vector && e0 + kN <= count) {
    const uint4 in = reinterpret_cast<const uint4*>(x)[chunk], din = reinterpret_cast<const uint4*>(dy)[chunk];
    const T* xs = reinterpret_cast<const T*>(&in);
    const T* dys = reinterpret_cast<const T*>(&din);
    uint4 out;
    T* dxs = reinterpret_cast<T*>(&out);
#pragma unroll
    for (int i = 0; i < kN; ++i) dxs[i] = FromFloat<T>(__fmul_rn(ToFloat(dys[i]), GeluGradFor<T>(ToFloat(xs[i]))));
    reinterpret_cast<uint4*>(dx)[chunk] = out;
    return;
  }
  for (int64_t e = e0; e < e0 + kN && e < count; ++e) {
    dx[e] = FromFloat<T>(__fmul_rn(ToFloat(dy[e]), GeluGradFor<T>(ToFloat(x[e]))));
  }
}

unsigned RowBlocks(int64_t n) { return static_cast<unsigned>((n + kRowsPerBlock - 1) / kRowsPerBlock); }

template <int kCols, typename T, typename TOut>
void LaunchForwardRows(const RowsShape& s, const T* x, const float* gamma, const float* beta, TOut* y, float* mean,
                       float* rstd, cudaStream_t stream) {
  using In = typename BitsOf<T>::type;
  using Out = typename BitsOf<TOut>::type;
  LaunchDependent(ln::ForwardRowsKernel<kCols, In, Out>, ln::ForwardRowsBlocks<kCols>(s.n), ln::kThreads, 0, stream,
                  reinterpret_cast<const In*>(x), gamma, beta, s.n, static_cast<int>(s.width),
                  reinterpret_cast<Out*>(y), mean, rstd);
}

// Rows of at most ln::kFusedMaxWidth values by ln::ForwardRowsKernel, wider ones a warp a row.
template <typename T, typename TOut>
absl::Status ForwardRows(const RowsShape& s, const T* x, const float* gamma, const float* beta, TOut* y, float* mean,
                         float* rstd, cudaStream_t stream) {
  if (absl::Status v = ValidateRowsShape(s); !v.ok()) return v;
  if (s.width <= 4 * kWarp) {
    LaunchForwardRows<4>(s, x, gamma, beta, y, mean, rstd, stream);
  } else if (s.width <= 8 * kWarp) {
    LaunchForwardRows<8>(s, x, gamma, beta, y, mean, rstd, stream);
  } else if (s.width <= ln::kFusedMaxWidth) {
    LaunchForwardRows<16>(s, x, gamma, beta, y, mean, rstd, stream);
  } else {
    LaunchDependent(LayerNormForwardKernel<T, TOut>, RowBlocks(s.n), kRowsPerBlock * kWarp, 0, stream, x, gamma, beta,
                    s.n, static_cast<int>(s.width), y, mean, rstd);
  }
  return Launched("LayerNormForward");
}

static_assert(ln::kBlockRows == kColumnSumsBlockRows, "the fused kernel's partial rows are ColumnSums' blocks");

// The fused backward (layer_norm_kernels.cuh) with kCols columns per lane into part [2, blocks, width]
// (with next_rows, [3, blocks, width]: the third the handed-on dx's partial rows, WithLayerNormPartials'
// layout).
template <int kCols, typename Dy>
absl::Status LaunchFusedBackward(const RowsShape& s, const float* x, const float* gamma, const float* mean,
                                 const float* rstd, const Dy* dy, float* dx, bool accumulate_dx, int64_t blocks,
                                 float* part, __nv_bfloat16* next_rows, cudaStream_t stream) {
  using In = typename BitsOf<Dy>::type;
  const int width = static_cast<int>(s.width);
  const In* dy_bits = reinterpret_cast<const In*>(dy);
  if (next_rows != nullptr) {
    const ln::HandoffOut next{reinterpret_cast<uint16_t*>(next_rows), part + 2 * blocks * width};
    LaunchDependent(ln::BackwardFusedKernel<kCols, In, true>, static_cast<unsigned>(blocks), ln::kThreads,
                    ln::FusedSharedBytes(width, 3), stream, x, gamma, mean, rstd, dy_bits, s.n, width, dx,
                    accumulate_dx, part, part + blocks * width, next);
  } else {
    LaunchDependent(ln::BackwardFusedKernel<kCols, In, false>, static_cast<unsigned>(blocks), ln::kThreads,
                    ln::FusedSharedBytes(width), stream, x, gamma, mean, rstd, dy_bits, s.n, width, dx, accumulate_dx,
                    part, part + blocks * width, ln::HandoffOut{});
  }
  return Launched("LayerNormBackward (fused)");
}

// dx and the parameters' partial rows of fp32 rows in one pass, where the row fits the fused kernel.
template <typename Dy>
absl::Status FusedBackward(const RowsShape& s, const float* x, const float* gamma, const float* mean, const float* rstd,
                           const Dy* dy, float* dx, bool accumulate_dx, int64_t blocks, float* part,
                           __nv_bfloat16* next_rows, cudaStream_t stream) {
  if (s.width <= 4 * ln::kWarp)
    return LaunchFusedBackward<4>(s, x, gamma, mean, rstd, dy, dx, accumulate_dx, blocks, part, next_rows, stream);
  if (s.width <= 8 * ln::kWarp)
    return LaunchFusedBackward<8>(s, x, gamma, mean, rstd, dy, dx, accumulate_dx, blocks, part, next_rows, stream);
  return LaunchFusedBackward<16>(s, x, gamma, mean, rstd, dy, dx, accumulate_dx, blocks, part, next_rows, stream);
}

}  // namespace

absl::Status ValidateRowsShape(const RowsShape& s) {
  if (s.n < 1 || s.n >= (int64_t{1} << 31)) return absl::InvalidArgumentError(absl::StrCat("n=", s.n, ": want 1 .. 2^31-1"));
  if (s.width < 1 || s.width > 65536) {
    return absl::InvalidArgumentError(absl::StrCat("width=", s.width, ": want 1 .. 65536"));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status LayerNormForward(const RowsShape& s, const T* x, const float* gamma, const float* beta, T* y, float* mean,
                              float* rstd, cudaStream_t stream) {
  return ForwardRows(s, x, gamma, beta, y, mean, rstd, stream);
}

absl::Status LayerNormForward(const RowsShape& s, const float* x, const float* gamma, const float* beta,
                              __nv_bfloat16* y, float* mean, float* rstd, cudaStream_t stream) {
  return ForwardRows(s, x, gamma, beta, y, mean, rstd, stream);
}

template <typename T>
absl::Status LayerNormBackward(const RowsShape& s, const T* x, const float* gamma, const float* mean, const float* rstd,
                               const T* dy, T* dx, float* dgamma, float* dbeta, cudaStream_t stream,
                               bool accumulate_dx) {
  if (absl::Status v = ValidateRowsShape(s); !v.ok()) return v;
  const int width = static_cast<int>(s.width);
  // Blocks of rows side by side (ColumnSums' partitioned order), then their sums added in order.
  const int64_t blocks = (s.n + kColumnSumsBlockRows - 1) / kColumnSumsBlockRows;
  // fp32 rows that fit the fused kernel: dx and the blocks' partial rows in one pass over x and dy.
  const bool fused = std::is_same_v<T, float> && width <= ln::kFusedMaxWidth;
  if (!fused && blocks > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("LayerNormBackward: n=", s.n, " rows: too many"));
  }
  // The blocks' partial rows: the fused kernel's (part is g_part, then b_part), else the parameters
  // kernel's beside the input gradient's.
  const auto launch = [&](float* g_part, float* b_part) -> absl::Status {
    if constexpr (std::is_same_v<T, float>) {
      if (fused) return FusedBackward(s, x, gamma, mean, rstd, dy, dx, accumulate_dx, blocks, g_part, nullptr, stream);
    }
    LaunchDependent(LayerNormBackwardInputKernel<T>, RowBlocks(s.n), kRowsPerBlock * kWarp, 0, stream, x, gamma, mean,
                    rstd, dy, s.n, width, dx, accumulate_dx);
    if (absl::Status l = Launched("LayerNormBackward (dx)"); !l.ok()) return l;
    constexpr int kThreads = 256;
    LaunchDependent(LayerNormBackwardParamsKernel<T>,
                    dim3((width + kThreads - 1) / kThreads, static_cast<unsigned>(blocks)), kThreads, 0, stream, x,
                    mean, rstd, dy, s.n, width, g_part, b_part);
    return Launched("LayerNormBackward (dgamma, dbeta)");
  };
  return WithLayerNormPartials(blocks, width, dgamma, dbeta, stream, "LayerNormBackward scratch", launch);
}

template <typename Dy>
absl::Status LayerNormBackwardRows(const RowsShape& s, const float* x, const float* gamma, const float* mean,
                                   const float* rstd, const Dy* dy, float* dx, float* dgamma, float* dbeta,
                                   const Bf16Handoff* next, cudaStream_t stream, bool accumulate_dx) {
  if (absl::Status v = ValidateRowsShape(s); !v.ok()) return v;
  static_assert(kBackwardRowsMaxWidth == ln::kFusedMaxWidth, "LayerNormBackwardRows is the fused kernel");
  if (s.width > kBackwardRowsMaxWidth) {
    return absl::InvalidArgumentError(
        absl::StrCat("LayerNormBackwardRows: width=", s.width, ": want at most ", kBackwardRowsMaxWidth));
  }
  if (next != nullptr && (next->rows == nullptr || next->column_sums == nullptr)) {
    return absl::InvalidArgumentError("LayerNormBackwardRows: next: rows and column_sums must both be set");
  }
  const int64_t width = s.width, blocks = (s.n + kColumnSumsBlockRows - 1) / kColumnSumsBlockRows;
  return WithLayerNormPartials(
      blocks, width, dgamma, dbeta, stream, "LayerNormBackward scratch",
      [&](float* g_part, float*) {
        return FusedBackward(s, x, gamma, mean, rstd, dy, dx, accumulate_dx, blocks, g_part,
                             next != nullptr ? next->rows : nullptr, stream);
      },
      next != nullptr ? next->column_sums : nullptr);
}

template <typename T>
absl::Status GeluForward(const T* x, int64_t count, T* y, cudaStream_t stream) {
  if (absl::Status v = ValidateCount(count); !v.ok()) return v;
  constexpr int64_t kPerBlock = int64_t{kGeluThreads} * kGeluForwardChunks * kGeluVector<T>;
  LaunchDependent(GeluForwardKernel<T>, static_cast<unsigned>((count + kPerBlock - 1) / kPerBlock), kGeluThreads, 0,
                  stream, x, count, y, Aligned16({x, y}));
  return Launched("GeluForward");
}

template <typename T>
absl::Status GeluBackward(const T* x, const T* dy, int64_t count, T* dx, cudaStream_t stream) {
  if (absl::Status v = ValidateCount(count); !v.ok()) return v;
  constexpr int64_t kPerBlock = int64_t{kGeluThreads} * kGeluVector<T>;
  LaunchDependent(GeluBackwardKernel<T>, static_cast<unsigned>((count + kPerBlock - 1) / kPerBlock), kGeluThreads, 0,
                  stream, x, dy, count, dx, Aligned16({x, dy, dx}));
  return Launched("GeluBackward");
}

template absl::Status LayerNormForward<float>(const RowsShape&, const float*, const float*, const float*, float*,
                                              float*, float*, cudaStream_t);
template absl::Status LayerNormForward<__nv_bfloat16>(const RowsShape&, const __nv_bfloat16*, const float*,
                                                      const float*, __nv_bfloat16*, float*, float*, cudaStream_t);
template absl::Status LayerNormBackward<float>(const RowsShape&, const float*, const float*, const float*, const float*,
                                               const float*, float*, float*, float*, cudaStream_t, bool);
template absl::Status LayerNormBackward<__nv_bfloat16>(const RowsShape&, const __nv_bfloat16*, const float*,
                                                       const float*, const float*, const __nv_bfloat16*,
                                                       __nv_bfloat16*, float*, float*, cudaStream_t, bool);
template absl::Status LayerNormBackwardRows<float>(const RowsShape&, const float*, const float*, const float*,
                                                   const float*, const float*, float*, float*, float*,
                                                   const Bf16Handoff*, cudaStream_t, bool);
template absl::Status LayerNormBackwardRows<__nv_bfloat16>(const RowsShape&, const float*, const float*, const float*,
                                                           const float*, const __nv_bfloat16*, float*, float*, float*,
                                                           const Bf16Handoff*, cudaStream_t, bool);
template absl::Status GeluForward<float>(const float*, int64_t, float*, cudaStream_t);
template absl::Status GeluForward<__nv_bfloat16>(const __nv_bfloat16*, int64_t, __nv_bfloat16*, cudaStream_t);
template absl::Status GeluBackward<float>(const float*, const float*, int64_t, float*, cudaStream_t);
template absl::Status GeluBackward<__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*, int64_t,
                                                  __nv_bfloat16*, cudaStream_t);

}  // namespace gemtb::gpu::train
