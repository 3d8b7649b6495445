// The bridge from the model description to the data generator: DataShape from a ModelConfig, and
// the committed data parameters of a built-in config (model/configs/data/<name>.json, next to the
// model config). Needs gemtb::model_desc (the config loader).
#pragma once

#include <filesystem>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "model/data/data_params_json.h"
#include "model/data/data_shape.h"
#include "model/data/generator.h"
#include "model/description/model_config.h"

namespace gemtb::data {

inline DataShape ShapeFromConfig(const model::ModelConfig& config) {
  DataShape shape;
  for (const model::TableSpec& t : config.tables) shape.table_names.push_back(t.name);
  for (const model::SparseFeatureSpec& f : config.features) {
    FeatureShape fs;
    fs.name = f.name;
    fs.table = f.table_index;
    fs.rows = config.tables[static_cast<size_t>(f.table_index)].rows;
    fs.max_len = f.max_len;
    shape.features.push_back(fs);
  }
  shape.dense = config.dense.m;
  for (const model::SequenceSpec& s : config.sequences) {
    SequenceShape ss;
    ss.name = s.name;
    ss.lmax = s.lmax;
    ss.item_table = s.item_table_index;
    ss.action_table = s.action_table_index;
    ss.dt_table = s.dt_table_index;
    ss.item_rows = config.tables[static_cast<size_t>(s.item_table_index)].rows;
    ss.action_rows = config.tables[static_cast<size_t>(s.action_table_index)].rows;
    ss.dt_rows = config.tables[static_cast<size_t>(s.dt_table_index)].rows;
    shape.sequences.push_back(ss);
  }
  for (const model::TaskSpec& t : config.tasks) {
    TaskShape ts;
    ts.name = t.name;
    ts.objective = t.objective == model::TaskObjective::kConversion ? Objective::kConversion : Objective::kCtr;
    ts.surfaces = t.surfaces;
    shape.tasks.push_back(ts);
  }
  shape.surfaces = config.surfaces;
  return shape;
}

// "tiny" | "small" | "gem-scale" -> model/configs/data/<name>.json of the source tree; anything else
// is taken as a path to a data parameters JSON.
inline absl::StatusOr<DataParams> LoadDataParams(const std::string& name_or_path) {
  const std::string builtin = model::BuiltinConfigPath(name_or_path);
  if (!builtin.empty()) {
    const std::filesystem::path path = std::filesystem::path(builtin).parent_path() / "data" / (name_or_path + ".json");
    return LoadDataParamsFile(path.string());
  }
  return LoadDataParamsFile(name_or_path);
}

// The generator of a built-in config: its model config, its committed data parameters.
inline absl::StatusOr<Generator> MakeGenerator(const std::string& config_name) {
  absl::StatusOr<model::ModelConfig> config = model::LoadModelConfig(config_name);
  if (!config.ok()) return config.status();
  absl::StatusOr<DataParams> params = LoadDataParams(config_name);
  if (!params.ok()) return params.status();
  return Generator::Create(*params, ShapeFromConfig(*config));
}

}  // namespace gemtb::data
