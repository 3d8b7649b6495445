// gemtb whatif: the main job. Simulates a GEM-scale training job (sim/scenarios/gem-default.json by
// default) over GPU counts and plan fields, prints SR, MFUs and the biggest loss per size, the
// checks, the lever table, the assumptions and the sensitivity grid, and writes the report files
// (sim/report/report_files.h).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "model/common/status_macros.h"
#include "model/json/user_file.h"
#include "sim/engine/simulate.h"
#include "sim/report/json_text.h"
#include "sim/report/report_files.h"
#include "sim/report/study.h"
#include "sim/scenario/scenario_json.h"
#include "tools/gemtb/command.h"
#include "tools/gemtb/flags.h"

namespace gemtb::cli {
namespace {

constexpr char kCommand[] = "whatif";
namespace fs = std::filesystem;
using sim::report::FieldSweep;

absl::Status Bad(const std::string& m) { return absl::InvalidArgumentError(m); }

absl::StatusOr<std::vector<int>> ParseIntList(const std::string& flag, const std::string& text) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int v = 0;
    if (!absl::SimpleAtoi(part, &v)) return Bad(absl::StrCat("--", flag, "=", text, ": '", part, "' is not an integer"));
    out.push_back(v);
  }
  return out;
}

// --set path=v1,v2 (a value starting with [ or { is one JSON value, commas included).
absl::StatusOr<FieldSweep> ParseSet(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
    return Bad(absl::StrCat("--set ", text, ": want path=value[,value...], e.g. plan.dense.fsdp_shard_group=128,256"));
  }
  FieldSweep f;
  f.path = text.substr(0, eq);
  const std::string values = text.substr(eq + 1);
  if (values[0] == '[' || values[0] == '{') {
    f.values.push_back(values);
  } else {
    for (absl::string_view v : absl::StrSplit(values, ',')) {
      if (v.empty()) return Bad(absl::StrCat("--set ", text, ": empty value"));
      f.values.emplace_back(v);
    }
  }
  return f;
}

