// Softmax backward preprocessing: D_i = rowsum(dO_i * O_i), O being the stored forward
// output (in the input type, as emulate mode's "D_i from the rounded O").
//
// D_i is taken on the tensor cores as the diagonal of dO Oᵀ, with the same fragment loads and the
// same k order as dP = dO Vᵀ in the backward kernels. Where a row's O equals a value row bit for bit
// (one valid key, post_scale = 1), dP and D_i then agree bit for bit and dS = P̂(dP - D_i) is exactly
// 0, as in the oracle: a plain fp32 loop would leave rounding noise in gradients whose exact value
// is 0, which no error bound relative to the reference can accept.
#ifndef GEMTB_GPU_ATTENTION_BACKWARD_ROW_DOT_CUH_
#define GEMTB_GPU_ATTENTION_BACKWARD_ROW_DOT_CUH_

#include "gpu/attention/params.h"
#include "gpu/common/mma.cuh"
#include "gpu/common/tile_io.cuh"

namespace gemtb::gpu {

template <int D>
struct RowDotSmem {
  static_assert(IsKernelHeadDim(D), "the mma.sync kernels are built for head dims 16, 32, 64 and 128");
  static constexpr int kLd = D + 8;
  static constexpr size_t kBytes = sizeof(uint16_t) * static_cast<size_t>(kLd) * 2 * kBlockM;
};

// blockIdx.x: 64 output rows, blockIdx.y: query head.
template <ElementType E, int D>
__global__ void __launch_bounds__(kThreads) RowDotKernel(const BackwardParams p) {
  constexpr int kLd = RowDotSmem<D>::kLd;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* s_do = smem;
  uint16_t* s_o = smem + kBlockM * kLd;
  const ProblemParams& pr = p.problem;
  const int h = static_cast<int>(blockIdx.y);
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kBlockM;
  const int rows = static_cast<int>(min(static_cast<int64_t>(kBlockM), pr.out_rows - row0));
  const int64_t stride = static_cast<int64_t>(pr.heads) * D;
  LoadRowsZeroFill<kBlockM, D, kThreads>(s_do, kLd, p.d_o + row0 * stride + h * D, stride, rows);
  LoadRowsZeroFill<kBlockM, D, kThreads>(s_o, kLd, p.o + row0 * stride + h * D, stride, rows);
  __syncthreads();

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const LaneCoords ln = Lane();
  float c[2][4] = {};
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t a[4];
    LoadA(s_do, kLd, warp * 16, kk * 16, a);
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      uint32_t b[2];
      LoadBFromRows(s_o, kLd, warp * 16 + n * 8, kk * 16, b);
      Mma16816<E>(c[n], a, b);
    }
  }
  // Diagonal element (g, g) of the warp's 16x16 block: column tile 0, element 2t + e == g; and
  // (g+8, g+8): column tile 1, rows g+8 (c2, c3).
  if ((ln.g >> 1) == ln.t) {
    const bool odd = (ln.g & 1) != 0;  // selects, not a run-time index: keeps c in registers
    const int r0 = warp * 16 + ln.g;
    if (r0 < rows) p.d_rows[h * pr.out_rows + row0 + r0] = odd ? c[0][1] : c[0][0];
    if (r0 + 8 < rows) p.d_rows[h * pr.out_rows + row0 + r0 + 8] = odd ? c[1][3] : c[1][2];
  }
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_BACKWARD_ROW_DOT_CUH_
