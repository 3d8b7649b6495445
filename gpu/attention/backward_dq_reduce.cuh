// The second half of a split dQ tile (params.h DqTile): dQ = pre * (sum of the parts' fp32 sums, in
// slot order), rounded once to the input type. One CTA per (split tile, query head). Plain CUDA
// (no wgmma), shared by the mma.sync and the Hopper dQ kernels and run by the CPU emulation.
#ifndef GEMTB_GPU_ATTENTION_BACKWARD_DQ_REDUCE_CUH_
#define GEMTB_GPU_ATTENTION_BACKWARD_DQ_REDUCE_CUH_

#include "gpu/attention/params.h"
#include "gpu/common/mma.cuh"

namespace gemtb::gpu {

template <ElementType E, int D>
__global__ void __launch_bounds__(kThreads) DqReduceKernel(const BackwardParams p) {
  const DqReduce r = p.dq_reduce[blockIdx.x];
  const int h = static_cast<int>(blockIdx.y);
  const int heads = p.problem.heads;
  for (int idx = static_cast<int>(threadIdx.x); idx < r.rows * (D / 2); idx += kThreads) {
    const int row = idx / (D / 2);
    const int col = 2 * (idx % (D / 2));
    float a = 0.f, b = 0.f;
    for (int s = 0; s < r.slot_count; ++s) {
      const float* src =
          p.dq_partial + ((static_cast<int64_t>(r.slot_begin + s) * heads + h) * kBlockM + row) * D + col;
      a += src[0];
      b += src[1];
    }
    const int64_t at = ((r.q_begin + r.i0 + row) * heads + h) * D + col;
    *reinterpret_cast<uint32_t*>(p.dq + at) = PackRounded<E>(p.problem.pre_scale * a, p.problem.pre_scale * b);
  }
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_BACKWARD_DQ_REDUCE_CUH_
