// The first level of model_kernels.h's ColumnSums tree, device code only: model_kernels.cu launches
// it, and the CPU fiber emulation (tests/gpu/emulation/) builds it too, where the explicitly rounded
// operations are the host's IEEE fp32 operations, so the emulated bytes are the device's. Rows are
// fp32 or bf16 (T: float, or uint16_t holding bf16 bits, widened exactly). Given `rounded`, the same
// pass over fp32 rows also writes them rounded to bf16 (to nearest, ties to even): a gradient that a
// bf16 product reads and whose column sums are a bias's gradient is then read once, not twice; so is
// GELU's backward result (GeluBackwardBlockSumsKernel).
#ifndef GEMTB_GPU_TRAIN_COLUMN_SUMS_KERNELS_CUH_
#define GEMTB_GPU_TRAIN_COLUMN_SUMS_KERNELS_CUH_

#include <cstdint>

#include "gpu/common/dependent_launch.cuh"
#include "gpu/common/mma.cuh"
#include "gpu/train/gelu.cuh"

namespace gemtb::gpu::train::colsum {

// Rows of one block of the tree (model_kernels.h's kColumnSumsBlockRows).
constexpr int64_t kBlockRows = 64;

__device__ __forceinline__ float Load(const float* at) { return *at; }
__device__ __forceinline__ float Load(const uint16_t* at) { return Storage<ElementType::kBFloat16>::ToFloat(*at); }

// kVec bf16 values (their bits) at `at`: one 16-byte access at kVec = 8 (at 16-byte aligned), else
// one 2-byte access.
template <int kVec>
__device__ __forceinline__ void LoadBf16(const uint16_t* at, uint16_t (&v)[kVec]) {
  if constexpr (kVec == 8) {
    const uint4 w = *reinterpret_cast<const uint4*>(at);
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = static_cast<uint16_t>(words[i] & 0xFFFFu);  // the lower address holds the lower half
      v[2 * i + 1] = static_cast<uint16_t>(words[i] >> 16);
    }
  } else {
    static_assert(kVec == 1, "1 or 8 values");
    v[0] = *at;
  }
}

template <int kVec>
__device__ __forceinline__ void StoreBf16(uint16_t* at, const uint16_t (&v)[kVec]) {
  if constexpr (kVec == 8) {
    *reinterpret_cast<uint4*>(at) =
        make_uint4(PackHalves(v[0], v[1]), PackHalves(v[2], v[3]), PackHalves(v[4], v[5]), PackHalves(v[6], v[7]));
  } else {
    at[0] = v[0];
  }
}

// kVec values of a row widened to fp32: one 16-byte access for fp32 rows at kVec = 4 and bf16 rows at
// kVec = 8 (at 16-byte aligned), else one access a value.
template <int kVec>
__device__ __forceinline__ void LoadWidened(const float* at, float (&v)[kVec]) {
  if constexpr (kVec == 4) {
    const float4 w = *reinterpret_cast<const float4*>(at);
    v[0] = w.x, v[1] = w.y, v[2] = w.z, v[3] = w.w;
  } else {
    static_assert(kVec == 1, "1 or 4 fp32 values");
    v[0] = *at;
  }
}
template <int kVec>
__device__ __forceinline__ void LoadWidened(const uint16_t* at, float (&v)[kVec]) {
  uint16_t bits[kVec];
  LoadBf16<kVec>(at, bits);
#pragma unroll
  for (int i = 0; i < kVec; ++i) v[i] = Load(&bits[i]);
}

// The values rounded to bf16 (to nearest, ties to even) at `at`: 8 bytes at kVec = 4 (at 8-byte
// aligned), else 2 a value.
template <int kVec>
__device__ __forceinline__ void StoreRounded(uint16_t* at, const float (&v)[kVec]) {
  constexpr ElementType kBf16 = ElementType::kBFloat16;
  if constexpr (kVec == 4) {
    *reinterpret_cast<uint2*>(at) = make_uint2(PackRounded<kBf16>(v[0], v[1]), PackRounded<kBf16>(v[2], v[3]));
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) at[i] = Storage<kBf16>::FromFloat(v[i]);
  }
}

