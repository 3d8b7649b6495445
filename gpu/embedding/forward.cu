// The embedding forward's launches: forward_kernel.cuh's pooling kernel per storage type and
// sequence_kernel.cuh's sequence gather, each launched only when the input holds that kind of bag,
// at the loads in flight and registers per thread chosen on the H200 (gpu/bench/embed_forward_probe.cu;
// tools/bench/NOTES.md).
#include "gpu/common/device_buffer.h"
#include "gpu/embedding/forward_kernel.cuh"
#include "gpu/embedding/launch.h"
#include "gpu/embedding/sequence_kernel.cuh"
#include "model/common/status_macros.h"

namespace gemtb::gpu::embedding {
namespace {

// Per storage type: loads in flight per lane, warps per block and the blocks per SM the registers
// are sized for. More warps with fewer loads each beat fewer warps with more: the gather waits on
// memory latency. On the H200 (gpu/bench/embed_forward_probe.cu; tools/bench/NOTES.md, 2026-12-03),
// sum fp32 over D = 128: 4 rows in flight per lane in 36 warps of 56 registers (2-warp blocks)
// moved 3.87 TB/s past L1 (3.63 through L1; a bare gather of the same bytes 3.91), 4-warp blocks
// the same, 8-warp blocks of 64 registers 3.86, 8 rows 3.83, 2 rows 3.46; bf16: 8 rows 3.48, 4
// rows 3.33, 16 rows 3.15.
constexpr int kF32Loads = 4, kF32Warps = 2, kF32MinBlocks = 18;
constexpr int kHalfLoads = 8, kHalfWarps = 2, kHalfMinBlocks = 18;
constexpr RowLoad kRowLoad = RowLoad::kNoL1;

// Blocks of `warps` bags for `bags` bags, within one launch's grid.
absl::StatusOr<unsigned> Blocks(int64_t bags, int warps) {
  const int64_t blocks = (bags + warps - 1) / warps;
  if (blocks > 0x7FFFFFFF) return absl::InvalidArgumentError(absl::StrCat("F*B=", bags, " bags: too many for one launch"));
  return static_cast<unsigned>(blocks);
}

template <ElementType kDtype, int kDim, typename Row, int kLoads, int kWarps, int kMinBlocks>
absl::Status LaunchPoolAs(const LaunchParams& p, int64_t bags) {
  const auto kernel = PoolKernel<kDtype, kDim, Row, kLoads, kMinBlocks, kWarps, kRowLoad>;
  // Asked of the runtime once per kernel, not per launch (the GPUs a process uses are alike).
  static const absl::StatusOr<int64_t> resident = ResidentBlocks(kernel, kWarps);
  if (!resident.ok()) return resident.status();
  kernel<<<PoolGrid(bags, kWarps, *resident), kWarps * 32>>>(p);
  return absl::OkStatus();
}

// The pooled bags of storage type kDtype: the D = 128 kernel and the general one, each when the KJT
// has their kind of bag, rows indexed in 32 bits unless a table needs more (kForwardWideRows).
template <ElementType kDtype, int kLoads, int kWarps, int kMinBlocks>
absl::Status LaunchPool(const LaunchParams& p, int64_t bags) {
  const bool wide = (p.forward_kinds & kForwardWideRows) != 0;
  if (p.forward_kinds & ForwardPooledKind(kDtype, 128)) {
    GEMTB_RETURN_IF_ERROR((wide ? LaunchPoolAs<kDtype, 128, int64_t, kLoads, kWarps, kMinBlocks>(p, bags)
                                : LaunchPoolAs<kDtype, 128, int32_t, kLoads, kWarps, kMinBlocks>(p, bags)));
  }
  if (p.forward_kinds & ForwardPooledKind(kDtype, 0)) {
    GEMTB_RETURN_IF_ERROR((wide ? LaunchPoolAs<kDtype, 0, int64_t, kLoads, kWarps, kMinBlocks>(p, bags)
                                : LaunchPoolAs<kDtype, 0, int32_t, kLoads, kWarps, kMinBlocks>(p, bags)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchForward(const LaunchParams& p) {
  const int64_t bags = p.kjt.num_keys * p.kjt.batch;
  if (bags == 0) return absl::OkStatus();
  if (p.forward_kinds & kForwardSequence) {
    absl::StatusOr<unsigned> blocks = Blocks(bags, kSequenceWarps);
    if (!blocks.ok()) return blocks.status();
    SequenceKernel<<<*blocks, kSequenceWarps * 32>>>(p);
  }
  GEMTB_RETURN_IF_ERROR((LaunchPool<ElementType::kFloat32, kF32Loads, kF32Warps, kF32MinBlocks>(p, bags)));
  GEMTB_RETURN_IF_ERROR((LaunchPool<ElementType::kBFloat16, kHalfLoads, kHalfWarps, kHalfMinBlocks>(p, bags)));
  GEMTB_RETURN_IF_ERROR((LaunchPool<ElementType::kFloat16, kHalfLoads, kHalfWarps, kHalfMinBlocks>(p, bags)));
  return CudaOk(cudaGetLastError(), "launch of the embedding forward kernels");
}

}  // namespace gemtb::gpu::embedding
