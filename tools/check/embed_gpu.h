// A check case on the GPU embedding kernels (gpu/embedding/api.h), converted from the oracle's
// types here so that gpu/ never includes reference/.
#ifndef GEMTB_TOOLS_CHECK_EMBED_GPU_H_
#define GEMTB_TOOLS_CHECK_EMBED_GPU_H_

#include "tools/check/embed_cases.h"
#include "tools/check/embed_compare.h"

namespace gemtb::check {

// Validates on the host, runs the forward and one backward step on the device, downloads.
// An input error lands in EmbedRun::error (the message only, as the oracle's); a CUDA failure
// too, prefixed "CUDA: ".
EmbedRun RunEmbedGpu(const EmbedCase& c);

}  // namespace gemtb::check

#endif  // GEMTB_TOOLS_CHECK_EMBED_GPU_H_
