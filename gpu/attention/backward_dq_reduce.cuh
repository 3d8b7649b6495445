// The second half of a split dQ tile (params.h DqTile): dQ = pre * (sum of the parts' fp32 sums, in
// slot order), rounded once to the input type. One CTA per (split tile, group of
// kDqReduceRowsPerCta rows, query head): a tile can have hundreds of parts (PMA: 576). Plain CUDA
// (no wgmma), shared by the mma.sync and the Hopper dQ kernels and run by the CPU emulation.
#ifndef GEMTB_GPU_ATTENTION_BACKWARD_DQ_REDUCE_CUH_
#define GEMTB_GPU_ATTENTION_BACKWARD_DQ_REDUCE_CUH_

#include "gpu/attention/params.h"
#include "gpu/common/mma.cuh"

namespace gemtb::gpu {

// Each thread sums two adjacent columns of one row over the tile's slots (PMA: 576), in slot order
// from 0.f, with kDqReduceBatch slots' loads in flight before their adds: one load at a time per
// chain leaves the kernel latency-bound (Nsight Compute: PMA's reduce 233 us for 38 MB, DRAM 3.5%
// busy, 64 CTAs; tools/bench/NOTES.md). Rows past the tile's `rows` exit at once.
inline constexpr int kDqReduceRowsPerCta = 2;
inline constexpr int kDqReduceCtasPerTile = kBlockM / kDqReduceRowsPerCta;
inline constexpr int kDqReduceBatch = 32;

// blockIdx.x = split tile * kDqReduceCtasPerTile + row group, blockIdx.y = query head.
template <ElementType E, int D>
__global__ void __launch_bounds__(kThreads) DqReduceKernel(const BackwardParams p) {
  static_assert(IsKernelHeadDim(D), "the mma.sync kernels are built for head dims 16, 32, 64 and 128");
  const DqReduce r = p.dq_reduce[blockIdx.x / kDqReduceCtasPerTile];
  const int row0 = static_cast<int>(blockIdx.x % kDqReduceCtasPerTile) * kDqReduceRowsPerCta;
  const int h = static_cast<int>(blockIdx.y);
  const int heads = p.problem.heads;
  const int64_t slot_stride = static_cast<int64_t>(heads) * kBlockM * D;
  for (int idx = static_cast<int>(threadIdx.x); idx < kDqReduceRowsPerCta * (D / 2); idx += kThreads) {
    const int row = row0 + idx / (D / 2);
    const int col = 2 * (idx % (D / 2));
    if (row >= r.rows) continue;
    const float* src = p.dq_partial + ((static_cast<int64_t>(r.slot_begin) * heads + h) * kBlockM + row) * D + col;
    float acc[2] = {0.f, 0.f};
    for (int s0 = 0; s0 < r.slot_count; s0 += kDqReduceBatch) {
      float part[kDqReduceBatch][2];  // plain floats: the CPU emulation has no float2
#pragma unroll
      for (int u = 0; u < kDqReduceBatch; ++u) {
        const bool ok = s0 + u < r.slot_count;
        part[u][0] = ok ? src[(s0 + u) * slot_stride] : 0.f;
        part[u][1] = ok ? src[(s0 + u) * slot_stride + 1] : 0.f;
      }
#pragma unroll
      for (int u = 0; u < kDqReduceBatch; ++u) {
        if (s0 + u < r.slot_count) {  // no `+ 0.f` for missing slots: it would turn a -0 sum into +0
          acc[0] += part[u][0];
          acc[1] += part[u][1];
        }
      }
    }
    uint16_t* dst = p.dq + ((r.q_begin + r.i0 + row) * heads + h) * D + col;
    const float pre = p.problem.pre_scale;
    *reinterpret_cast<uint32_t*>(dst) = PackRounded<E>(pre * acc[0], pre * acc[1]);
  }
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_BACKWARD_DQ_REDUCE_CUH_
