// A check case on the GPU embedding kernels (gpu/embedding/api.h), converted from the oracle's
// types here so that gpu/ never includes reference/.
#ifndef GEMTB_TOOLS_CHECK_EMBED_GPU_H_
#define GEMTB_TOOLS_CHECK_EMBED_GPU_H_

#include "tools/check/embed_cases.h"
#include "tools/check/embed_compare.h"

namespace gemtb::check {

// The forward's outputs and, with a step, the tables and state after it (the oracle's shapes).
struct EmbedGpuResult {
  reference::EmbeddingOutput output;
  reference::EmbeddingState state;
};

// How the device runs the case (gpu/embedding/api.h's TbeOptions): G_r's sum in blocks of
// `batch_block` samples (0: one block); the split update (row gradients and square sums, then the
// update with those sums as the whole rows').
struct EmbedGpuOptions {
  int64_t batch_block = 0;
  bool split_update = false;
};

// Validates on the host, runs the forward and (with `step`) one backward step on the device.
absl::StatusOr<EmbedGpuResult> RunEmbedGpuCase(const EmbedCase& c, bool step, const EmbedGpuOptions& options = {});

// The GPU executor's host-side KJT validation alone (gpu/embedding/kjt_check.h).
absl::Status ValidateEmbedKjtOnGpuHost(const EmbedCase& c);

// The same as bytes for the comparison.
// An input error lands in EmbedRun::error (the message only, as the oracle's); a CUDA failure
// too, prefixed "CUDA: ".
EmbedRun RunEmbedGpu(const EmbedCase& c, const EmbedGpuOptions& options = {});

}  // namespace gemtb::check

#endif  // GEMTB_TOOLS_CHECK_EMBED_GPU_H_
