// The head RMS-norm kernels of head_rms_norm.h, device code only: head_rms_norm.cu launches them, and
// the CPU fiber emulation (tests/gpu/emulation/) builds them too, where the explicitly rounded
// operations are the host's IEEE fp32 ones, so the emulated bytes are the device's. Rows are fp32 or
// bf16 (T: float, or uint16_t holding bf16 bits): bf16 widens exactly, the math is fp32, and an output
// rounds (RNE) once as it is stored.
#ifndef GEMTB_GPU_TRAIN_HEAD_RMS_NORM_KERNELS_CUH_
#define GEMTB_GPU_TRAIN_HEAD_RMS_NORM_KERNELS_CUH_

#include <cstdint>

#include "gpu/common/dependent_launch.cuh"
#include "gpu/common/mma.cuh"
#include "gpu/train/block_copy.cuh"
#include "gpu/train/row_divisor.cuh"

namespace gemtb::gpu::train::hrn {

__device__ __forceinline__ float Load(float v) { return v; }
__device__ __forceinline__ float Load(uint16_t v) { return Storage<ElementType::kBFloat16>::ToFloat(v); }
template <typename T>
__device__ __forceinline__ T Store(float v) {
  if constexpr (sizeof(T) == sizeof(float)) {
    return v;
  } else {
    return Storage<ElementType::kBFloat16>::FromFloat(v);
  }
}

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
// The forward's block stages its rows in shared memory, about kStageElems elements,
// so that global memory sees contiguous 16-byte moves (block_copy.cuh) instead of a lane's 2- or
// 4-byte loads strided over the row; the arithmetic is the same. A block takes `passes` passes of
// kRowsPerPass rows (RowsPerBlock).
constexpr int kStageElems = 4096;

// The rows a block takes for rows of dh values: as many passes as fit kStageElems, at least one.
template <int kLanes>
inline int64_t RowsPerBlock(int64_t dh) {
  const int64_t passes = kStageElems / (dh * kRowsPerPass<kLanes>);
  return (passes > 1 ? passes : 1) * kRowsPerPass<kLanes>;
}

// Where head row r of x (and dx) is: rows of `heads` head rows, `ld` elements apart.
__device__ __forceinline__ int64_t HeadRowAt(int64_t r, int dh, int heads, int64_t ld) {
  return r / heads * ld + r % heads * dh;
}

// Head rows [first, first + n) of x into xs, dense: one span where x is dense (ld = heads * dh); else by
// 16-byte units where aligned (BlockCopyUnits): whole tokens' rows (heads * dh contiguous values) where
// the block's head rows are whole tokens, else each head row's from where HeadRowAt puts it; unaligned,
// value by value.
template <typename T>
__device__ void StageHeadRows(T* xs, const T* x, int64_t first, int n, int dh, int heads, int64_t ld) {
  if (ld == static_cast<int64_t>(heads) * dh) {
    BlockCopy<kThreads>(xs, x + first * dh, n * dh);
    return;
  }
  constexpr int kPerUnit = 16 / static_cast<int>(sizeof(T));
  const auto tid = static_cast<int>(threadIdx.x);
  if (dh % kPerUnit == 0 && ld % kPerUnit == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    auto* dst = reinterpret_cast<uint4*>(xs);
    const auto* src = reinterpret_cast<const uint4*>(x);
    const int64_t ld_units = ld / kPerUnit;
    if (first % heads == 0 && n % heads == 0) {
      const int token_units = heads * dh / kPerUnit;
      const int64_t first_token = first / heads;
      BlockCopyUnits<kThreads>(dst, src, n / heads * token_units, [=](int i) {
        return (first_token + i / token_units) * ld_units + i % token_units;
      });
    } else {
      const int row_units = dh / kPerUnit;
      BlockCopyUnits<kThreads>(dst, src, n * row_units, [=](int i) {
        return HeadRowAt(first + i / row_units, dh, heads, ld) / kPerUnit + i % row_units;
      });
    }
    return;
  }
  for (int e = tid; e < n * dh; e += kThreads) xs[e] = x[HeadRowAt(first + e / dh, dh, heads, ld) + e % dh];
}

// Rows [blockIdx.x * block_rows, + block_rows), block_rows = passes * kRowsPerPass, of x (head rows as
// HeadRowAt places them) into dense y and inv. Every lane takes part in the butterfly; rows past the
// end compute on zeros and write nothing. y is written over the staged x (a lane writes only the
// elements it read), then copied out.
template <typename T, int kLanes>
__global__ void __launch_bounds__(kThreads)
    HeadRmsNormForwardKernel(const T* x, int64_t rows, int dh, int heads, int64_t ld, T* y, float* inv,
                             int block_rows) {
  AwaitPriorGrids();
  extern __shared__ __align__(16) unsigned char staged[];
  T* xs = reinterpret_cast<T*>(staged);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * block_rows;
  const int n = static_cast<int>(min(static_cast<int64_t>(block_rows), rows - first));
  StageHeadRows(xs, x, first, n, dh, heads, ld);
  __syncthreads();
  const int g = threadIdx.x % kLanes;
  const RowDivisor per_value(dh);
  for (int base = 0; base < n; base += kRowsPerPass<kLanes>) {
    const int row = base + static_cast<int>(threadIdx.x) / kLanes;
    const bool real = row < n;
    T* xr = xs + row * dh;
    float ss = 0.0f;
    for (int i = g; i < dh; i += kLanes) {
      const float v = real ? Load(xr[i]) : 0.0f;
      ss = __fadd_rn(ss, __fmul_rn(v, v));
    }
    const float r =
        __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(per_value.Of(GroupSum<kLanes>(ss)), kEps)));
    if (!real) continue;
    for (int i = g; i < dh; i += kLanes) xr[i] = Store<T>(__fmul_rn(Load(xr[i]), r));
    if (g == 0) inv[first + row] = r;
  }
  __syncthreads();
  BlockCopy<kThreads>(y + first * dh, xs, n * dh);
}

