// A plain device copy (16-byte vectors, grid-stride), the bandwidth reference of the embedding bench.
#ifndef GEMTB_GPU_EMBEDDING_COPY_CEILING_H_
#define GEMTB_GPU_EMBEDDING_COPY_CEILING_H_

#include <cstdint>

#include "absl/status/status.h"

namespace gemtb::gpu::embedding {

// Copies `bytes` (a multiple of 16, both pointers 16-byte aligned) on the legacy stream.
absl::Status LaunchCopy(const void* src, void* dst, int64_t bytes);

}  // namespace gemtb::gpu::embedding

#endif  // GEMTB_GPU_EMBEDDING_COPY_CEILING_H_
