// The second half of a split dQ tile (params.h DqTile): dQ = pre * (sum of the parts' fp32 sums, in
// slot order), rounded once to the input type. One CTA per (split tile, group of
// kDqReduceRowsPerCta rows, query head): a tile can have hundreds of parts (PMA: 576), and one CTA
// per tile summed them at a few loads in flight per thread. Plain CUDA (no wgmma), shared by the
// mma.sync and the Hopper dQ kernels and run by the CPU emulation.
#ifndef GEMTB_GPU_ATTENTION_BACKWARD_DQ_REDUCE_CUH_
#define GEMTB_GPU_ATTENTION_BACKWARD_DQ_REDUCE_CUH_

#include "gpu/attention/params.h"
#include "gpu/common/mma.cuh"

namespace gemtb::gpu {

inline constexpr int kDqReduceRowsPerCta = 4;
inline constexpr int kDqReduceCtasPerTile = kBlockM / kDqReduceRowsPerCta;

// blockIdx.x = split tile * kDqReduceCtasPerTile + row group, blockIdx.y = query head.
template <ElementType E, int D>
__global__ void __launch_bounds__(kThreads) DqReduceKernel(const BackwardParams p) {
  const DqReduce r = p.dq_reduce[blockIdx.x / kDqReduceCtasPerTile];
  const int row0 = static_cast<int>(blockIdx.x % kDqReduceCtasPerTile) * kDqReduceRowsPerCta;
  const int h = static_cast<int>(blockIdx.y);
  const int heads = p.problem.heads;
  const int64_t slot_stride = static_cast<int64_t>(heads) * kBlockM * D;
  for (int idx = static_cast<int>(threadIdx.x); idx < kDqReduceRowsPerCta * (D / 4); idx += kThreads) {
    const int row = row0 + idx / (D / 4);
    const int col = 4 * (idx % (D / 4));
    if (row >= r.rows) continue;
    const float* src = p.dq_partial + ((static_cast<int64_t>(r.slot_begin) * heads + h) * kBlockM + row) * D + col;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 4
    for (int s = 0; s < r.slot_count; ++s) {
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[c] += src[s * slot_stride + c];
    }
    uint16_t* dst = p.dq + ((r.q_begin + r.i0 + row) * heads + h) * D + col;
    const float pre = p.problem.pre_scale;
    *reinterpret_cast<uint32_t*>(dst) = PackRounded<E>(pre * acc[0], pre * acc[1]);
    *reinterpret_cast<uint32_t*>(dst + 2) = PackRounded<E>(pre * acc[2], pre * acc[3]);
  }
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_BACKWARD_DQ_REDUCE_CUH_
