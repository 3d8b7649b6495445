// One instantiation per file (parallel builds, FA3's hopper/instantiations/ layout).
#include "gpu/attention/launch_template.cuh"

namespace gemtb::gpu {
template absl::Status LaunchForward<ElementType::kFloat16, 32>(const ForwardParams&, int64_t);
}  // namespace gemtb::gpu
