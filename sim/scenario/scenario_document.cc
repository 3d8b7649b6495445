// Loading a scenario document (section files read, the model parsed once, overrides applied) and
// editing its fields by dotted JSON path: what sweeps, `--set` and the sensitivity analysis do.
#include <cmath>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "model/description/model_config.h"
#include "model/description/model_graph.h"
#include "sim/network/cluster_json.h"
#include "model/json/json_reader.h"
#include "sim/scenario/scenario_json.h"

namespace gemtb::sim {

using namespace ::gemtb::json;  // the strict reader: ObjectReader, BadValue, JoinPath, ...
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kRowsPath = "model.tables[*].rows";

// A file named inside a scenario resolves against the folder of the file that names it, as an
// absolute path: errors then show where it was looked for, whatever the working directory.
std::string Resolve(const std::string& base_dir, const std::string& relative) {
  const fs::path p(relative);
  if (p.is_absolute()) return p.lexically_normal().string();
  std::error_code ec;
  const fs::path base = fs::absolute(base_dir.empty() ? fs::path(".") : fs::path(base_dir), ec);
  return ((ec ? fs::path(base_dir) : base) / p).lexically_normal().string();
}

std::string ParentDir(const std::string& path) {
  const std::string parent = fs::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

// Reads and parses a JSON file that `field` refers to; errors name the field and the file.
absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path, std::string_view field) {
  absl::StatusOr<std::string> text = ReadFileFromDisk(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(absl::string_view(field.data(), field.size()), ": cannot read '", path, "': ", text.status().message()));
  }
  nlohmann::json json = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return absl::InvalidArgumentError(
        absl::StrCat(absl::string_view(field.data(), field.size()), ": '", path, "' is not valid JSON"));
  }
  return json;
}

absl::StatusOr<model::ModelGraph> ExpandConfig(const absl::StatusOr<model::ModelConfig>& config, const std::string& what) {
  if (!config.ok()) return absl::InvalidArgumentError(absl::StrCat("model (", what, "): ", config.status().message()));
  absl::StatusOr<model::ModelGraph> graph = model::ExpandModel(*config);
  if (!graph.ok()) return absl::InvalidArgumentError(absl::StrCat("model (", what, "): ", graph.status().message()));
  return graph;
}

// The model section: a built-in config name, a model.json or config file, a model.json object, or
// {"config": name or path}.
absl::StatusOr<model::ModelGraph> LoadModel(const nlohmann::json& json, const std::string& base_dir) {
  auto from_name_or_file = [&](const std::string& text) -> absl::StatusOr<model::ModelGraph> {
    if (!model::BuiltinConfigPath(text).empty()) return ExpandConfig(model::LoadModelConfig(text), text);
    const std::string path = Resolve(base_dir, text);
    absl::StatusOr<nlohmann::json> file = ReadJsonFile(path, "model");
    if (!file.ok()) return file.status();
    if (file->is_object() && file->contains("ops")) return model::ParseModelJson(*file, "model");
    return ExpandConfig(model::ParseModelConfig(*file), path);
  };
  if (json.is_string()) return from_name_or_file(json.get<std::string>());
  if (json.is_object() && json.size() == 1 && json.contains("config")) {
    if (!json["config"].is_string()) return BadValue("model.config", json["config"], "is not a config name or path");
    return from_name_or_file(json["config"].get<std::string>());
  }
  if (json.is_object()) return model::ParseModelJson(json, "model");
  return BadValue("model", json, "is not a model.json object, a config name or a path");
}

double TotalRows(const model::ModelGraph& graph) {
  double rows = 0;
  for (const model::GraphTable& t : graph.tables) rows += static_cast<double>(t.rows);
  return rows;
}

// One step of a dotted path: a key, then any number of [index].
struct PathStep {
  std::string key;
  std::vector<size_t> indices;
};