// The backward reads x and dy where they are, kRowsPerPass rows a block: staged like the forward it
// took a third longer on the H100 (more registers, fewer blocks an SM; tools/bench/NOTES.md). x and dx
// head rows as HeadRowAt places them, dy and inv dense.
template <typename T, int kLanes>
__global__ void __launch_bounds__(kThreads)
    HeadRmsNormBackwardKernel(const T* x, const float* inv, const T* dy, int64_t rows, int dh, int heads, int64_t ld,
                              T* dx) {
  AwaitPriorGrids();
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerPass<kLanes> + threadIdx.x / kLanes;
  // Every lane takes part in the butterfly; rows past the end compute on row 0's values and write nothing.
  const bool real = row < rows;
  const int g = threadIdx.x % kLanes;
  const int64_t at = (real ? row : 0) * dh, ax = HeadRowAt(real ? row : 0, dh, heads, ld);
  const T* xr = x + ax;
  const T* dyr = dy + at;
  const float r = inv[real ? row : 0];
  float s = 0.0f;
  for (int i = g; i < dh; i += kLanes) s = __fadd_rn(s, __fmul_rn(Load(dyr[i]), __fmul_rn(Load(xr[i]), r)));
  s = __fdiv_rn(GroupSum<kLanes>(s), static_cast<float>(dh));  // one row a thread: RowDivisor would divide too
  if (!real) return;
  T* dxr = dx + ax;
  for (int i = g; i < dh; i += kLanes) {
    const float yv = __fmul_rn(Load(xr[i]), r);
    dxr[i] = Store<T>(__fmul_rn(r, __fsub_rn(Load(dyr[i]), __fmul_rn(yv, s))));
  }
}

}  // namespace gemtb::gpu::train::hrn

#endif  // GEMTB_GPU_TRAIN_HEAD_RMS_NORM_KERNELS_CUH_
