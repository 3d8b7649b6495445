#include "tools/check/attention_gpu.h"

#include "gpu/attention/api.h"
#include "tools/gemtb/gpu_case.h"

namespace gemtb::check {

GpuOutputs RunGpu(const AttentionCase& c, const std::vector<double>& d_o) {
  GpuOutputs out;
  const std::vector<int64_t> o_shape = {OutputRows(c), c.heads(), c.dv()};
  const cli::GpuCall call = cli::MakeGpuCall(c.View(), c.options, d_o, o_shape);
  absl::StatusOr<gpu::ForwardResult> fwd = gpu::Forward(call.args);
  if (!fwd.ok()) {
    out.status = fwd.status();
    return out;
  }
  absl::StatusOr<gpu::BackwardResult> bwd = gpu::Backward(call.args, call.DoView(), *fwd);
  if (!bwd.ok()) {
    out.status = bwd.status();
    return out;
  }
  out.o = cli::BitsToValues(fwd->o, c.input_type);
  out.lse.assign(fwd->lse.begin(), fwd->lse.end());
  out.dq = cli::BitsToValues(bwd->dq, c.input_type);
  out.dk = cli::BitsToValues(bwd->dk, c.input_type);
  out.dv = cli::BitsToValues(bwd->dv, c.input_type);
  return out;
}

}  // namespace gemtb::check