// partial[blockIdx.y, c] = the sum of column c over rows [blockIdx.y kBlockRows, + kBlockRows), added
// in row order from 0. A thread takes kVec adjacent columns (1; or 4 of fp32 rows, 8 of bf16 ones, in
// 16-byte accesses, where the columns, the row stride and x_stride are multiples of kVec and x is
// 16-byte aligned), a sum per column, the same bytes at every kVec; adjacent threads read adjacent
// values of a row. With `rounded` (not null; rows `cols` apart, 8-byte aligned at kVec = 4):
// rounded[r, c] = x[r, c] in bf16 for the same rows. A grid of several z takes as many matrices of the
// same shape, matrix z at x + z x_stride, its partial rows at partial + z partial_stride.
template <typename T, int kVec = 1>
__global__ void ColumnBlockSumsKernel(const T* x, int64_t rows, int64_t cols, int64_t ldx, float* partial,
                                      uint16_t* rounded, int64_t x_stride = 0, int64_t partial_stride = 0) {
  AwaitPriorGrids();
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kVec;
  if (c >= cols) return;
  x += blockIdx.z * x_stride;
  partial += blockIdx.z * partial_stride;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kBlockRows;
  const int64_t r1 = r0 + kBlockRows < rows ? r0 + kBlockRows : rows;
  float s[kVec] = {};
  if (rounded != nullptr) {
    [[maybe_unused]] constexpr int kUnroll = kVec == 1 ? 8 : 4;  // host compilers ignore the pragma
#pragma unroll kUnroll
    for (int64_t r = r0; r < r1; ++r) {
      float v[kVec];
      LoadWidened<kVec>(x + r * ldx + c, v);
      StoreRounded<kVec>(rounded + r * cols + c, v);
#pragma unroll
      for (int i = 0; i < kVec; ++i) s[i] = __fadd_rn(s[i], v[i]);
    }
  } else {
    [[maybe_unused]] constexpr int kUnroll = kVec == 1 ? 16 : 4;
#pragma unroll kUnroll
    for (int64_t r = r0; r < r1; ++r) {
      float v[kVec];
      LoadWidened<kVec>(x + r * ldx + c, v);
#pragma unroll
      for (int i = 0; i < kVec; ++i) s[i] = __fadd_rn(s[i], v[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < kVec; ++i) partial[static_cast<int64_t>(blockIdx.y) * cols + c + i] = s[i];
}

// GELU's backward with the first level of its result's column sums, for a product's input gradient du
// whose column sums are its bias's gradient: du[r, c] = dg[r, c] GELU'(u[r, c]) rounded to bf16 (the
// elementwise GeluBackward's bytes), and partial[blockIdx.y, c] the sum of the block's rounded du
// widened, in row order from 0 (ColumnBlockSumsKernel's sum over du), so du is not read again for the
// bias. bf16 rows as their bits, `cols` apart. A thread takes kVec adjacent columns: 8 (16-byte
// accesses, a sum per column; cols a multiple of 8 and the rows 16-byte aligned) or 1, with the same
// bytes either way.
template <int kVec>
__global__ void GeluBackwardBlockSumsKernel(const uint16_t* u, const uint16_t* dg, int64_t rows, int64_t cols,
                                            uint16_t* du, float* partial) {
  AwaitPriorGrids();
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kVec;
  if (c >= cols) return;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kBlockRows;
  const int64_t r1 = r0 + kBlockRows < rows ? r0 + kBlockRows : rows;
  float s[kVec] = {};
  [[maybe_unused]] constexpr int kUnroll = kVec == 8 ? 2 : 4;  // host compilers ignore the pragma
#pragma unroll kUnroll
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t e = r * cols + c;
    uint16_t uv[kVec], gv[kVec], d[kVec];
    LoadBf16<kVec>(u + e, uv);
    LoadBf16<kVec>(dg + e, gv);
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      d[i] = Storage<ElementType::kBFloat16>::FromFloat(__fmul_rn(Load(&gv[i]), GeluGradOfBf16(Load(&uv[i]))));
      s[i] = __fadd_rn(s[i], Load(&d[i]));
    }
    StoreBf16<kVec>(du + e, d);
  }
#pragma unroll
  for (int i = 0; i < kVec; ++i) partial[static_cast<int64_t>(blockIdx.y) * cols + c + i] = s[i];
}

}  // namespace gemtb::gpu::train::colsum

#endif  // GEMTB_GPU_TRAIN_COLUMN_SUMS_KERNELS_CUH_
