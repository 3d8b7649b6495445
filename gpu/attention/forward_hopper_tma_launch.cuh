// Host side of the forwards that load by TMA: the persistent TMA forward (forward_hopper_tma_kernel.cuh)
// and the split forward (forward_hopper_split_kernel.cuh), one CTA per SM (fewer when the call has
// fewer tile x head items), and the small forward (forward_hopper_small_kernel.cuh), which loads by
// cp.async but shares the rule: LaunchForwardHopper (launch_template.cuh) runs the cp.async
// warp-specialised kernel instead when q, k or v does not suit TMA (16-byte aligned bases and rows).
#ifndef GEMTB_GPU_ATTENTION_FORWARD_HOPPER_TMA_LAUNCH_CUH_
#define GEMTB_GPU_ATTENTION_FORWARD_HOPPER_TMA_LAUNCH_CUH_

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "gpu/attention/forward_hopper_small_kernel.cuh"
#include "gpu/attention/forward_hopper_split_kernel.cuh"
#include "gpu/attention/forward_hopper_tma_kernel.cuh"
#include "gpu/attention/kernel_policy.h"
#include "gpu/common/cuda_check.cuh"

namespace gemtb::gpu {

// A 2-D map of a [rows, cols] row-major uint16 tensor (rows `stride_elems` apart) with boxes of
// kTmaBoxRows x kTmaBoxCols, 128-byte swizzled. The kernel only reads boxes that lie inside one
// sequence, so the row count is an upper bound (2^31 - 1) rather than the tensor's own. L2 fetches
// 256 bytes per box row: a whole head row of 128 16-bit values, so its two 64-column boxes are one
// fetch from DRAM.
inline bool EncodeForwardTmaMap(CUtensorMap* map, const uint16_t* base, int64_t cols, int64_t stride_elems) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  if (encode == nullptr || base == nullptr) return false;
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0 || (stride_elems * 2) % 16 != 0) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(INT32_MAX)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(stride_elems) * 2u};
  const cuuint32_t box[2] = {kTmaBoxCols, kTmaBoxRows};
  const cuuint32_t elem_strides[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, const_cast<uint16_t*>(base), dims, strides, box,
                elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Launches a persistent forward kernel: one CTA per SM, fewer when the call has fewer tile x head
// items, each with the TMA forward's shared memory.
template <typename Kernel>
absl::Status LaunchPersistentForward(Kernel kernel, const char* name, const ForwardParams& params,
                                     const ForwardTmaMaps& maps, int items) {
  const size_t smem = HopperForwardSmem<kHopperWsBlockN>::kBytes;
  if (absl::Status s = CudaStatus(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)), name);
      !s.ok()) {
    return s;
  }
  static const int sms = HopperSmCount();
  const unsigned grid = static_cast<unsigned>(items < sms ? items : sms);
  kernel<<<grid, kHopperWsThreads, smem>>>(params, maps, items);
  return CudaStatus(cudaGetLastError(), name);
}

// Launches `kernel` (kHopperTma, kHopperSplit or kHopperSmall) over `items` tile x head items and
// sets *launched, or leaves it false (nothing launched) when the tensors do not suit TMA.
template <ElementType E>
absl::Status LaunchForwardHopperPersistent(const ForwardParams& params, int64_t items, ForwardKernelKind kernel,
                                           bool* launched) {
  *launched = false;
  const ProblemParams& pr = params.problem;
  ForwardTmaMaps maps;
  std::memset(&maps, 0, sizeof(maps));
  const int64_t q_cols = static_cast<int64_t>(pr.heads) * kHopperHeadDim;
  const int64_t kv_cols = static_cast<int64_t>(pr.kv_heads) * kHopperHeadDim;
  if (!EncodeForwardTmaMap(&maps.q, pr.q, q_cols, q_cols) || !EncodeForwardTmaMap(&maps.k, pr.k, kv_cols, kv_cols) ||
      !EncodeForwardTmaMap(&maps.v, pr.v, kv_cols, kv_cols)) {
    return absl::OkStatus();
  }
  *launched = true;
  const int n = static_cast<int>(items);
  switch (kernel) {
    case ForwardKernelKind::kHopperSmall: return LaunchForwardHopperSmall<E>(params, n);
    case ForwardKernelKind::kHopperSplit:
      return DispatchHopperActTanhApprox(pr.options, [&]<HopperAct A>() {
        // Never softmax (kernel_policy.h): the online softmax's (m, l) would need merging.
        if constexpr (A == HopperAct::kSoftmax) {
          return absl::InternalError("attention forward: the split kernel has no softmax");
        } else {
          return LaunchPersistentForward(ForwardHopperSplitKernel<E, A>, "attention forward kernel (Hopper, split)",
                                         params, maps, n);
        }
      });
    default:
      return DispatchHopperActTanhApprox(pr.options, [&]<HopperAct A>() {
        return LaunchPersistentForward(ForwardHopperTmaKernel<E, A>, "attention forward kernel (Hopper, persistent TMA)",
                                       params, maps, n);
      });
  }
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_FORWARD_HOPPER_TMA_LAUNCH_CUH_
