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

#include "gpu/common/mma.cuh"
#include "gpu/train/gelu.cuh"

namespace gemtb::gpu::train::colsum {

// Rows of one block of the tree (model_kernels.h's kColumnSumsBlockRows).
constexpr int64_t kBlockRows = 64;

__device__ __forceinline__ float Load(const float* at) { return *at; }
__device__ __forceinline__ float Load(const uint16_t* at) { return Storage<ElementType::kBFloat16>::ToFloat(*at); }

// partial[blockIdx.y, c] = the sum of column c over rows [blockIdx.y kBlockRows, + kBlockRows), added
// in row order from 0; one thread a column, so adjacent threads read adjacent values of a row. With
// `rounded` (not null; rows `cols` apart): rounded[r, c] = x[r, c] in bf16 for the same rows. A grid of
// several z takes as many matrices of the same shape, matrix z at x + z x_stride, its partial rows at
// partial + z partial_stride.
template <typename T>
__global__ void ColumnBlockSumsKernel(const T* x, int64_t rows, int64_t cols, int64_t ldx, float* partial,
                                      uint16_t* rounded, int64_t x_stride = 0, int64_t partial_stride = 0) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  x += blockIdx.z * x_stride;
  partial += blockIdx.z * partial_stride;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kBlockRows;
  const int64_t r1 = r0 + kBlockRows < rows ? r0 + kBlockRows : rows;
  float s = 0.0f;
  if (rounded != nullptr) {
#pragma unroll 8
    for (int64_t r = r0; r < r1; ++r) {
      const float v = Load(x + r * ldx + c);
      rounded[r * cols + c] = Storage<ElementType::kBFloat16>::FromFloat(v);
      s = __fadd_rn(s, v);
    }
  } else {
#pragma unroll 16
    for (int64_t r = r0; r < r1; ++r) s = __fadd_rn(s, Load(x + r * ldx + c));
  }
  partial[static_cast<int64_t>(blockIdx.y) * cols + c] = s;
}

// GELU's backward with the first level of its result's column sums, for a product's input gradient du
// whose column sums are its bias's gradient: du[r, c] = dg[r, c] GELU'(u[r, c]) rounded to bf16 (the
// elementwise GeluBackward's bytes), and partial[blockIdx.y, c] the sum of the block's rounded du
// widened, in row order from 0 (ColumnBlockSumsKernel's sum over du), so du is not read again for the
// bias. bf16 rows as their bits, `cols` apart; one thread a column.
__global__ void GeluBackwardBlockSumsKernel(const uint16_t* u, const uint16_t* dg, int64_t rows, int64_t cols,
                                            uint16_t* du, float* partial) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kBlockRows;
  const int64_t r1 = r0 + kBlockRows < rows ? r0 + kBlockRows : rows;
  float s = 0.0f;
#pragma unroll 4
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t e = r * cols + c;
    const uint16_t d = Storage<ElementType::kBFloat16>::FromFloat(__fmul_rn(Load(dg + e), GeluGradOfBf16(Load(u + e))));
    du[e] = d;
    s = __fadd_rn(s, Load(&d));
  }
  partial[static_cast<int64_t>(blockIdx.y) * cols + c] = s;
}

}  // namespace gemtb::gpu::train::colsum

#endif  // GEMTB_GPU_TRAIN_COLUMN_SUMS_KERNELS_CUH_
