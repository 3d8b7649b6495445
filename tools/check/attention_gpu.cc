#include "tools/check/attention_gpu.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "gpu/attention/api.h"
#include "gpu/attention/device_call.h"
#include "model/attention/benchmark_lengths.h"
#include "tools/gemtb/gpu_case.h"

namespace gemtb::check {
namespace {

// Whether the call runs under its kernel choice: CanRun validates the arguments, and the kernels are
// chosen from the call's tile lists when the call is set up (DeviceCall::Create), so a named kernel
// that cannot take this shape is refused only there.
absl::Status Runs(const gpu::AttentionArgs& args) {
  if (absl::Status s = gpu::CanRun(args); !s.ok()) return s;
  return gpu::DeviceCall::Create(args, /*with_backward=*/true).status();
}

// Runs() under `kernels`; a refusal that the library's own choice would not make is the override's.
absl::Status CheckKernels(gpu::AttentionArgs& args, const gpu::KernelOverride& kernels) {
  args.kernels = kernels;
  if (kernels.forward == gpu::ForwardKernelKind::kAuto && kernels.backward == gpu::BackwardKernelKind::kAuto) {
    return gpu::CanRun(args);
  }
  absl::Status s = Runs(args);
  if (s.ok()) return s;
  args.kernels = {};
  if (!Runs(args).ok()) return s;
  args.kernels = kernels;
  return absl::UnimplementedError(absl::StrCat("the named kernel cannot run this case: ", s.message()));
}

}  // namespace

GpuOutputs RunGpu(const AttentionCase& c, const std::vector<double>& d_o,
                  const gpu::KernelOverride& kernels) {
  GpuOutputs out;
  const std::vector<int64_t> o_shape = {OutputRows(c), c.heads(), c.dv()};
  cli::GpuCall call = cli::MakeGpuCall(c.View(), c.options, d_o, o_shape);
  if (out.status = CheckKernels(call.args, kernels); !out.status.ok()) return out;
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

ScaleOutputs RunGpuScale(const ScaleCase& c, const gpu::KernelOverride& kernels) {
  ScaleOutputs out;
  const std::vector<uint16_t> q = ScaleBits(c, ScaleTensor::kQ);
  const std::vector<uint16_t> k = ScaleBits(c, ScaleTensor::kK);
  const std::vector<uint16_t> v = ScaleBits(c, ScaleTensor::kV);
  const std::vector<uint16_t> d_o = ScaleBits(c, ScaleTensor::kDo);
  const std::vector<int64_t> q_off = OffsetsFromLengths(c.q_lengths);
  const std::vector<int64_t> kv_off = OffsetsFromLengths(c.kv_lengths);
  const int64_t tq = ScaleQueryTokens(c), tk = ScaleKvTokens(c), to = ScaleOutputTokens(c);
  gpu::AttentionArgs args;
  args.dtype = c.input_type;
  args.q = {q, {tq, c.heads, c.head_dim}};
  args.k = {k, {tk, c.kv_heads, c.head_dim}};
  args.v = {v, {tk, c.kv_heads, c.head_dim}};
  args.q_offsets = {q_off, {static_cast<int64_t>(q_off.size())}};
  args.kv_offsets = {kv_off, {static_cast<int64_t>(kv_off.size())}};
  if (!c.kv_index.empty()) args.kv_index = {c.kv_index, {static_cast<int64_t>(c.kv_index.size())}};
  args.max_lq = c.max_lq;
  args.max_lk = c.max_lk;
  args.options = c.options;
  if (out.status = CheckKernels(args, kernels); !out.status.ok()) return out;
  absl::StatusOr<gpu::ForwardResult> fwd = gpu::Forward(args);
  if (!fwd.ok()) {
    out.status = fwd.status();
    return out;
  }
  const gpu::HostTensor<uint16_t> d_o_view{d_o, {to, c.heads, c.head_dim}};
  absl::StatusOr<gpu::BackwardResult> bwd = gpu::Backward(args, d_o_view, *fwd);
  if (!bwd.ok()) {
    out.status = bwd.status();
    return out;
  }
  out.o = std::move(fwd->o);
  out.lse = std::move(fwd->lse);
  out.dq = std::move(bwd->dq);
  out.dk = std::move(bwd->dk);
  out.dv = std::move(bwd->dv);
  return out;
}

}  // namespace gemtb::check