absl::StatusOr<std::vector<PathStep>> SplitPath(std::string_view path) {
  std::vector<PathStep> steps;
  size_t i = 0;
  const auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("'", absl::string_view(path.data(), path.size()), "': ",
                                                   absl::string_view(why.data(), why.size())));
  };
  while (i <= path.size()) {
    PathStep step;
    while (i < path.size() && path[i] != '.' && path[i] != '[') step.key += path[i++];
    if (step.key.empty()) return bad("is not a dotted JSON path (e.g. plan.dense.fsdp_shard_group)");
    while (i < path.size() && path[i] == '[') {
      const size_t close = path.find(']', i);
      if (close == std::string_view::npos || close == i + 1) return bad("has an unclosed or empty [index]");
      size_t index = 0;
      for (size_t k = i + 1; k < close; ++k) {
        if (path[k] < '0' || path[k] > '9') return bad("has a non-numeric [index]");
        index = index * 10 + static_cast<size_t>(path[k] - '0');
        if (index > (size_t{1} << 30)) return bad("has an [index] out of range");
      }
      step.indices.push_back(index);
      i = close + 1;
    }
    steps.push_back(std::move(step));
    if (i == path.size()) break;
    if (path[i] != '.') return bad("is not a dotted JSON path (e.g. plan.dense.fsdp_shard_group)");
    ++i;
  }
  return steps;
}

// Walks `path` in doc.json. With `create`, missing object keys are created (as objects, the last as
// null) and a string met where an object is needed inside the cluster (its calibration file) is read
// in place. Returns the addressed value.
absl::StatusOr<nlohmann::json*> Walk(ScenarioDocument& doc, std::string_view path, bool create) {
  absl::StatusOr<std::vector<PathStep>> steps = SplitPath(path);
  if (!steps.ok()) return steps.status();
  nlohmann::json* node = &doc.json;
  std::string walked;
  for (size_t s = 0; s < steps->size(); ++s) {
    const PathStep& step = (*steps)[s];
    if (node->is_string() && create && walked.rfind("cluster", 0) == 0) {
      absl::StatusOr<nlohmann::json> file = ReadJsonFile(Resolve(doc.cluster_base_dir, node->get<std::string>()), walked);
      if (!file.ok()) return file.status();
      *node = *std::move(file);
    }
    if (!node->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(absl::string_view(path.data(), path.size()), ": '", walked, "' is not an object"));
    }
    walked = JoinPath(walked, step.key);
    if (!node->contains(step.key)) {
      if (!create) {
        return absl::InvalidArgumentError(
            absl::StrCat(absl::string_view(path.data(), path.size()), ": '", walked, "' does not exist"));
      }
      (*node)[step.key] = (s + 1 == steps->size() && step.indices.empty()) ? nlohmann::json() : nlohmann::json::object();
    }
    node = &(*node)[step.key];
    for (size_t index : step.indices) {
      if (!node->is_array() || index >= node->size()) {
        return absl::InvalidArgumentError(absl::StrCat(absl::string_view(path.data(), path.size()), ": '", walked,
                                                       "' has no element [", index, "]"));
      }
      walked = IndexPath(walked, index);
      node = &(*node)[index];
    }
  }
  return node;
}

}  // namespace

absl::StatusOr<ScenarioDocument> LoadScenarioDocument(const std::string& path) {
  absl::StatusOr<nlohmann::json> json = ReadJsonFile(path, "scenario");
  if (!json.ok()) return json.status();
  return LoadScenarioDocument(*json, ParentDir(path), fs::path(path).stem().string());
}

absl::StatusOr<ScenarioDocument> LoadScenarioDocument(const nlohmann::json& json, const std::string& base_dir,
                                                      std::string name) {
  absl::StatusOr<ObjectReader> top = ObjectReader::Open(
      json, "",
      {"name", "description", "seed", "model", "cluster", "plan", "batches", "noise", "overrides", "assumptions"});
  if (!top.ok()) {
    if (!json.is_object()) return BadValue("scenario", json, "is not a JSON object");
    return top.status();
  }
  for (std::string_view key : {"seed", "model", "cluster", "plan", "batches"}) {
    GEMTB_RETURN_IF_ERROR(top->Require(key));
  }
  ScenarioDocument doc;
  doc.json = json;
  doc.base_dir = base_dir;
  doc.cluster_base_dir = base_dir;
  doc.name = std::move(name);
  GEMTB_RETURN_IF_ERROR(top->String("name", &doc.name));
  if (const nlohmann::json* d = top->Get("description"); d != nullptr && !d->is_string()) {
    return BadValue("description", *d, "is not a string");
  }
  // Section files are read now, so that later edits address their fields.
  for (const char* section : {"cluster", "plan", "batches", "noise"}) {
    if (!doc.json.contains(section) || !doc.json[section].is_string()) continue;
    const std::string file = Resolve(base_dir, doc.json[section].get<std::string>());
    absl::StatusOr<nlohmann::json> content = ReadJsonFile(file, section);
    if (!content.ok()) return content.status();
    doc.json[section] = *std::move(content);
    if (std::string_view(section) == "cluster") doc.cluster_base_dir = ParentDir(file);
  }
  absl::StatusOr<model::ModelGraph> graph = LoadModel(doc.json["model"], base_dir);
  if (!graph.ok()) return graph.status();
  doc.model = std::make_shared<const model::ModelGraph>(*std::move(graph));

  if (doc.json.contains("overrides")) {
    const nlohmann::json overrides = doc.json["overrides"];
    doc.json.erase("overrides");
    if (!overrides.is_object()) return BadValue("overrides", overrides, "is not an object of path -> value");
    for (const auto& [field, value] : overrides.items()) {
      if (absl::Status s = SetFieldJson(doc, field, value); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("overrides.", field, ": ", s.message()));
      }
    }
  }
  return doc;
}

