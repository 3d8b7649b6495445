// gemtb gpu attention: the CUDA kernels on the user's own .npy tensors, with the flags and files
// of `gemtb ref attention`.
#include <iostream>

#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "tools/gemtb/attention_case_flags.h"
#include "tools/gemtb/command.h"
#include "tools/gemtb/flags.h"
#include "tools/gemtb/output_set.h"
#if GEMTB_HAVE_CUDA
#include "gpu/attention/api.h"
#include "tools/gemtb/gpu_case.h"
#endif

namespace gemtb::cli {
namespace {

constexpr char kCommand[] = "gpu attention";

absl::Status Run(const std::vector<std::string>& args) {
  io::AttentionCaseSpec spec;
  std::string case_dir, out_dir, forward_kernel = "auto", backward_kernel = "auto";
  bool backward = false, tanh_approx = false, force = false;
  FlagSet flags("gemtb gpu attention --q F --k F --v F --q-offsets F --kv-offsets F [options] --out-dir D",
                "Runs the CUDA jagged attention kernels (gpu/attention, H200 / sm_90a) on .npy tensors\n"
                "(bfloat16 as <u2 bits, or float16) and writes o.npy (input dtype), lse.npy (float32,\n"
                "softmax) and, with --backward, dq.npy dk.npy dv.npy (input dtype). Options the kernels\n"
                "do not run (bias, RoPE, Dv != Dqk, head dims other than 16/32/64/128) are errors.");
  RegisterAttentionCaseFlags(flags, spec);
  flags.String("case", &case_dir, "a case folder (case.json + .npy files) instead of the flags above");
  flags.Bool("backward", &backward, "also run the backward (needs --do)");
  flags.String("out-dir", &out_dir, "folder for the outputs (created if missing; its parent must exist)");
  flags.Bool("force", &force, "replace an --out-dir that already holds files, as a whole");
  flags.Bool("tanh-approx", &tanh_approx,
             "let the kernels evaluate silu and gelu_tanh through tanh.approx (AttentionOptions::tanh_approx: "
             "faster; tanh's relative error up to 2^-11 by the PTX ISA)");
  flags.String("forward-kernel", &forward_kernel,
               "auto | mma_sync | hopper_ws | hopper_tma | hopper_split | hopper_small (default auto: the "
               "library's choice, gpu/attention/kernel_policy.h); a kernel that cannot run the call is an error");
  flags.String("backward-kernel", &backward_kernel,
               "auto | mma_sync | hopper_recompute | hopper_stored_ds | hopper_fused_dq (default auto)");
  GEMTB_RETURN_IF_ERROR(flags.Parse(args));
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return absl::OkStatus();
  }
#if !GEMTB_HAVE_CUDA
  return absl::FailedPreconditionError(
      "this gemtb was built without CUDA (nvcc not found at configure time): no GPU kernels");
#else
  if (!case_dir.empty()) {
    absl::StatusOr<io::AttentionCaseSpec> from_case = io::ReadCaseFolder(case_dir);
    if (!from_case.ok()) return from_case.status();
    GEMTB_RETURN_IF_ERROR(MergeCaseFlags(flags, spec, case_dir, *from_case));
    spec = *std::move(from_case);
  }
  absl::StatusOr<OutputSet> output = OutputSet::Prepare("--out-dir", out_dir, {.force = force, .fail_write_at = {}});
  if (!output.ok()) return output.status();
  if (backward && spec.d_o.empty()) return absl::InvalidArgumentError("--backward: needs --do FILE");
  absl::StatusOr<io::AttentionCase> c = io::LoadAttentionCase(spec);
  if (!c.ok()) return c.status();
  c->options.tanh_approx = tanh_approx;
  GpuCall call = MakeGpuCall(c->inputs, c->options, c->d_o, c->d_o_shape);
  absl::StatusOr<gpu::ForwardKernelKind> fk = gpu::ParseForwardKernel(forward_kernel);
  if (!fk.ok()) return absl::InvalidArgumentError(absl::StrCat("--forward-kernel: ", fk.status().message()));
  absl::StatusOr<gpu::BackwardKernelKind> bk = gpu::ParseBackwardKernel(backward_kernel);
  if (!bk.ok()) return absl::InvalidArgumentError(absl::StrCat("--backward-kernel: ", bk.status().message()));
  call.args.kernels = {*fk, *bk};
  GEMTB_RETURN_IF_ERROR(gpu::CanRun(call.args));
  GEMTB_RETURN_IF_ERROR(gpu::DeviceAvailable());

  absl::StatusOr<gpu::ForwardResult> fwd = gpu::Forward(call.args);
  if (!fwd.ok()) return fwd.status();
  const ElementType type = c->inputs.input_type;
  output->AddNpy("o.npy", io::EncodeFloat(BitsToValues(fwd->o, type), fwd->o_shape, c->input_dtype));
  if (c->options.act == Activation::kSoftmax) {
    const std::vector<double> lse(fwd->lse.begin(), fwd->lse.end());
    output->AddNpy("lse.npy", io::EncodeFloat(lse, fwd->lse_shape, io::NpyDType::kFloat32));
  }
  if (backward) {
    absl::StatusOr<gpu::BackwardResult> bwd = gpu::Backward(call.args, call.DoView(), *fwd);
    if (!bwd.ok()) return bwd.status();
    output->AddNpy("dq.npy", io::EncodeFloat(BitsToValues(bwd->dq, type), bwd->dq_shape, c->input_dtype));
    output->AddNpy("dk.npy", io::EncodeFloat(BitsToValues(bwd->dk, type), bwd->dk_shape, c->input_dtype));
    output->AddNpy("dv.npy", io::EncodeFloat(BitsToValues(bwd->dv, type), bwd->dv_shape, c->input_dtype));
  }
  return output->Commit();
#endif
}

}  // namespace

int RunGpuAttention(const std::vector<std::string>& args) {
  if (absl::Status s = Run(args); !s.ok()) return ReportError(kCommand, s);
  return kExitOk;
}

}  // namespace gemtb::cli
