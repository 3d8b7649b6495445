// One instantiation per file (parallel builds, FA3's hopper/instantiations/ layout).
#include "gpu/attention/launch_template.cuh"

namespace gemtb::gpu {
template absl::Status LaunchForward<ElementType::kBFloat16, 16>(const ForwardParams&, int64_t);
}  // namespace gemtb::gpu
