// The embedding forward's launches: forward_kernel.cuh's kernels, one per kind of bag the input
// holds, at the loads in flight and registers per thread chosen on the H200
// (gpu/bench/embed_forward_probe.cu; tools/bench/NOTES.md).
#include "gpu/common/device_buffer.h"
#include "gpu/embedding/forward_kernel.cuh"
#include "gpu/embedding/launch.h"

namespace gemtb::gpu::embedding {
namespace {

// Loads in flight per lane and the blocks per SM the registers are sized for, per storage type.
constexpr int kF32Loads = 8, kF32MinBlocks = 1;
constexpr int kHalfLoads = 16, kHalfMinBlocks = 1;

}  // namespace

absl::Status LaunchForward(const LaunchParams& p) {
  const int64_t bags = p.kjt.num_keys * p.kjt.batch;
  if (bags == 0) return absl::OkStatus();
  const int64_t blocks64 = (bags + kForwardWarpsPerBlock - 1) / kForwardWarpsPerBlock;
  if (blocks64 > 0x7FFFFFFF) return absl::InvalidArgumentError(absl::StrCat("F*B=", bags, " bags: too many for one launch"));
  const unsigned blocks = static_cast<unsigned>(blocks64);
  constexpr unsigned kThreads = kForwardWarpsPerBlock * 32;
  if (p.forward_kinds & kForwardSequence) SequenceKernel<<<blocks, kThreads>>>(p);
  if (p.forward_kinds & kForwardPooledF32) {
    PoolKernel<ElementType::kFloat32, kF32Loads, kF32MinBlocks><<<blocks, kThreads>>>(p);
  }
  if (p.forward_kinds & kForwardPooledBf16) {
    PoolKernel<ElementType::kBFloat16, kHalfLoads, kHalfMinBlocks><<<blocks, kThreads>>>(p);
  }
  if (p.forward_kinds & kForwardPooledF16) {
    PoolKernel<ElementType::kFloat16, kHalfLoads, kHalfMinBlocks><<<blocks, kThreads>>>(p);
  }
  return CudaOk(cudaGetLastError(), "launch of the embedding forward kernels");
}

}  // namespace gemtb::gpu::embedding
