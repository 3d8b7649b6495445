// One instantiation per file (parallel builds, FA3's hopper/instantiations/ layout).
#include "gpu/attention/launch_template.cuh"

namespace gemtb::gpu {
template absl::Status LaunchForwardHopper<ElementType::kFloat16>(const ForwardParams&, int64_t, ForwardKernelKind);
}  // namespace gemtb::gpu
