// Random inputs made on the device (a benchmark's tensors are gigabytes: drawing them on the host
// and copying would take longer than the timing itself).
#ifndef GEMTB_GPU_BENCH_DEVICE_RANDOM_H_
#define GEMTB_GPU_BENCH_DEVICE_RANDOM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "model/common/element_type.h"

namespace gemtb::gpu::bench {

// x[i] = bits of a value uniform in [-sqrt(3), sqrt(3)) (unit variance, like randn's), rounded to
// `type` (bf16 or fp16), from a counter-based hash of (seed, i): the same bytes on every run.
absl::Status FillUniform(uint16_t* x, int64_t n, ElementType type, uint64_t seed);

}  // namespace gemtb::gpu::bench

#endif  // GEMTB_GPU_BENCH_DEVICE_RANDOM_H_
