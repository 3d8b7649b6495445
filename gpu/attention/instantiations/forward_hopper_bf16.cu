// One instantiation per file (parallel builds, FA3's hopper/instantiations/ layout).
#include "gpu/attention/launch_template.cuh"

namespace gemtb::gpu {
template absl::Status LaunchForwardHopper<ElementType::kBFloat16>(const ForwardParams&, int64_t, ForwardKernelKind);

// This build holds the Hopper kernels (the CPU emulation defines this as false).
bool HopperKernelsAvailable() { return true; }
}  // namespace gemtb::gpu