// --out-dir, checked before the run: the folder, or the nearest existing folder above it, must be a
// directory this process can write (bad input, exit 2, when not). Nothing is created yet, so bad
// input leaves nothing behind.
absl::Status CheckOutDir(const std::string& out_dir) {
  std::error_code ec;
  fs::path existing = fs::absolute(out_dir, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("--out-dir=", out_dir, ": ", ec.message()));
  while (!fs::exists(existing, ec) && existing.has_relative_path()) existing = existing.parent_path();
  if (!fs::is_directory(existing, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("--out-dir=", out_dir, ": ", existing.string(), " is not a directory"));
  }
  if (::access(existing.c_str(), W_OK | X_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--out-dir=", out_dir, ": ", existing.string(), " is not writable: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status Run(const std::vector<std::string>& raw_args, bool* help) {
  // The scenario (first argument, if not a flag) and every --set come out before FlagSet parses.
  std::vector<std::string> args;
  std::string scenario_path;
  std::vector<FieldSweep> sets;
  for (size_t i = 0; i < raw_args.size(); ++i) {
    const std::string& a = raw_args[i];
    if (i == 0 && a.rfind("-", 0) != 0) {
      scenario_path = a;
    } else if (a == "--set" || a.rfind("--set=", 0) == 0) {
      std::string value;
      if (a == "--set") {
        if (i + 1 >= raw_args.size()) return Bad("--set: missing path=value");
        value = raw_args[++i];
      } else {
        value = a.substr(6);
      }
      absl::StatusOr<FieldSweep> f = ParseSet(value);
      if (!f.ok()) return f.status();
      sets.push_back(*std::move(f));
    } else {
      args.push_back(a);
    }
  }

  std::string out_dir = "whatif-out", gpus_text, steps_text, trace_ranks_text, sharding_plan, layer_calibration;
  int64_t trace_step = -1, threads = 0, reference_gpus = 4096;
  bool no_sensitivity = false, no_attribution = false, no_checks = false, quiet = false, shapley = false, no_levers = false;
  FlagSet flags(
      "gemtb whatif [scenario.json] [--out-dir DIR] [--gpus 64,128,...] [--set path=v1,v2] [--steps W,M]\n"
      "       [--trace-ranks 0,1,..] [--trace-step N] [--no-sensitivity] [--no-attribution] [--shapley] [--no-checks]\n"
      "       [--sharding-plan FILE] [--layer-calibration FILE] [--threads N]",
      "Simulates a training job on a cluster and predicts its step time, Local MFU, E2E MFU\n"
      "and Scaling Ratio; attributes the lost time to its causes by counterfactual reruns (communication,\n"
      "SM contention, load imbalance, stragglers, recompute). With no scenario it runs\n"
      "sim/scenarios/gem-default.json (the gem-scale model on a 3-tier H200 cluster) over 64..16,384 GPUs;\n"
      "with a scenario, at its own world size unless --gpus says otherwise. --set sweeps any field (cross\n"
      "product with --gpus). At the reference size (4,096 GPUs when swept) it also runs the sensitivity of SR\n"
      "to each assumption of the scenario and the checks (imbalance random vs BBS, SM-free recovery).\n"
      "Writes summary.json, ranks.csv, collectives.csv, trace.json (Perfetto), sweep.csv, sweep.svg and\n"
      "perf.json under --out-dir; progress goes to stderr.");
  flags.String("out-dir", &out_dir, "output folder (default whatif-out)");
  flags.String("gpus", &gpus_text, "GPU counts to sweep, e.g. 1024,2048,4096 (weak scaling: local batch fixed)");
  flags.String("steps", &steps_text, "W,M: warm-up and measured steps (default: the scenario's)");
  flags.String("trace-ranks", &trace_ranks_text, "ranks in trace.json (default 0-7 and the slowest)");
  flags.Int64("trace-step", &trace_step, "step in trace.json, counted from 0 over all steps (default: first measured)");
  flags.String("sharding-plan", &sharding_plan,
               "a TorchRec-style sharding plan, {\"tables\": {table: {sharding_type, ranks}}}, as plan.torchrec_plan");
  flags.String("layer-calibration", &layer_calibration,
               "measured per-layer efficiencies (docs/layer-calibration.md), as cluster.calibration.layers");
  flags.Int64("reference-gpus", &reference_gpus, "size for sensitivity, checks, trace and ranks.csv (default 4096)");
  flags.Bool("no-sensitivity", &no_sensitivity, "skip the sensitivity analysis");
  flags.Bool("no-attribution", &no_attribution, "skip the 5 counterfactual reruns per point");
  flags.Bool("shapley", &shapley,
             "also split the loss order-free: all 32 subsets of the 5 reruns per point (Shapley shares, ~5x the runs)");
  flags.Bool("no-checks", &no_checks, "skip the random-vs-BBS and SM-free checks");
  flags.Bool("no-levers", &no_levers, "skip the lever table (each of the article's levers switched off alone)");
  flags.Bool("quiet", &quiet, "no progress on stderr");
  flags.Int64("threads", &threads, "oneTBB threads, 0 = all (results do not depend on it)");
  GEMTB_RETURN_IF_ERROR(flags.Parse(args));
  if (flags.help_requested()) {
    std::cout << flags.Help() << "  --set PATH=V1,V2         sweep a scenario field (repeatable), e.g.\n"
              << "                           plan.dense.fsdp_shard_group=128,256\n";
    *help = true;
    return absl::OkStatus();
  }

  sim::report::StudyOptions options;
  const bool default_scenario = scenario_path.empty();
  if (default_scenario) scenario_path = sim::DefaultScenarioPath();
  if (!gpus_text.empty()) {
    absl::StatusOr<std::vector<int>> g = ParseIntList("gpus", gpus_text);
    if (!g.ok()) return g.status();
    options.gpus = *g;
  } else if (default_scenario) {
    options.gpus = sim::report::DefaultGpuSweep();
  }
  if (!steps_text.empty()) {
    absl::StatusOr<std::vector<int>> s = ParseIntList("steps", steps_text);
    if (!s.ok()) return s.status();
    if (s->size() != 2 || (*s)[0] < 0 || (*s)[1] < 1) return Bad(absl::StrCat("--steps=", steps_text, ": want W,M with W >= 0, M >= 1"));
    options.warmup_steps = (*s)[0];
    options.measured_steps = (*s)[1];
  }
  if (!trace_ranks_text.empty()) {
    absl::StatusOr<std::vector<int>> r = ParseIntList("trace-ranks", trace_ranks_text);
    if (!r.ok()) return r.status();
    for (int rank : *r) {
      if (rank < 0) return Bad(absl::StrCat("--trace-ranks=", trace_ranks_text, ": ", rank, " is not a rank"));
    }
    options.trace_ranks = *r;
  }
  if (trace_step < -1 || trace_step > 100000) return Bad(absl::StrCat("--trace-step=", trace_step, ": want 0..100000"));
  if (threads < 0 || threads > 4096) return Bad(absl::StrCat("--threads=", threads, ": want 0..4096"));
  if (reference_gpus < 1 || reference_gpus > (1 << 22)) return Bad(absl::StrCat("--reference-gpus=", reference_gpus, ": want >= 1"));
  options.trace_step = static_cast<int>(trace_step);
  options.threads = static_cast<int>(threads);
  options.reference_gpus = static_cast<int>(reference_gpus);
  options.sets = sets;
  options.sensitivity = !no_sensitivity;
  options.attribution = !no_attribution;
  options.shapley = shapley;
  options.checks = !no_checks;
  options.levers = !no_levers;
  options.published_targets = default_scenario;
  if (!quiet) options.progress = [](const std::string& line) { std::cerr << "whatif: " << line << std::endl; };

  // The output folder must be writable before minutes of simulation, not after.
  GEMTB_RETURN_IF_ERROR(CheckOutDir(out_dir));
  absl::StatusOr<sim::ScenarioDocument> doc = sim::LoadScenarioDocument(scenario_path);
  if (!doc.ok()) return absl::InvalidArgumentError(absl::StrCat(scenario_path, ": ", doc.status().message()));
  if (!sharding_plan.empty()) {
    absl::StatusOr<std::string> text = ReadUserFile(sharding_plan);
    if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat("--sharding-plan: ", text.status().message()));
    const nlohmann::json plan = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (plan.is_discarded()) {
      return absl::InvalidArgumentError(absl::StrCat("--sharding-plan: ", sharding_plan, " is not valid JSON"));
    }
    GEMTB_RETURN_IF_ERROR(sim::SetFieldJson(*doc, "plan.torchrec_plan", plan));
  }
  if (!layer_calibration.empty()) {
    absl::StatusOr<std::string> text = ReadUserFile(layer_calibration);
    if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat("--layer-calibration: ", text.status().message()));
    const nlohmann::json layers = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (layers.is_discarded()) {
      return absl::InvalidArgumentError(absl::StrCat("--layer-calibration: ", layer_calibration, " is not valid JSON"));
    }
    GEMTB_RETURN_IF_ERROR(sim::SetFieldJson(*doc, "cluster.calibration.layers", layers));
  }
  if (!quiet) {
    std::cerr << "whatif: " << scenario_path << " (" << doc->name << ")"
              << (options.gpus.empty() ? "" : absl::StrCat(", ", options.gpus.size(), " GPU counts")) << std::endl;
  }
  const sim::report::SimulateFn simulate = [](const sim::Scenario& s, const sim::Counterfactuals& c,
                                              const sim::SimOptions& o) { return sim::Simulate(s, c, o); };
  absl::StatusOr<sim::report::Study> study = sim::report::RunStudy(*doc, options, simulate);
  if (!study.ok()) return absl::InvalidArgumentError(absl::StrCat(scenario_path, ": ", study.status().message()));

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("--out-dir=", out_dir, ": ", ec.message()));
  std::string written;
  for (const auto& [name, text] : sim::report::RenderReport(*study)) {
    GEMTB_RETURN_IF_ERROR(WriteTextAtomically((fs::path(out_dir) / name).string(), text));
    absl::StrAppend(&written, written.empty() ? "" : ", ", name);
  }
  std::cout << sim::report::ConsoleReport(*study);
  std::cout << "\nwrote " << written << " to " << out_dir << " (" << study->perf.size() << " runs, "
            << sim::report::FormatShort(study->wall_s, 3) << " s on " << study->threads << " threads)\n";
  return absl::OkStatus();
}

}  // namespace

int RunWhatif(const std::vector<std::string>& args) {
  bool help = false;
  const absl::Status status = Run(args, &help);
  if (!status.ok()) return ReportError(kCommand, status);
  return kExitOk;
}

}  // namespace gemtb::cli
