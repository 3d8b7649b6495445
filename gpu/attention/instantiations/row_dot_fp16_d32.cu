// One instantiation per file (parallel builds, FA3's hopper/instantiations/ layout).
#include "gpu/attention/launch_template.cuh"

namespace gemtb::gpu {
template absl::Status LaunchRowDot<ElementType::kFloat16, 32>(const BackwardParams&);
}  // namespace gemtb::gpu
