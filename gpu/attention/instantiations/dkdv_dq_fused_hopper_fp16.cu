// One instantiation per file (parallel builds, FA3's hopper/instantiations/ layout).
#include "gpu/attention/backward_hopper_fused_dq.cuh"

namespace gemtb::gpu {
template absl::Status LaunchDkDvDqFusedHopper<ElementType::kFloat16>(const BackwardParams&, int64_t, int);
}  // namespace gemtb::gpu
