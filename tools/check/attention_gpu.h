// Runs one attention case on gpu/'s kernels (forward, then backward with cotangent d_o) for the
// check of attention_check.h: a small case from its fp64 values, a scale-tier case from its
// generator (scale_case.h) as 16-bit patterns. Built only with CUDA.
#ifndef GEMTB_TOOLS_CHECK_ATTENTION_GPU_H_
#define GEMTB_TOOLS_CHECK_ATTENTION_GPU_H_

#include <vector>

#include "gpu/attention/kernel_policy.h"
#include "tools/check/attention_cases.h"
#include "tools/check/attention_check.h"
#include "tools/check/scale_case.h"
#include "tools/check/scale_sample.h"

namespace gemtb::check {

// `kernels` names the kernels to run (kAuto: the library's choice). A status of kUnimplemented
// means the named kernel cannot run this case (gpu::CanRun's message follows): the caller counts
// the case as skipped, not failed.
GpuOutputs RunGpu(const AttentionCase& c, const std::vector<double>& d_o,
                  const gpu::KernelOverride& kernels = {});
ScaleOutputs RunGpuScale(const ScaleCase& c, const gpu::KernelOverride& kernels = {});

}  // namespace gemtb::check

#endif  // GEMTB_TOOLS_CHECK_ATTENTION_GPU_H_
