// The launchers of launch.h as templates over (storage type, head dim); each file in
// instantiations/ instantiates one. Kept apart from the kernels so that the kernel headers compile
// without the CUDA runtime (tests/gpu/emulation runs them on the CPU).
#ifndef GEMTB_GPU_ATTENTION_LAUNCH_TEMPLATE_CUH_
#define GEMTB_GPU_ATTENTION_LAUNCH_TEMPLATE_CUH_

#include "gpu/attention/backward_dkdv_kernel.cuh"
#include "gpu/attention/backward_dq_kernel.cuh"
#include "gpu/attention/backward_dq_reduce.cuh"
#include "gpu/attention/backward_hopper_chain_launch.cuh"
#include "gpu/attention/backward_hopper_dq_stored.cuh"
#include "gpu/attention/backward_hopper_kernel.cuh"
#include "gpu/attention/backward_row_dot.cuh"
#include "gpu/attention/forward_hopper_tma_launch.cuh"
#include "gpu/attention/forward_hopper_ws_kernel.cuh"
#include "gpu/attention/forward_kernel.cuh"
#include "gpu/attention/launch.h"
#include "gpu/common/cuda_check.cuh"

namespace gemtb::gpu {

template <ElementType E, int D>
absl::Status LaunchForward(const ForwardParams& params, int64_t num_tiles) {
  if (num_tiles == 0) return absl::OkStatus();
  const dim3 grid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(params.problem.heads));
  return Launch(ForwardKernel<E, D>, grid, dim3(kThreads), ForwardSmem<D>::kBytes, params,
                "attention forward kernel");
}

template <ElementType E>
absl::Status LaunchForwardHopper(const ForwardParams& params, int64_t num_tiles, ForwardKernelKind kernel) {
  const int64_t blocks = num_tiles * params.problem.heads;
  if (blocks == 0) return absl::OkStatus();
  if (blocks > INT32_MAX) return absl::InvalidArgumentError("attention forward: tiles x heads exceeds 2^31-1 CTAs");
  if (kernel != ForwardKernelKind::kHopperWs) {
    bool launched = false;
    const absl::Status s = LaunchForwardHopperPersistent<E>(params, blocks, kernel, &launched);
    if (launched || !s.ok()) return s;
  }
  // The cp.async warp-specialised kernel: asked for, or q, k or v not 16-byte aligned for TMA.
  constexpr int BN = kHopperWsBlockN;
  const dim3 grid(static_cast<unsigned>(blocks));
  const dim3 block(kHopperWsThreads);
  const size_t smem = HopperForwardSmem<BN>::kBytes;
  const char* name = "attention forward kernel (Hopper, warp-specialised)";
  return DispatchHopperAct(params.problem.options.act, [&]<HopperAct A>() {
    return Launch(ForwardHopperWsKernel<E, A, BN>, grid, block, smem, params, name);
  });
}

template <ElementType E, int D>
absl::Status LaunchDkDv(const BackwardParams& params, int64_t num_tiles) {
  if (num_tiles == 0) return absl::OkStatus();
  const dim3 grid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(params.problem.kv_heads));
  return Launch(DkDvKernel<E, D>, grid, dim3(kThreads), DkDvSmem<D>::kBytes, params,
                "attention backward dK/dV kernel");
}

template <ElementType E, int D>
absl::Status LaunchDq(const BackwardParams& params, int64_t num_tiles) {
  if (num_tiles == 0) return absl::OkStatus();
  const dim3 grid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(params.problem.heads));
  return Launch(DqKernel<E, D>, grid, dim3(kThreads), DqSmem<D>::kBytes, params,
                "attention backward dQ kernel");
}

template <ElementType E, int D>
absl::Status LaunchRowDot(const BackwardParams& params) {
  const int64_t blocks = (params.problem.out_rows + kBlockM - 1) / kBlockM;
  if (blocks == 0) return absl::OkStatus();
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(params.problem.heads));
  return Launch(RowDotKernel<E, D>, grid, dim3(kThreads), RowDotSmem<D>::kBytes, params,
                "attention backward row-dot kernel");
}

template <ElementType E, int D>
absl::Status LaunchDqReduce(const BackwardParams& params, int64_t num_reduce) {
  if (num_reduce == 0) return absl::OkStatus();
  const dim3 grid(static_cast<unsigned>(num_reduce * kDqReduceCtasPerTile), static_cast<unsigned>(params.problem.heads));
  return Launch(DqReduceKernel<E, D>, grid, dim3(kThreads), 0, params, "attention backward dQ reduce kernel");
}

template <ElementType E>
absl::Status LaunchRowDotHopper(const BackwardParams& params) {
  const int64_t blocks = (params.problem.out_rows + 63) / 64;
  if (blocks == 0) return absl::OkStatus();
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(params.problem.heads));
  return Launch(RowDotHopperKernel<E>, grid, dim3(kHopperBwdThreads), kHopperRowDotSmemBytes, params,
                "attention backward row-dot kernel (Hopper)");
}

template <ElementType E>
absl::Status LaunchDkDvHopper(const BackwardParams& params, int64_t num_tiles) {
  if (num_tiles == 0) return absl::OkStatus();
  if (params.ds != nullptr) return LaunchDkDvHopperStoredDs<E>(params, num_tiles);
  {  // under broadcast_q: chains of K/V tiles per CTA (backward_hopper_chain_launch.cuh)
    bool launched = false;
    const absl::Status s = LaunchDkDvHopperChain<E>(params, num_tiles, &launched);
    if (launched || !s.ok()) return s;
  }
  const dim3 grid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(params.problem.kv_heads));
  const dim3 block(kHopperBwdThreads);
  const size_t smem = kHopperDkDvSmemBytes;
  const char* name = "attention backward dK/dV kernel (Hopper)";
  return DispatchHopperActTanhApprox(params.problem.options, [&]<HopperAct A>() {
    return Launch(DkDvHopperKernel<E, A>, grid, block, smem, params, name);
  });
}

template <ElementType E>
absl::Status LaunchDqHopper(const BackwardParams& params, int64_t num_tiles) {
  if (num_tiles == 0) return absl::OkStatus();
  if (params.ds != nullptr) return LaunchDqHopperStoredDs<E>(params, num_tiles);
  {  // under broadcast_q: chains of query tiles per CTA (backward_hopper_chain_launch.cuh)
    bool launched = false;
    const absl::Status s = LaunchDqHopperChain<E>(params, num_tiles, &launched);
    if (launched || !s.ok()) return s;
  }
  const dim3 grid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(params.problem.heads));
  const dim3 block(kHopperBwdThreads);
  const size_t smem = kHopperDqSmemBytes;
  const char* name = "attention backward dQ kernel (Hopper)";
  return DispatchHopperActTanhApprox(params.problem.options, [&]<HopperAct A>() {
    return Launch(DqHopperKernel<E, A>, grid, block, smem, params, name);
  });
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_LAUNCH_TEMPLATE_CUH_
