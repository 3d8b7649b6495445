// gemtb bench embed: effective TB/s of the GPU embedding kernels, forward and backward + optimizer,
// on the benchmark shapes, with the copy ceiling measured in the same call and a
// determinism run (two backward steps from the same tables, differing bytes). Writes
// <out-dir>/bench_embed.json and each shape's ids as <out-dir>/<shape>_ids.npy, which
// tools/bench/embed_peers.py reads to time PyTorch on the same ids. Built without CUDA it says so
// and exits 2.
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "model/common/enum_names.h"
#include "model/common/status_macros.h"
#include "nlohmann/json.hpp"
#include "tools/gemtb/command.h"
#include "tools/gemtb/flags.h"
#include "tools/gemtb/output_set.h"
#if GEMTB_HAVE_CUDA
#include <filesystem>

#include "gpu/common/device_buffer.h"
#include "gpu/embedding/api.h"
#include "gpu/embedding/embed_bench.h"
#endif

namespace gemtb::cli {
namespace {

constexpr char kCommand[] = "bench embed";

#if GEMTB_HAVE_CUDA
// The backward's phases (CUDA events between its launches), median ms each.
nlohmann::json PhasesJson(const gpu::embedding::BackwardPhaseTimes& t) {
  return {{"occurrences", t.occurrences_ms}, {"sort", t.sort_ms}, {"runs", t.runs_ms}, {"rows", t.rows_ms},
          {"hot_rows", t.hot_rows_ms}};
}

nlohmann::json TimingJson(const gpu::embedding::EmbedTiming& t) {
  return {{"median_ms", t.median_ms}, {"min_ms", t.min_ms}, {"max_ms", t.max_ms}, {"bytes", t.bytes}, {"tbps", t.tbps}};
}
#endif

absl::Status Run(const std::vector<std::string>& args) {
  std::string out_dir, shapes_text, label;
  bool force = false;
  int64_t warmup = 3, reps = 20, seed = 1, rows = 10'000'000, copy_mib = 4096, determinism_rows = 1'000'000;
  FlagSet flags("gemtb bench embed --out-dir D [--shapes a,b] [--reps N] [--rows N]",
                "Times the CUDA table-batched embedding kernels on one table of --rows x 128 (default 10M),\n"
                "64k bags of 32 ids, uniform or Zipf(1.05) ids: forward (sum, mean, weighted sum; fp32, bf16)\n"
                "and backward fused with rowwise Adagrad, as effective TB/s (bytes the operation must move,\n"
                "gpu/embedding/embed_bench.h) over the median of --reps CUDA-event-timed runs. A plain copy\n"
                "kernel's TB/s (the ceiling) is timed in the same call, and two backward steps from the same\n"
                "tables are compared byte for byte (Zipf ids, --determinism-rows rows). Writes\n"
                "D/bench_embed.json and D/<shape>_ids.npy for tools/bench/embed_peers.py.");
  flags.String("out-dir", &out_dir, "output folder (created; its parent must exist)");
  flags.Bool("force", &force, "replace an --out-dir that already holds files, as a whole");
  flags.String("shapes", &shapes_text, "comma-separated shape names (default: all)");
  flags.Int64("warmup", &warmup, "untimed runs before timing (default 3)");
  flags.Int64("reps", &reps, "timed runs; the median is reported (default 20)");
  flags.Int64("seed", &seed, "seed of the ids and gradients (default 1)");
  flags.Int64("rows", &rows, "table rows (default 10000000)");
  flags.Int64("copy-mib", &copy_mib, "MiB copied by the ceiling kernel (default 4096)");
  flags.Int64("determinism-rows", &determinism_rows, "table rows of the determinism run (default 1000000; 0 skips)");
  flags.String("label", &label, "free text stored in the JSON (e.g. the commit)");
  GEMTB_RETURN_IF_ERROR(flags.Parse(args));
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return absl::OkStatus();
  }
  if (out_dir.empty()) return absl::InvalidArgumentError("--out-dir: required");
  if (reps < 1 || warmup < 0) return absl::InvalidArgumentError(absl::StrCat("--reps=", reps, " --warmup=", warmup, ": want reps >= 1, warmup >= 0"));
  if (rows < 1) return absl::InvalidArgumentError(absl::StrCat("--rows=", rows, ": must be >= 1"));
  if (copy_mib < 1) return absl::InvalidArgumentError(absl::StrCat("--copy-mib=", copy_mib, ": must be >= 1"));
  absl::StatusOr<OutputSet> output = OutputSet::Prepare("--out-dir", out_dir, {.force = force, .fail_write_at = {}});
  if (!output.ok()) return output.status();
#if !GEMTB_HAVE_CUDA
  return absl::FailedPreconditionError("this gemtb was built without CUDA (nvcc not found at configure time)");
#else
  namespace ge = gpu::embedding;
  std::vector<ge::EmbedBenchShape> shapes = ge::DefaultEmbedBenchShapes();
  if (!shapes_text.empty()) {
    std::vector<ge::EmbedBenchShape> chosen;
    for (absl::string_view name : absl::StrSplit(shapes_text, ',')) {
      auto it = std::find_if(shapes.begin(), shapes.end(), [&](const ge::EmbedBenchShape& s) { return s.name == name; });
      if (it == shapes.end()) return absl::InvalidArgumentError(absl::StrCat("--shapes: unknown shape '", name, "'"));
      chosen.push_back(*it);
    }
    shapes = chosen;
  }
  for (ge::EmbedBenchShape& s : shapes) s.rows = rows;
  GEMTB_RETURN_IF_ERROR(ge::EmbeddingDeviceAvailable());
  GEMTB_RETURN_IF_ERROR(gpu::RetainFreedDeviceMemory());
  const ge::EmbedBenchOptions options{warmup, reps, static_cast<uint64_t>(seed)};
  nlohmann::json j = {{"label", label}, {"rows", rows}, {"reps", reps}, {"warmup", warmup}, {"seed", seed}};
  absl::StatusOr<ge::EmbedTiming> copy = ge::RunCopyCeiling(copy_mib << 20, options);
  if (!copy.ok()) return copy.status();
  j["copy_ceiling"] = TimingJson(*copy);
  std::cout << absl::StrFormat("%-22s %8s %12s %12s %9s %9s %7s\n", "shape", "unique", "fwd ms", "bwd+opt ms",
                               "fwd TB/s", "bwd TB/s", "fwd/cp");
  std::vector<std::pair<std::string, io::NpyArray>> id_files;
  nlohmann::json rows_json = nlohmann::json::array();
  for (const ge::EmbedBenchShape& s : shapes) {
    absl::StatusOr<ge::EmbedBenchResult> r = ge::RunEmbedBench(s, options);
    if (!r.ok()) return absl::Status(r.status().code(), absl::StrCat(s.name, ": ", r.status().message()));
    std::cout << absl::StrFormat("%-22s %8d %12.4f %12.4f %9.3f %9.3f %7.2f\n", s.name, r->unique_rows,
                                 r->forward.median_ms, r->backward.median_ms, r->forward.tbps, r->backward.tbps,
                                 copy->tbps > 0 ? r->forward.tbps / copy->tbps : 0.0);
    rows_json.push_back({{"shape", s.name}, {"rows", s.rows}, {"dim", s.dim}, {"bags", s.bags},
                         {"ids_per_bag", s.ids_per_bag}, {"zipf_s", s.zipf_s},
                         {"dtype", std::string(NameIn(kTableDtypeNames, s.dtype))},
                         {"pooling", std::string(NameIn(kPoolingNames, s.pooling))},
                         {"optimizer", std::string(NameIn(kOptimizerKindNames, s.optimizer))},
                         {"unique_rows", r->unique_rows}, {"forward", TimingJson(r->forward)},
                         {"backward_optimizer", TimingJson(r->backward)},
                         {"backward_phases_ms", PhasesJson(r->backward_phases)}});
    const std::vector<int64_t> ids = ge::DrawBenchIds(s, options.seed);
    id_files.emplace_back(absl::StrCat(s.name, "_ids.npy"), io::EncodeInt64(ids, {s.bags, s.ids_per_bag}));
  }
  j["shapes"] = rows_json;
  std::cout << absl::StrFormat("%-22s %8s %12.4f %12s %9.3f\n", "copy ceiling", "", copy->median_ms, "", copy->tbps);
  std::cout << absl::StrFormat("\nbackward phases, median ms\n%-22s %11s %8s %8s %8s %8s\n", "shape", "occurrences",
                               "sort", "runs", "rows", "hot rows");
  for (const nlohmann::json& row : rows_json) {
    const nlohmann::json& ph = row["backward_phases_ms"];
    std::cout << absl::StrFormat("%-22s %11.4f %8.4f %8.4f %8.4f %8.4f\n", row["shape"].get<std::string>(),
                                 ph["occurrences"].get<double>(), ph["sort"].get<double>(), ph["runs"].get<double>(),
                                 ph["rows"].get<double>(), ph["hot_rows"].get<double>());
  }
  if (determinism_rows > 0) {
    ge::EmbedBenchShape s = ge::DefaultEmbedBenchShapes()[1];  // Zipf: long runs of one row
    s.rows = determinism_rows;
    absl::StatusOr<int64_t> diff = ge::BackwardDeterminismDiff(s, options);
    if (!diff.ok()) return diff.status();
    j["determinism"] = {{"shape", s.name}, {"rows", s.rows}, {"differing_bytes", *diff}};
    std::cout << "determinism: two backward steps (" << s.name << ", " << s.rows
              << " rows) differ in " << *diff << " bytes of tables and state\n";
  }
  for (const auto& [name, array] : id_files) output->AddNpy(name, array);
  output->AddText("bench_embed.json", j.dump(2) + "\n");
  return output->Commit();
#endif
}

}  // namespace

int RunBenchEmbed(const std::vector<std::string>& args) {
  if (absl::Status s = Run(args); !s.ok()) return ReportError(kCommand, s);
  return kExitOk;
}

}  // namespace gemtb::cli
