// The kernel launchers api.cc calls, one explicit instantiation per (storage type, head dim) in
// gpu/attention/instantiations/. Each launches on the default stream and reports launch errors;
// api.cc synchronises and checks once at the end of a call.
#ifndef GEMTB_GPU_ATTENTION_LAUNCH_H_
#define GEMTB_GPU_ATTENTION_LAUNCH_H_

#include <cstdint>

#include "absl/status/status.h"
#include "gpu/attention/kernel_policy.h"
#include "gpu/attention/params.h"
#include "model/common/element_type.h"

namespace gemtb::gpu {

// O and LSE of the listed forward tiles (blockIdx.x = tile, blockIdx.y = query head).
template <ElementType E, int D>
absl::Status LaunchForward(const ForwardParams& params, int64_t num_tiles);

// The same outputs from one of the Hopper forward kernels (wgmma, head dim kHopperHeadDim, tiles of
// kHopperBlockM rows): `kernel` is kHopperWs, kHopperTma, kHopperSplit or kHopperSmall
// (kernel_policy.h), on tiles in the order api.cc gives them for that kernel.
template <ElementType E>
absl::Status LaunchForwardHopper(const ForwardParams& params, int64_t num_tiles, ForwardKernelKind kernel);

// Whether this build holds the Hopper kernels (false in the CPU emulation, which runs only the
// mma.sync kernels).
bool HopperKernelsAvailable();

// D_i = rowsum(dO * O) for every output row and head (softmax backward only).
template <ElementType E, int D>
absl::Status LaunchRowDot(const BackwardParams& params);

// dK and dV of the listed K/V tiles (blockIdx.y = K/V head), summing every reader in a fixed order.
template <ElementType E, int D>
absl::Status LaunchDkDv(const BackwardParams& params, int64_t num_tiles);

// dQ of the listed query tiles (blockIdx.y = query head): the separate, atomic-free dQ pass.
template <ElementType E, int D>
absl::Status LaunchDq(const BackwardParams& params, int64_t num_tiles);

// dQ of the split tiles (params.h DqTile): the parts' fp32 sums added in slot order.
template <ElementType E, int D>
absl::Status LaunchDqReduce(const BackwardParams& params, int64_t num_reduce);

// The Hopper backward (wgmma, head dim kHopperHeadDim): D_i, dK/dV and dQ on the same tile lists
// as the mma.sync kernels above. dK/dV and dQ store and read dS when params.ds is set (the
// stored-dS backward); else the dQ pass recomputes it, in chains of tiles per CTA under broadcast_q.
template <ElementType E>
absl::Status LaunchRowDotHopper(const BackwardParams& params);
template <ElementType E>
absl::Status LaunchDkDvHopper(const BackwardParams& params, int64_t num_tiles);
template <ElementType E>
absl::Status LaunchDqHopper(const BackwardParams& params, int64_t num_tiles);
// The fused-dQ backward under broadcast_q (backward_hopper_fused_dq.cuh; kernel_policy.h says when):
// dK, dV and each chain's dQ part in one chained kernel over the dK/dV tiles, tiles_per_cta per
// chain, then dQ as the chains' parts summed in order into params.dq (params.dq_partial holds the
// parts). Replaces LaunchDkDvHopper, LaunchDqHopper and the dQ reduce.
template <ElementType E>
absl::Status LaunchDkDvDqFusedHopper(const BackwardParams& params, int64_t num_tiles, int tiles_per_cta);

// x[0..n) = value.
absl::Status LaunchFill(float* x, int64_t n, float value);

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_LAUNCH_H_
