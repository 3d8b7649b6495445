// Host side of the persistent TMA forward (forward_hopper_tma_kernel.cuh, "v5"): encodes the Q, K
// and V tensor maps and launches one CTA per SM (fewer when the call has fewer tile x head items).
// LaunchForwardHopperWs (launch_template.cuh) takes this path when ForwardHopperTmaEnabled() and
// the tensors suit TMA (16-byte aligned bases and row strides), and v4 otherwise.
#ifndef GEMTB_GPU_ATTENTION_FORWARD_HOPPER_TMA_LAUNCH_CUH_
#define GEMTB_GPU_ATTENTION_FORWARD_HOPPER_TMA_LAUNCH_CUH_

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "gpu/attention/forward_hopper_small_kernel.cuh"
#include "gpu/attention/forward_hopper_split_kernel.cuh"
#include "gpu/attention/forward_hopper_tma_kernel.cuh"
#include "gpu/attention/forward_variant.h"
#include "gpu/common/cuda_check.cuh"

namespace gemtb::gpu {

// How far L2 widens a TMA box row's fetch from DRAM: 256 bytes (a whole head row of 128 bf16, whose
// two 64-column boxes are then one fetch) unless GEMTB_TMA_L2_PROMOTION=none/64/128 asks otherwise.
inline CUtensorMapL2promotion TmaL2Promotion() {
  const char* env = std::getenv("GEMTB_TMA_L2_PROMOTION");
  const std::string v = env == nullptr ? "" : env;
  if (v == "none") return CU_TENSOR_MAP_L2_PROMOTION_NONE;
  if (v == "64") return CU_TENSOR_MAP_L2_PROMOTION_L2_64B;
  if (v == "128") return CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
  return CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
}

// A 2-D map of a [rows, cols] row-major uint16 tensor (rows `stride_elems` apart) with boxes of
// kTmaBoxRows x kTmaBoxCols, 128-byte swizzled. The kernel only reads boxes that lie inside one
// sequence, so the row count is an upper bound (2^31 - 1) rather than the tensor's own.
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
                TmaL2Promotion(), CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Launches one of the persistent forward kernels (v5..v7, split): one CTA per SM, fewer when the
// call has fewer tile x head items, each with v5's shared memory.
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

template <ElementType E, HopperAct kAct, bool kV6, bool kRcpEpilogue = false>
absl::Status LaunchForwardHopperTmaAct(const ForwardParams& params, const ForwardTmaMaps& maps, int items) {
  return LaunchPersistentForward(ForwardHopperTmaKernel<E, kAct, kHopperWsBlockN, kV6, kRcpEpilogue>,
                                 "attention forward kernel (Hopper, persistent TMA)", params, maps, items);
}

template <ElementType E, HopperAct kAct>
absl::Status LaunchForwardHopperSplitAct(const ForwardParams& params, const ForwardTmaMaps& maps, int items,
                                         bool half_keys, bool ring) {
  const auto kernel = half_keys ? (ring ? ForwardHopperSplitKernel<E, kAct, true, true>
                                        : ForwardHopperSplitKernel<E, kAct, true, false>)
                                : (ring ? ForwardHopperSplitKernel<E, kAct, false, true>
                                        : ForwardHopperSplitKernel<E, kAct, false, false>);
  return LaunchPersistentForward(kernel, "attention forward kernel (Hopper, split)", params, maps, items);
}

template <ElementType E, bool kV6>
absl::Status LaunchForwardHopperTmaActs(const ForwardParams& params, const ForwardTmaMaps& maps, int n) {
  // v6 and v7 have the tanh.approx paths (forward_tma_elementwise.cuh); v5 runs the exact acts.
  const auto launch = [&]<HopperAct A>() { return LaunchForwardHopperTmaAct<E, A, kV6>(params, maps, n); };
  if constexpr (kV6) {
    return DispatchHopperActTanhApprox(params.problem.options, launch);
  } else {
    return DispatchHopperAct(params.problem.options.act, launch);
  }
}

// Launches v5, v6 or v7 (ForwardWsVersion) and sets *launched, or leaves it false (nothing
// launched) when the tensors do not suit TMA; the caller then runs v4.
template <ElementType E>
absl::Status LaunchForwardHopperTma(const ForwardParams& params, int64_t num_tiles, bool* launched) {
  *launched = false;
  const int64_t items = num_tiles * params.problem.heads;
  if (items <= 0 || items > INT32_MAX) return absl::OkStatus();
  const ProblemParams& pr = params.problem;
  ForwardTmaMaps maps;
  std::memset(&maps, 0, sizeof(maps));
  const int64_t q_cols = static_cast<int64_t>(pr.heads) * kHopperHeadDim;
  const int64_t kv_cols = static_cast<int64_t>(pr.kv_heads) * kHopperHeadDim;
  if (!EncodeForwardTmaMap(&maps.q, pr.q, q_cols, q_cols) || !EncodeForwardTmaMap(&maps.k, pr.k, kv_cols, kv_cols) ||
      !EncodeForwardTmaMap(&maps.v, pr.v, kv_cols, kv_cols)) {
    return absl::OkStatus();
  }
  maps.item_ring = ForwardItemRing() ? 1 : 0;
  maps.kv_first = ForwardKvFirst() ? 1 : 0;
  *launched = true;
  const int n = static_cast<int>(items);
  const int version = ForwardWsVersion();
  if (ForwardSmallApplies(params.max_tile_rows, pr.options.act == Activation::kSoftmax)) {
    return LaunchForwardHopperSmall<E>(params, n);
  }
  if (ForwardSplitApplies(params.max_tile_rows, pr.options.act == Activation::kSoftmax)) {
    const bool half_keys = ForwardSplitMode() == 2;
    const bool ring = ForwardSplitRing();
    return DispatchHopperActTanhApprox(pr.options, [&]<HopperAct A>() {
      // Never softmax (ForwardSplitApplies): the online softmax's (m, l) would need merging.
      if constexpr (A == HopperAct::kSoftmax) {
        return absl::InternalError("attention forward: the split kernel has no softmax");
      } else {
        return LaunchForwardHopperSplitAct<E, A>(params, maps, n, half_keys, ring);
      }
    });
  }
  if (version == 7 && pr.options.act == Activation::kSoftmax) {
    return LaunchForwardHopperTmaAct<E, HopperAct::kSoftmax, true, true>(params, maps, n);
  }
  if (version >= 6) return LaunchForwardHopperTmaActs<E, true>(params, maps, n);
  return LaunchForwardHopperTmaActs<E, false>(params, maps, n);
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_FORWARD_HOPPER_TMA_LAUNCH_CUH_
