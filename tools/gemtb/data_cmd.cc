// gemtb data generate: samples of the planted-teacher generator as
// .npy files, plus the oracle NE of the samples written (the NE of the true probabilities: the best
// any model can reach on them).
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/data/shape_from_config.h"
#include "model/metrics/ne.h"
#include "reference/model/generated_set.h"
#include "tools/gemtb/command.h"
#include "tools/gemtb/flags.h"
#include "tools/gemtb/output_set.h"

namespace gemtb::cli {
namespace {

constexpr char kCommand[] = "data generate";
constexpr int64_t kMaxSamples = int64_t{1} << 24;

}  // namespace

int RunDataGenerate(const std::vector<std::string>& args) {
  std::string config = "tiny", out_dir;
  bool force = false;
  int64_t samples = 1024, first = 0, seed = 1, threads = 0;
  FlagSet flags("gemtb data generate --config tiny|small|gem-scale|FILE --samples N --out-dir DIR [options]",
                "Writes samples first .. first+N-1 of the planted-teacher generator as .npy files: the KJT\n"
                "(lengths.npy int32 [K*N] key-major, ids.npy int64; keys: the sparse features, then per\n"
                "sequence <seq>.item, <seq>.action, <seq>.dt, events oldest first), seq_lengths.npy int32\n"
                "[J, N], dense.npy float32 [N, m], surface.npy int32 [N], labels.npy and masks.npy uint8\n"
                "[N, T], probs.npy float64 [N, T] (the true probabilities), and meta.json (keys, tasks,\n"
                "oracle NE per task). A FILE config reads its data parameters from --data-params.\n"
                "Samples depend only on (config, seed, index): any --first/--samples split and any\n"
                "--threads give the same bytes.");
  std::string data_params;
  flags.String("config", &config, "model config: tiny | small | gem-scale | path to a config JSON (default tiny)");
  flags.String("data-params", &data_params, "data parameters JSON (default: model/configs/data/<config>.json)");
  flags.Int64("samples", &samples, "number of samples N (default 1024)");
  flags.Int64("first", &first, "index of the first sample (default 0)");
  flags.Int64("seed", &seed, "data seed (default 1)");
  flags.Int64("threads", &threads, "worker threads, 0 = all cores (default 0); output does not depend on it");
  flags.String("out-dir", &out_dir, "output folder (created if missing; its parent must exist)");
  flags.Bool("force", &force, "replace an --out-dir that already holds files, as a whole");
  if (absl::Status s = flags.Parse(args); !s.ok()) return ReportError(kCommand, s);
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return kExitOk;
  }
  if (samples < 1 || samples > kMaxSamples) {
    return ReportError(kCommand, absl::InvalidArgumentError(
                                     absl::StrCat("--samples=", samples, ": expected 1 .. ", kMaxSamples)));
  }
  if (first < 0 || first > INT64_MAX - samples) {
    return ReportError(kCommand, absl::InvalidArgumentError(absl::StrCat("--first=", first, ": expected >= 0")));
  }
  if (seed < 0) {
    return ReportError(kCommand, absl::InvalidArgumentError(absl::StrCat("--seed=", seed, ": expected >= 0")));
  }
  if (threads < 0 || threads > 4096) {
    return ReportError(kCommand,
                       absl::InvalidArgumentError(absl::StrCat("--threads=", threads, ": expected 0 .. 4096")));
  }

  absl::StatusOr<OutputSet> output = OutputSet::Prepare("--out-dir", out_dir, {.force = force, .fail_write_at = {}});
  if (!output.ok()) return ReportError(kCommand, output.status());

  absl::StatusOr<model::ModelConfig> model_config = model::LoadModelConfig(config);
  if (!model_config.ok()) return ReportError(kCommand, model_config.status());
  if (data_params.empty() && model::BuiltinConfigPath(config).empty()) {
    return ReportError(kCommand, absl::InvalidArgumentError(
                                     absl::StrCat("--config=", config, " is a file: give its --data-params too")));
  }
  absl::StatusOr<data::DataParams> params =
      data_params.empty() ? data::LoadDataParams(config) : data::LoadDataParamsFile(data_params);
  if (!params.ok()) return ReportError(kCommand, params.status());
  absl::StatusOr<reference::model::GeneratedSet> set =
      reference::model::GenerateSet(*model_config, *params, samples, first, seed, static_cast<int>(threads));
  if (!set.ok()) return ReportError(kCommand, set.status());

  std::cout << "gemtb data generate: " << samples << " samples of " << model_config->name << " (seed " << seed
            << ", first " << first << ")\n";
  for (const reference::model::GeneratedTask& task : set->tasks) {
    const metrics::NeResult& ne = task.oracle;
    const std::string oracle = task.defined ? absl::StrFormat("%.5f", ne.ne) : std::string("undefined");
    std::printf("  task %-16s masked %9lld  positives %8lld  mean label %.5f  oracle NE %s\n", task.name.c_str(),
                static_cast<long long>(ne.count), static_cast<long long>(ne.positives), ne.mean_label, oracle.c_str());
  }
  for (const auto& [name, array] : set->arrays) output->AddNpy(name + ".npy", array);
  output->AddText("meta.json", set->meta_json);
  if (absl::Status s = output->Commit(); !s.ok()) return ReportError(kCommand, s);
  return kExitOk;
}

}  // namespace gemtb::cli