absl::Status SetFieldJson(ScenarioDocument& doc, std::string_view path, const nlohmann::json& value) {
  if (path == kRowsPath) {
    absl::StatusOr<double> rows = ReadNumber(value, path);
    if (!rows.ok()) return rows.status();
    const double total = TotalRows(*doc.model);
    if (!(*rows > 0) || !(total > 0)) return BadValue(path, value, "must be > 0 (the model's total table rows)");
    doc.model_rows_scale = *rows / total;
    return absl::OkStatus();
  }
  if (path.rfind("model", 0) == 0 && (path.size() == 5 || path[5] == '.' || path[5] == '[')) {
    return BadField(path, absl::StrCat("only ", absl::string_view(kRowsPath.data(), kRowsPath.size()),
                                       " of the model can be set; edit the model file for other changes"));
  }
  absl::StatusOr<nlohmann::json*> node = Walk(doc, path, /*create=*/true);
  if (!node.ok()) return node.status();
  **node = value;
  return absl::OkStatus();
}

absl::Status SetField(ScenarioDocument& doc, std::string_view path, std::string_view value) {
  nlohmann::json parsed = nlohmann::json::parse(value.begin(), value.end(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) parsed = std::string(value);
  return SetFieldJson(doc, path, parsed);
}

absl::StatusOr<double> GetNumber(const ScenarioDocument& doc, std::string_view path) {
  if (path == kRowsPath) return TotalRows(*doc.model) * doc.model_rows_scale;
  // Reading may need the calibration file in place: walk a copy.
  ScenarioDocument copy = doc;
  absl::StatusOr<std::vector<PathStep>> steps = SplitPath(path);
  if (!steps.ok()) return steps.status();
  absl::StatusOr<nlohmann::json*> node = Walk(copy, path, /*create=*/false);
  if (!node.ok()) {
    // The value may live in a referenced file (cluster.calibration): read it in place and retry.
    node = Walk(copy, path, /*create=*/true);
    if (!node.ok()) return node.status();
    if ((*node)->is_null()) return BadField(path, "does not exist");
  }
  return ReadNumber(**node, path);
}

absl::Status SetWorldSize(ScenarioDocument& doc, int world_size) {
  return SetFieldJson(doc, "cluster.world_size", world_size);
}

absl::Status ApplyAssumption(ScenarioDocument& doc, const Assumption& assumption, AssumptionCase which) {
  const bool low = which == AssumptionCase::kLow;
  const std::vector<std::string>& paths = assumption.paths.empty() ? std::vector<std::string>{assumption.path}
                                                                   : assumption.paths;
  for (const std::string& path : paths) {
    absl::StatusOr<double> current = GetNumber(doc, path);
    if (!current.ok()) return current.status();
    double target = paths.size() == 1 ? (low ? assumption.low : assumption.high)
                                      : *current * (low ? assumption.low_factor : assumption.high_factor);
    // Integer fields (zone_size, counts) stay integers.
    bool integer = false;
    if (path != kRowsPath) {
      absl::StatusOr<nlohmann::json*> node = Walk(doc, path, /*create=*/true);
      if (!node.ok()) return node.status();
      integer = (*node)->is_number_integer();
    }
    if (integer) {
      GEMTB_RETURN_IF_ERROR(SetFieldJson(doc, path, static_cast<int64_t>(std::llround(target))));
    } else {
      GEMTB_RETURN_IF_ERROR(SetFieldJson(doc, path, target));
    }
  }
  return absl::OkStatus();
}

}  // namespace gemtb::sim
