// The launchers of gpu/attention/launch.h for the CPU emulation: every block of a grid runs, one
// after another, as fibers (fiber_block.h) executing the kernels' own source; shared memory is one
// buffer, poisoned with NaN patterns (0xFFFF) before each block so that a read of an unwritten
// element shows up as NaN in the results.
#include "tests/gpu/emulation/cuda_shim.h"
// The shim must come first.
#include <cstring>

#include "gpu/attention/backward_dkdv_kernel.cuh"
#include "gpu/attention/backward_dq_kernel.cuh"
#include "gpu/attention/backward_dq_reduce.cuh"
#include "gpu/attention/backward_row_dot.cuh"
#include "gpu/attention/forward_kernel.cuh"
#include "gpu/attention/launch.h"

namespace gemtb::gpu {

alignas(16) uint16_t smem[size_t{1} << 17];  // the kernels' `extern __shared__` array (256 KB)

namespace {

template <typename Body>
void RunGrid(unsigned blocks_x, unsigned blocks_y, size_t smem_bytes, const Body& body) {
  for (unsigned y = 0; y < blocks_y; ++y) {
    for (unsigned x = 0; x < blocks_x; ++x) {
      std::memset(smem, 0xFF, smem_bytes);
      emu::RunBlock({x, y, 0}, kThreads, body);
    }
  }
}

}  // namespace

template <ElementType E, int D>
absl::Status LaunchForward(const ForwardParams& params, int64_t num_tiles) {
  RunGrid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(params.problem.heads),
          ForwardSmem<D>::kBytes, [&] { ForwardKernel<E, D>(params); });
  return absl::OkStatus();
}

template <ElementType E, int D>
absl::Status LaunchRowDot(const BackwardParams& params) {
  const int64_t blocks = (params.problem.out_rows + kBlockM - 1) / kBlockM;
  RunGrid(static_cast<unsigned>(blocks), static_cast<unsigned>(params.problem.heads),
          RowDotSmem<D>::kBytes, [&] { RowDotKernel<E, D>(params); });
  return absl::OkStatus();
}

template <ElementType E, int D>
absl::Status LaunchDkDv(const BackwardParams& params, int64_t num_tiles) {
  RunGrid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(params.problem.kv_heads),
          DkDvSmem<D>::kBytes, [&] { DkDvKernel<E, D>(params); });
  return absl::OkStatus();
}

template <ElementType E, int D>
absl::Status LaunchDq(const BackwardParams& params, int64_t num_tiles) {
  RunGrid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(params.problem.heads),
          DqSmem<D>::kBytes, [&] { DqKernel<E, D>(params); });
  return absl::OkStatus();
}

template <ElementType E, int D>
absl::Status LaunchDqReduce(const BackwardParams& params, int64_t num_reduce) {
  RunGrid(static_cast<unsigned>(num_reduce * kDqReduceCtasPerTile), static_cast<unsigned>(params.problem.heads), 0,
          [&] { DqReduceKernel<E, D>(params); });
  return absl::OkStatus();
}

// The emulation has no wgmma: DeviceCall never picks the Hopper kernels here.
bool HopperKernelsAvailable() { return false; }

template <ElementType E>
absl::Status LaunchForwardHopper(const ForwardParams&, int64_t, ForwardKernelKind) {
  return absl::UnimplementedError("the CPU emulation does not run the Hopper (wgmma) forward kernels");
}
template absl::Status LaunchForwardHopper<ElementType::kBFloat16>(const ForwardParams&, int64_t, ForwardKernelKind);
template absl::Status LaunchForwardHopper<ElementType::kFloat16>(const ForwardParams&, int64_t, ForwardKernelKind);
template <ElementType E>
absl::Status LaunchRowDotHopper(const BackwardParams&) {
  return absl::UnimplementedError("the CPU emulation does not run the Hopper (wgmma) backward kernels");
}
template <ElementType E>
absl::Status LaunchDkDvHopper(const BackwardParams&, int64_t) {
  return absl::UnimplementedError("the CPU emulation does not run the Hopper (wgmma) backward kernels");
}
template <ElementType E>
absl::Status LaunchDqHopper(const BackwardParams&, int64_t) {
  return absl::UnimplementedError("the CPU emulation does not run the Hopper (wgmma) backward kernels");
}
template <ElementType E>
absl::Status LaunchDkDvDqFusedHopper(const BackwardParams&, int64_t, int) {
  return absl::UnimplementedError("the CPU emulation does not run the Hopper (wgmma) backward kernels");
}
template absl::Status LaunchDkDvDqFusedHopper<ElementType::kBFloat16>(const BackwardParams&, int64_t, int);
template absl::Status LaunchDkDvDqFusedHopper<ElementType::kFloat16>(const BackwardParams&, int64_t, int);
template absl::Status LaunchRowDotHopper<ElementType::kBFloat16>(const BackwardParams&);
template absl::Status LaunchRowDotHopper<ElementType::kFloat16>(const BackwardParams&);
template absl::Status LaunchDkDvHopper<ElementType::kBFloat16>(const BackwardParams&, int64_t);
template absl::Status LaunchDkDvHopper<ElementType::kFloat16>(const BackwardParams&, int64_t);
template absl::Status LaunchDqHopper<ElementType::kBFloat16>(const BackwardParams&, int64_t);
template absl::Status LaunchDqHopper<ElementType::kFloat16>(const BackwardParams&, int64_t);

absl::Status LaunchFill(float* x, int64_t n, float value) {
  for (int64_t i = 0; i < n; ++i) x[i] = value;
  return absl::OkStatus();
}

#define GEMTB_EMU_INSTANTIATE(E, D)                                                   \
  template absl::Status LaunchForward<E, D>(const ForwardParams&, int64_t);           \
  template absl::Status LaunchRowDot<E, D>(const BackwardParams&);                    \
  template absl::Status LaunchDkDv<E, D>(const BackwardParams&, int64_t);             \
  template absl::Status LaunchDq<E, D>(const BackwardParams&, int64_t);               \
  template absl::Status LaunchDqReduce<E, D>(const BackwardParams&, int64_t);
GEMTB_EMU_INSTANTIATE(ElementType::kBFloat16, 16)
GEMTB_EMU_INSTANTIATE(ElementType::kBFloat16, 32)
GEMTB_EMU_INSTANTIATE(ElementType::kBFloat16, 64)
GEMTB_EMU_INSTANTIATE(ElementType::kBFloat16, 128)
GEMTB_EMU_INSTANTIATE(ElementType::kFloat16, 16)
GEMTB_EMU_INSTANTIATE(ElementType::kFloat16, 32)
GEMTB_EMU_INSTANTIATE(ElementType::kFloat16, 64)
GEMTB_EMU_INSTANTIATE(ElementType::kFloat16, 128)
#undef GEMTB_EMU_INSTANTIATE

}  // namespace gemtb::gpu
