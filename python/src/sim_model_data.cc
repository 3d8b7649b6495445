// gemtb.whatif, gemtb.model and gemtb.data.generate: the library calls of `gemtb whatif`,
// `gemtb model` and `gemtb data generate`, returning what those commands print and write.
#include <optional>

#include <nanobind/stl/function.h>
#include <nanobind/stl/pair.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/data/shape_from_config.h"
#include "model/description/data_dir.h"
#include "model/description/graph_costs.h"
#include "model/description/model_config.h"
#include "model/description/model_graph.h"
#include "model/json/user_file.h"
#include "nlohmann/json.hpp"
#include "python/src/arrays.h"
#include "reference/model/generated_set.h"
#include "sim/engine/simulate.h"
#include "sim/report/report_files.h"
#include "sim/report/study.h"
#include "sim/scenario/scenario_json.h"

namespace gemtb::python {
namespace {

absl::Status Bad(const std::string& m) { return absl::InvalidArgumentError(m); }

// `--sharding-plan`: the TorchRec-style plan (a file's path, or its JSON text) set as plan.torchrec_plan.
void SetShardingPlan(sim::ScenarioDocument& doc, const std::optional<std::string>& path,
                     const std::optional<std::string>& json_text) {
  std::string text;
  if (path) {
    absl::StatusOr<std::string> file = ReadUserFile(*path);
    if (!file.ok()) Raise(Bad(absl::StrCat("sharding_plan: ", file.status().message())));
    text = *std::move(file);
  } else {
    text = *json_text;
  }
  const nlohmann::json plan = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (plan.is_discarded()) {
    Raise(Bad(absl::StrCat("sharding_plan: ", path.value_or("the plan"), " is not valid JSON")));
  }
  const absl::Status set = sim::SetFieldJson(doc, "plan.torchrec_plan", plan);
  if (!set.ok()) Raise(Bad(absl::StrCat("sharding_plan: ", set.message())));
}

// The report files of `gemtb whatif` (summary.json, sweep.csv, ...) by name, and its console text.
std::pair<std::vector<std::pair<std::string, std::string>>, std::string> Whatif(
    std::optional<std::string> scenario_path, std::optional<std::string> scenario_json, std::string base_dir,
    std::optional<std::string> sharding_plan_path, std::optional<std::string> sharding_plan_json,
    std::vector<int> gpus, std::vector<std::pair<std::string, std::vector<std::string>>> sets,
    std::optional<std::pair<int, int>> steps, bool sensitivity, bool attribution, bool shapley, bool checks,
    bool levers, int reference_gpus, int threads, std::function<void(std::string)> progress) {
  sim::report::StudyOptions options;
  const bool default_scenario = !scenario_path && !scenario_json;
  if (!gpus.empty()) {
    for (int g : gpus) {
      if (g < 1) Raise(Bad(absl::StrCat("gpus: ", g, " is not a GPU count")));
    }
    options.gpus = gpus;
  } else if (default_scenario) {
    options.gpus = sim::report::DefaultGpuSweep();
  }
  for (auto& [path, values] : sets) {
    if (path.empty() || values.empty()) Raise(Bad(absl::StrCat("set['", path, "']: want a field path and values")));
    options.sets.push_back({path, values});
  }
  if (steps) {
    if (steps->first < 0 || steps->second < 1) {
      Raise(Bad(absl::StrCat("steps=(", steps->first, ", ", steps->second, "): want (W, M) with W >= 0, M >= 1")));
    }
    options.warmup_steps = steps->first;
    options.measured_steps = steps->second;
  }
  if (threads < 0 || threads > 4096) Raise(Bad(absl::StrCat("threads=", threads, ": want 0..4096")));
  if (reference_gpus < 1 || reference_gpus > (1 << 22)) Raise(Bad(absl::StrCat("reference_gpus=", reference_gpus, ": want >= 1")));
  options.threads = threads;
  options.reference_gpus = reference_gpus;
  options.sensitivity = sensitivity;
  options.attribution = attribution;
  options.shapley = shapley;
  options.checks = checks;
  options.levers = levers;
  options.published_targets = default_scenario;
  if (progress) {
    options.progress = [progress](const std::string& line) {
      nb::gil_scoped_acquire acquire;
      progress(line);
    };
  }
  std::string name = "scenario";
  absl::StatusOr<sim::ScenarioDocument> doc;
  if (scenario_json) {
    const nlohmann::json j = nlohmann::json::parse(*scenario_json, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) Raise(Bad("scenario: not valid JSON"));
    doc = sim::LoadScenarioDocument(j, base_dir);
  } else {
    name = scenario_path.value_or(sim::DefaultScenarioPath());
    doc = sim::LoadScenarioDocument(name);
  }
  if (!doc.ok()) Raise(Bad(absl::StrCat(name, ": ", doc.status().message())));
  const bool sharding_plan = sharding_plan_path || sharding_plan_json;
  if (sharding_plan) SetShardingPlan(*doc, sharding_plan_path, sharding_plan_json);
  absl::StatusOr<sim::report::Study> study;
  {
    nb::gil_scoped_release release;
    const sim::report::SimulateFn simulate = [](const sim::Scenario& s, const sim::Counterfactuals& c,
                                                const sim::SimOptions& o) { return sim::Simulate(s, c, o); };
    study = sim::report::RunStudy(*doc, options, simulate);
  }
  if (!study.ok()) {
    // The plan is checked against the model and each swept world size when the study builds them.
    const bool plan_error = sharding_plan && absl::StrContains(study.status().message(), "plan.torchrec_plan");
    Raise(Bad(absl::StrCat(plan_error ? "sharding_plan: " : "", name, ": ", study.status().message())));
  }
  return {sim::report::RenderReport(*study), sim::report::ConsoleReport(*study)};
}

// `gemtb model`: per region and in total, at `batch` samples filled to `sparsity`; the op graph as
// model.json text.
nb::dict Model(const std::string& config_name, int64_t batch, double sparsity) {
  if (batch < 1 || batch > (int64_t{1} << 40)) Raise(Bad(absl::StrCat("batch=", batch, ": must be in [1, 2^40]")));
  if (!(sparsity >= 0.0 && sparsity <= 1.0)) Raise(Bad(absl::StrCat("sparsity=", sparsity, ": must be in [0, 1]")));
  const model::ModelConfig config = Value(model::LoadModelConfig(config_name));
  const model::ModelGraph graph = Value(model::ExpandModel(config));
  const std::vector<int64_t> lengths = model::LengthsAtSparsity(graph, sparsity);
  const model::GraphTotals totals = model::EvaluateGraph(graph, batch, lengths);
  auto cost = [](const model::OpCost& c) {
    nb::dict d;
    d["flops_fwd"] = c.flops_fwd;
    d["flops_bwd"] = c.flops_bwd;
    d["bytes_fwd"] = c.bytes_fwd;
    d["bytes_bwd"] = c.bytes_bwd;
    d["saved_bytes"] = c.saved_bytes;
    return d;
  };
  nb::list ops;
  for (const model::Op& op : graph.ops) {
    nb::dict d = cost(model::EvaluateOp(graph, op, batch, lengths));
    d["name"] = op.name;
    d["region"] = op.region;
    d["params"] = op.params;
    ops.append(d);
  }
  nb::dict result;
  result["config"] = graph.config;
  result["batch"] = batch;
  result["sparsity"] = sparsity;
  result["lengths"] = lengths;
  result["ops"] = ops;
  result["dense_params"] = totals.dense_params;
  result["sparse_params"] = totals.sparse_params;
  result["model"] = cost(totals.model);
  result["all"] = cost(totals.all);
  result["graph_json"] = model::ToJsonText(graph);
  return result;
}

// `gemtb data generate`: the arrays it writes (by file name without .npy) and meta.json's text.
nb::dict DataGenerate(const std::string& config, int64_t samples, int64_t first, int64_t seed,
                      std::optional<std::string> data_params, int threads) {
  constexpr int64_t kMaxSamples = int64_t{1} << 24;
  if (samples < 1 || samples > kMaxSamples) Raise(Bad(absl::StrCat("samples=", samples, ": expected 1 .. ", kMaxSamples)));
  if (first < 0 || first > INT64_MAX - samples) Raise(Bad(absl::StrCat("first=", first, ": expected >= 0")));
  if (seed < 0) Raise(Bad(absl::StrCat("seed=", seed, ": expected >= 0")));
  if (threads < 0 || threads > 4096) Raise(Bad(absl::StrCat("threads=", threads, ": expected 0 .. 4096")));
  const model::ModelConfig model_config = Value(model::LoadModelConfig(config));
  if (!data_params && model::BuiltinConfigPath(config).empty()) {
    Raise(Bad(absl::StrCat("config=", config, " is a file: give its data_params too")));
  }
  const data::DataParams params = Value(data_params ? data::LoadDataParamsFile(*data_params) : data::LoadDataParams(config));
  absl::StatusOr<reference::model::GeneratedSet> set;
  {
    nb::gil_scoped_release release;
    set = reference::model::GenerateSet(model_config, params, samples, first, seed, threads);
  }
  reference::model::GeneratedSet generated = Value(std::move(set));
  nb::dict result;
  for (auto& [name, array] : generated.arrays) result[name.c_str()] = FromNpy(std::move(array));
  result["meta_json"] = generated.meta_json;
  return result;
}

}  // namespace

void BindSimModelData(nb::module_& m) {
  m.def(
      "use_data_dir", [](const std::string& path) { model::NameDataDir(std::filesystem::path(path)); },
      nb::arg("path"));
  m.def("whatif", &Whatif, nb::arg("scenario_path").none(), nb::arg("scenario_json").none(), nb::arg("base_dir"),
        nb::arg("sharding_plan_path").none(), nb::arg("sharding_plan_json").none(), nb::arg("gpus"), nb::arg("sets"),
        nb::arg("steps").none(), nb::arg("sensitivity"), nb::arg("attribution"), nb::arg("shapley"), nb::arg("checks"),
        nb::arg("levers"), nb::arg("reference_gpus"), nb::arg("threads"), nb::arg("progress").none());
  m.def("model", &Model, nb::arg("config"), nb::arg("batch"), nb::arg("sparsity"));
  m.def("data_generate", &DataGenerate, nb::arg("config"), nb::arg("samples"), nb::arg("first"), nb::arg("seed"),
        nb::arg("data_params").none(), nb::arg("threads"));
}

}  // namespace gemtb::python
