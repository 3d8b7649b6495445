// Runs one random attention case on gpu/'s kernels (forward, then backward with cotangent d_o)
// for the check of attention_check.h. Built only with CUDA.
#ifndef GEMTB_TOOLS_CHECK_ATTENTION_GPU_H_
#define GEMTB_TOOLS_CHECK_ATTENTION_GPU_H_

#include <vector>

#include "tools/check/attention_cases.h"
#include "tools/check/attention_check.h"

namespace gemtb::check {

GpuOutputs RunGpu(const AttentionCase& c, const std::vector<double>& d_o);

}  // namespace gemtb::check

#endif  // GEMTB_TOOLS_CHECK_ATTENTION_GPU_H_
