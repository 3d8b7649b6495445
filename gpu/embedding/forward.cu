// The embedding forward's launches: forward_kernel.cuh's kernels, one per kind of bag the input
// holds, at the loads in flight and registers per thread chosen on the H200
// (gpu/bench/embed_forward_probe.cu; tools/bench/NOTES.md).
#include "gpu/common/device_buffer.h"
#include "gpu/embedding/forward_kernel.cuh"
#include "gpu/embedding/launch.h"

namespace gemtb::gpu::embedding {
namespace {

// Per storage type: loads in flight per lane, warps per block and the blocks per SM the registers
// are sized for. More warps with fewer loads each beat fewer warps with more: the gather waits on
// memory latency, and 32 warps of 4 fp32 rows in flight moved 3.68 TB/s where 16 warps of 8 moved
// 3.06 (gpu/bench/embed_forward_probe.cu on the H200; tools/bench/NOTES.md).
constexpr int kF32Loads = 4, kF32Warps = 8, kF32MinBlocks = 4;
constexpr int kHalfLoads = 8, kHalfWarps = 8, kHalfMinBlocks = 4;

template <ElementType kDtype, int kLoads, int kWarps, int kMinBlocks>
void LaunchPool(const LaunchParams& p, int64_t bags) {
  const unsigned blocks = static_cast<unsigned>((bags + kWarps - 1) / kWarps);
  PoolKernel<kDtype, kLoads, kMinBlocks, kWarps><<<blocks, kWarps * 32>>>(p);
}

}  // namespace

absl::Status LaunchForward(const LaunchParams& p) {
  const int64_t bags = p.kjt.num_keys * p.kjt.batch;
  if (bags == 0) return absl::OkStatus();
  const int64_t blocks64 = (bags + kForwardWarpsPerBlock - 1) / kForwardWarpsPerBlock;
  if (blocks64 > 0x7FFFFFFF) return absl::InvalidArgumentError(absl::StrCat("F*B=", bags, " bags: too many for one launch"));
  const unsigned blocks = static_cast<unsigned>(blocks64);
  constexpr unsigned kThreads = kForwardWarpsPerBlock * 32;
  if (p.forward_kinds & kForwardSequence) SequenceKernel<<<blocks, kThreads>>>(p);
  if (p.forward_kinds & kForwardPooledF32) LaunchPool<ElementType::kFloat32, kF32Loads, kF32Warps, kF32MinBlocks>(p, bags);
  if (p.forward_kinds & kForwardPooledBf16) {
    LaunchPool<ElementType::kBFloat16, kHalfLoads, kHalfWarps, kHalfMinBlocks>(p, bags);
  }
  if (p.forward_kinds & kForwardPooledF16) LaunchPool<ElementType::kFloat16, kHalfLoads, kHalfWarps, kHalfMinBlocks>(p, bags);
  return CudaOk(cudaGetLastError(), "launch of the embedding forward kernels");
}

}  // namespace gemtb::gpu::embedding
