// gemtb data generate: samples of the planted-teacher generator as
// .npy files, plus the oracle NE of the samples written (the NE of the true probabilities: the best
// any model can reach on them).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/data/batch.h"
#include "model/data/generator.h"
#include "model/data/shape_from_config.h"
#include "model/metrics/ne.h"
#include "nlohmann/json.hpp"
#include "reference/io/npy.h"
#include "tools/gemtb/command.h"
#include "tools/gemtb/flags.h"
#include "tools/gemtb/output_set.h"

namespace gemtb::cli {
namespace {

constexpr char kCommand[] = "data generate";
constexpr int64_t kMaxSamples = int64_t{1} << 24;

io::NpyArray Int32Array(const std::vector<int32_t>& v, std::vector<int64_t> shape) {
  io::NpyArray a;
  a.dtype = io::NpyDType::kInt32;
  a.shape = std::move(shape);
  a.data.resize(v.size() * sizeof(int32_t));
  for (size_t i = 0; i < v.size(); ++i) {  // little-endian regardless of the host
    const uint32_t u = static_cast<uint32_t>(v[i]);
    for (int k = 0; k < 4; ++k) a.data[i * 4 + static_cast<size_t>(k)] = static_cast<uint8_t>(u >> (8 * k));
  }
  return a;
}

// Shortest round-trip text of a double (nlohmann prints doubles that way).
nlohmann::ordered_json Number(double x) { return std::isfinite(x) ? nlohmann::ordered_json(x) : nullptr; }

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
  absl::StatusOr<data::Generator> generator = data::Generator::Create(*params, data::ShapeFromConfig(*model_config));
  if (!generator.ok()) return ReportError(kCommand, generator.status());

  // Generate: one sample per task, each with its own slot, so threads only change the timing.
  std::vector<data::Sample> generated(static_cast<size_t>(samples));
  {
    std::optional<tbb::global_control> limit;
    if (threads > 0) limit.emplace(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads));
    tbb::parallel_for(int64_t{0}, samples, [&](int64_t b) {
      generator->Generate(static_cast<uint64_t>(seed), first + b, &generated[static_cast<size_t>(b)]);
    });
  }
  data::Batch batch;
  data::AssembleBatch(generator->shape(), generated.data(), samples, &batch);

  const data::DataShape& shape = generator->shape();
  const int64_t T = static_cast<int64_t>(shape.tasks.size()), J = static_cast<int64_t>(shape.sequences.size());
  const int64_t K = static_cast<int64_t>(batch.keys.size());
  nlohmann::ordered_json meta;
  meta["config"] = model_config->name;
  meta["gen_version"] = params->version;
  meta["seed"] = seed;
  meta["first"] = first;
  meta["samples"] = samples;
  meta["keys"] = batch.keys;
  std::vector<std::string> sequence_names, task_names;
  for (const data::SequenceShape& s : shape.sequences) sequence_names.push_back(s.name);
  meta["sequences"] = sequence_names;
  meta["dense"] = shape.dense;
  nlohmann::ordered_json tasks = nlohmann::ordered_json::array();
  std::cout << "gemtb data generate: " << samples << " samples of " << model_config->name << " (seed " << seed
            << ", first " << first << ")\n";
  for (int64_t t = 0; t < T; ++t) {
    const metrics::NeUnit unit = metrics::MakeNeUnit(batch.prob.data() + t, batch.label.data() + t,
                                                     batch.mask.data() + t, samples, T);
    const metrics::NeResult ne = metrics::EvaluateNe(&unit, 1);
    // NE divides by the entropy of the mean label: with no positives or no negatives it has no meaning.
    const bool defined = ne.positives > 0 && ne.positives < ne.count;
    nlohmann::ordered_json task;
    task["name"] = shape.tasks[static_cast<size_t>(t)].name;
    task["masked"] = ne.count;
    task["positives"] = ne.positives;
    task["mean_label"] = Number(ne.mean_label);
    task["oracle_ne"] = defined ? Number(ne.ne) : nullptr;
    task["oracle_calibration"] = Number(ne.calibration);
    tasks.push_back(task);
    const std::string oracle = defined ? absl::StrFormat("%.5f", ne.ne) : std::string("undefined");
    std::printf("  task %-16s masked %9lld  positives %8lld  mean label %.5f  oracle NE %s\n",
                shape.tasks[static_cast<size_t>(t)].name.c_str(), static_cast<long long>(ne.count),
                static_cast<long long>(ne.positives), ne.mean_label, oracle.c_str());
  }
  meta["tasks"] = tasks;

  output->AddNpy("lengths.npy", Int32Array(batch.lengths, {K * samples}));
  output->AddNpy("ids.npy", io::EncodeInt64(batch.values, {static_cast<int64_t>(batch.values.size())}));
  output->AddNpy("seq_lengths.npy", Int32Array(batch.seq_lengths, {J, samples}));
  output->AddNpy("dense.npy", io::EncodeFloat(std::vector<double>(batch.dense.begin(), batch.dense.end()),
                                                  {samples, shape.dense}, io::NpyDType::kFloat32));
  output->AddNpy("surface.npy", Int32Array(batch.surface, {samples}));
  output->AddNpy("labels.npy", io::EncodeUInt8(batch.label, {samples, T}));
  output->AddNpy("masks.npy", io::EncodeUInt8(batch.mask, {samples, T}));
  output->AddNpy("probs.npy", io::EncodeFloat(batch.prob, {samples, T}, io::NpyDType::kFloat64));
  output->AddText("meta.json", meta.dump(2) + "\n");
  if (absl::Status s = output->Commit(); !s.ok()) return ReportError(kCommand, s);
  return kExitOk;
}

}  // namespace gemtb::cli
