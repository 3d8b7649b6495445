// gemtb gpu embed: the GPU embedding kernels (gpu/embedding/api.h) on the case folder of
// `gemtb ref embed`, writing the same files, so `cmp` on the two output folders checks them.
#include <iostream>

#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "tools/gemtb/command.h"
#include "tools/gemtb/embed_case_files.h"
#include "tools/gemtb/flags.h"
#include "tools/gemtb/output_set.h"
#if GEMTB_HAVE_CUDA
#include "tools/check/embed_gpu.h"
#endif

namespace gemtb::cli {
namespace {

constexpr char kCommand[] = "gpu embed";

absl::Status Run(const std::vector<std::string>& args) {
  EmbedCasePaths paths;
  std::string out_dir;
  bool step = false, force = false;
  int64_t step_index = 0;
  FlagSet flags(
      "gemtb gpu embed --spec spec.json --lengths F.npy --ids F.npy [--weights F.npy] [--tables DIR] "
      "[--grads DIR --step] --out-dir DIR",
      "Runs the CUDA table-batched embedding kernels on the inputs of `gemtb ref embed` (the same flags\n"
      "and files; no sharding plan) and writes the same outputs: pooled.npy, seq_<key>.npy and, with\n"
      "--step, table_<name>.npy and its optimizer state. The bits equal the oracle's. Malformed KJTs\n"
      "fail with the oracle's named error before anything launches.");
  flags.String("spec", &paths.spec, "module JSON: seed, batch, keys, tables[], features[]");
  flags.String("lengths", &paths.lengths, "int32 (or int64) [F*B] bag lengths, key-major");
  flags.String("ids", &paths.ids, "int64 ids, key -> sample -> position");
  flags.String("weights", &paths.weights, "float32 per-id weights (weighted_sum pooling)");
  flags.String("offsets", &paths.offsets, "int64 [F*B+1] offsets (optional; must match the lengths)");
  flags.String("tables", &paths.tables, "initial tables/state (table_<name>.npy ...); default: Philox init");
  flags.String("grads", &paths.grads, "upstream gradients: pooled.npy, seq_<key>.npy (float32)");
  flags.Bool("step", &step, "run the backward with the fused optimizer and write the updated tables");
  flags.Int64("step-index", &step_index, "the step s that keys stochastic rounding (default 0)");
  flags.String("out-dir", &out_dir, "output folder (created; its parent must exist)");
  flags.Bool("force", &force, "replace an --out-dir that already holds files, as a whole");
  GEMTB_RETURN_IF_ERROR(flags.Parse(args));
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return absl::OkStatus();
  }
  for (const auto& [flag, value] : {std::pair{"--spec", &paths.spec}, {"--lengths", &paths.lengths},
                                    {"--ids", &paths.ids}, {"--out-dir", &out_dir}}) {
    if (value->empty()) return absl::InvalidArgumentError(absl::StrCat(flag, ": required"));
  }
  if (step && paths.grads.empty()) return absl::InvalidArgumentError("--step: needs --grads DIR");
  if (step_index < 0) return absl::InvalidArgumentError(absl::StrCat("--step-index=", step_index, ": must be >= 0"));
  absl::StatusOr<OutputSet> output = OutputSet::Prepare("--out-dir", out_dir, {.force = force, .fail_write_at = {}});
  if (!output.ok()) return output.status();
#if !GEMTB_HAVE_CUDA
  return absl::FailedPreconditionError("this gemtb was built without CUDA (nvcc not found at configure time)");
#else
  absl::StatusOr<check::EmbedCase> c = ReadEmbedCaseFiles(paths, step_index);
  if (!c.ok()) return c.status();
  // The KJT's named error comes before the gradients are read (they are shaped by it).
  GEMTB_RETURN_IF_ERROR(check::ValidateEmbedKjtOnGpuHost(*c));
  if (step) GEMTB_RETURN_IF_ERROR(ReadEmbedGrads(paths.grads, *c));
  absl::StatusOr<check::EmbedGpuResult> r = check::RunEmbedGpuCase(*c, step);
  if (!r.ok()) return r.status();
  return WriteEmbedOutputs(*c, r->output, step ? &r->state : nullptr, *output);
#endif
}

}  // namespace

int RunGpuEmbed(const std::vector<std::string>& args) {
  if (absl::Status s = Run(args); !s.ok()) return ReportError(kCommand, s);
  return kExitOk;
}

}  // namespace gemtb::cli
