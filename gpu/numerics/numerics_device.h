// Runs model/numerics' codecs on the GPU, so tests can prove that the CPU and the GPU produce the
// same bits ("CPU vs GPU quantise, SR and RHT: bitwise equal").
#ifndef GEMTB_GPU_NUMERICS_NUMERICS_DEVICE_H_
#define GEMTB_GPU_NUMERICS_NUMERICS_DEVICE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace gemtb::gpu {

// Whether a CUDA device of compute capability 9.0 (what this build targets) is present.
bool HasSm90Device();

// Per input x[i], the codes a kernel computes on the device: bf16 and fp16 (RNE), E4M3, E5M2, E2M3,
// E3M2 and E2M1 (RNE satfinite), bf16 with stochastic rounding from Philox word (seed, stream, i).
struct DeviceCodes {
  std::vector<uint16_t> bf16, fp16, bf16_sr;
  std::vector<uint8_t> e4m3, e5m2, e2m3, e3m2, e2m1;
  std::vector<uint32_t> philox;  // PhiloxWord(seed, stream, i)
};

absl::StatusOr<DeviceCodes> EncodeOnDevice(absl::Span<const float> x, uint64_t seed, uint64_t stream);

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_NUMERICS_NUMERICS_DEVICE_H_
