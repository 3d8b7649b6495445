// gemtb ref attention: the oracle on the user's own .npy tensors.
#include <iostream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "reference/attention/attention.h"
#include "tools/gemtb/attention_case_flags.h"
#include "tools/gemtb/command.h"
#include "tools/gemtb/flags.h"
#include "tools/gemtb/output_set.h"

namespace gemtb::cli {
namespace {

constexpr char kCommand[] = "ref attention";

absl::Status Run(const std::vector<std::string>& args, bool* help) {
  io::AttentionCaseSpec spec;
  std::string case_dir, mode = "oracle", out_dtype, out_dir;
  int64_t threads = 0;
  bool backward = false, force = false;
  FlagSet flags("gemtb ref attention --q F --k F --v F --q-offsets F --kv-offsets F [options] --out-dir D",
                "Runs the jagged attention oracle (docs/attention-criteria.md) on .npy tensors and writes o.npy,\n"
                "lse.npy (softmax) and, with --backward, dq.npy dk.npy dv.npy plus ddense.npy drel.npy\n"
                "dts.npy for the biases given. Oracle mode computes in fp64 and writes float64; emulate\n"
                "mode mirrors a tensor-core kernel's casts and writes the input dtype.");
  RegisterAttentionCaseFlags(flags, spec);
  flags.String("case", &case_dir, "a case folder (case.json + .npy files) instead of the flags above");
  flags.String("mode", &mode, "oracle (fp64, default) | emulate (fp32 accumulation, input-dtype P/dS)");
  flags.String("out-dtype", &out_dtype, "float64|float32|input (default: float64 oracle, input emulate)");
  flags.Int64("threads", &threads, "oneTBB threads, 0 = all (outputs are identical for any value)");
  flags.Bool("backward", &backward, "also run the backward (needs --do)");
  flags.String("out-dir", &out_dir, "folder for the outputs (created if missing; its parent must exist)");
  flags.Bool("force", &force, "replace an --out-dir that already holds files, as a whole");
  GEMTB_RETURN_IF_ERROR(flags.Parse(args));
  if (flags.help_requested()) {
    std::cout << flags.Help();
    *help = true;
    return absl::OkStatus();
  }
  if (!case_dir.empty()) {
    absl::StatusOr<io::AttentionCaseSpec> from_case = io::ReadCaseFolder(case_dir);
    if (!from_case.ok()) return from_case.status();
    GEMTB_RETURN_IF_ERROR(MergeCaseFlags(flags, spec, case_dir, *from_case));
    spec = *std::move(from_case);
  }
  absl::StatusOr<OutputSet> output = OutputSet::Prepare("--out-dir", out_dir, {.force = force, .fail_write_at = {}});
  if (!output.ok()) return output.status();
  reference::ExecutionOptions exec;
  if (mode == "oracle") {
    exec.precision = reference::Precision::kOracle;
  } else if (mode == "emulate") {
    exec.precision = reference::Precision::kEmulate;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--mode=", mode, ": want oracle|emulate"));
  }
  if (threads < 0 || threads > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("--threads=", threads, ": want 0..4096"));
  }
  exec.threads = static_cast<int>(threads);
  if (backward && spec.d_o.empty()) return absl::InvalidArgumentError("--backward: needs --do FILE");

  absl::StatusOr<io::AttentionCase> c = io::LoadAttentionCase(spec);
  if (!c.ok()) return c.status();

  // Output dtype: float64 in oracle mode, the input dtype in emulate mode, unless overridden.
  io::NpyDType out = exec.precision == reference::Precision::kOracle ? io::NpyDType::kFloat64 : c->input_dtype;
  const std::optional<io::NpyDType> named = io::ParseNpyDTypeName(out_dtype);
  if (named == io::NpyDType::kFloat64 || named == io::NpyDType::kFloat32) {
    out = *named;
  } else if (out_dtype == "input") {  // a keyword, not a dtype name
    out = c->input_dtype;
  } else if (!out_dtype.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--out-dtype=", out_dtype, ": want float64|float32|input"));
  }
  // LSE and the bias/table gradients are fp32 tensors unless the output is float64.
  const io::NpyDType aux = out == io::NpyDType::kFloat64 ? io::NpyDType::kFloat64 : io::NpyDType::kFloat32;

  absl::StatusOr<reference::AttentionForwardResult> fwd =
      reference::AttentionForward(c->inputs, c->options, exec);
  if (!fwd.ok()) return fwd.status();
  output->AddNpy("o.npy", io::EncodeFloat(fwd->o, fwd->o_shape, out));
  if (!fwd->lse.empty() || c->options.act == Activation::kSoftmax) {
    output->AddNpy("lse.npy", io::EncodeFloat(fwd->lse, fwd->lse_shape, aux));
  }
  if (backward) {
    const reference::TensorView<double> d_o{c->d_o, c->d_o_shape};
    absl::StatusOr<reference::AttentionBackwardResult> bwd =
        reference::AttentionBackward(c->inputs, c->options, d_o, *fwd, exec);
    if (!bwd.ok()) return bwd.status();
    output->AddNpy("dq.npy", io::EncodeFloat(bwd->dq, bwd->dq_shape, out));
    output->AddNpy("dk.npy", io::EncodeFloat(bwd->dk, bwd->dk_shape, out));
    output->AddNpy("dv.npy", io::EncodeFloat(bwd->dv, bwd->dv_shape, out));
    if (!bwd->d_bias_dense_shape.empty()) {
      output->AddNpy("ddense.npy", io::EncodeFloat(bwd->d_bias_dense, bwd->d_bias_dense_shape, aux));
    }
    if (!bwd->d_bias_rel_shape.empty()) {
      output->AddNpy("drel.npy", io::EncodeFloat(bwd->d_bias_rel, bwd->d_bias_rel_shape, aux));
    }
    if (!bwd->d_bias_ts_shape.empty()) {
      output->AddNpy("dts.npy", io::EncodeFloat(bwd->d_bias_ts, bwd->d_bias_ts_shape, aux));
    }
  }
  // Only now, with every result computed, does anything touch the output folder.
  return output->Commit();
}

}  // namespace

int RunRefAttention(const std::vector<std::string>& args) {
  bool help = false;
  if (absl::Status s = Run(args, &help); !s.ok()) return ReportError(kCommand, s);
  return kExitOk;
}

}  // namespace gemtb::cli
