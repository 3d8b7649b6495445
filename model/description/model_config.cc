// Parsing and validation of model/configs/<name>.json into ModelConfig.
#include "model/description/model_config.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "model/description/data_dir.h"
#include "model/json/json_reader.h"
#include "model/json/user_file.h"

namespace gemtb::model {
namespace {

using gemtb::json::BadField;
using gemtb::json::GetBool;
using gemtb::json::GetEnum;
using gemtb::json::GetInt;
using gemtb::json::GetInt32;
using gemtb::json::GetString;
using gemtb::json::IndexPath;
using gemtb::json::JoinPath;
using gemtb::json::CheckKeys;
using nlohmann::json;

// Caps that keep every derived size (n_z, head width, products) far inside int64 before the
// double-precision check of CheckSizesFit.
constexpr int64_t kMaxWidth = int64_t{1} << 16;  // d, table dims, heads
constexpr int64_t kMaxSize = int64_t{1} << 24;   // token counts, lengths, widths, layers
constexpr int64_t kMaxRows = int64_t{1} << 44;   // table rows
constexpr size_t kMaxSequences = size_t{1} << 12;

absl::Status GetDtype(const json& j, const std::string& path, ElementType* out) {
  return GetEnum(j, "dtype", path, kTableDtypeNames, out, false);
}

absl::Status GetPooling(const json& j, const std::string& path, Pooling* out) {
  return GetEnum(j, "pooling", path, kPoolingNames, out, false);
}

absl::Status GetHashing(const json& j, const std::string& path, Hashing* out) {
  return GetEnum(j, "hashing", path, kHashingNames, out, false);
}

absl::Status GetOptimizer(const json& j, const std::string& path, OptimizerKind* out) {
  return GetEnum(j, "optimizer", path, kOptimizerKindNames, out, false);
}

// The "count" of a compact group (1 when absent) and the expanded names.
absl::Status GetCount(const json& j, const std::string& path, int64_t* count) {
  *count = 1;
  GEMTB_RETURN_IF_ERROR(GetInt(j, "count", path, count, false, 1));
  if (*count > 1'000'000) return BadField(JoinPath(path, "count"), absl::StrCat(*count, " is too large"));
  return absl::OkStatus();
}

std::string GroupMember(const std::string& name, int64_t count, int64_t i) {
  return count == 1 ? name : absl::StrCat(name, "_", i);
}

struct TableGroup {
  int first = 0;
  int64_t count = 1;
};

absl::Status ParseTables(const json& root, ModelConfig* config,
                         std::map<std::string, TableGroup>* groups) {
  TableSpec defaults;
  defaults.dim = config->d;
  if (root.contains("table_defaults")) {
    const json& dj = root["table_defaults"];
    const std::string path = "table_defaults";
    GEMTB_RETURN_IF_ERROR(CheckKeys(dj, path, {"dim", "dtype", "pooling", "hashing", "optimizer"}));
    GEMTB_RETURN_IF_ERROR(GetInt(dj, "dim", path, &defaults.dim, false, 1, kMaxWidth));
    GEMTB_RETURN_IF_ERROR(GetDtype(dj, path, &defaults.dtype));
    GEMTB_RETURN_IF_ERROR(GetPooling(dj, path, &defaults.pooling));
    GEMTB_RETURN_IF_ERROR(GetHashing(dj, path, &defaults.hashing));
    GEMTB_RETURN_IF_ERROR(GetOptimizer(dj, path, &defaults.optimizer));
  }
  if (!root.contains("tables") || !root["tables"].is_array() || root["tables"].empty()) {
    return BadField("tables", "required non-empty array");
  }
  std::set<std::string> names;
  for (size_t t = 0; t < root["tables"].size(); ++t) {
    const json& tj = root["tables"][t];
    const std::string path = IndexPath("tables", t);
    GEMTB_RETURN_IF_ERROR(CheckKeys(tj, path, {"name", "count", "rows", "dim", "dtype", "pooling",
                                              "hashing", "optimizer"}));
    TableSpec spec = defaults;
    GEMTB_RETURN_IF_ERROR(GetString(tj, "name", path, &spec.name, true));
    if (spec.name.empty()) return BadField(JoinPath(path, "name"), "is empty");
    int64_t count = 1;
    GEMTB_RETURN_IF_ERROR(GetCount(tj, path, &count));
    GEMTB_RETURN_IF_ERROR(GetInt(tj, "rows", path, &spec.rows, true, 1, kMaxRows));
    GEMTB_RETURN_IF_ERROR(GetInt(tj, "dim", path, &spec.dim, false, 1, kMaxWidth));
    if (spec.dim != config->d) {
      return BadField(JoinPath(path, "dim"),
                 absl::StrCat(spec.dim, " != d ", config->d, " (every table feeds d-wide tokens)"));
    }
    GEMTB_RETURN_IF_ERROR(GetDtype(tj, path, &spec.dtype));
    GEMTB_RETURN_IF_ERROR(GetPooling(tj, path, &spec.pooling));
    GEMTB_RETURN_IF_ERROR(GetHashing(tj, path, &spec.hashing));
    GEMTB_RETURN_IF_ERROR(GetOptimizer(tj, path, &spec.optimizer));
    if (groups->count(spec.name) != 0) {
      return BadField(JoinPath(path, "name"), absl::StrCat("'", spec.name, "' is used twice"));
    }
    (*groups)[spec.name] = TableGroup{static_cast<int>(config->tables.size()), count};
    const std::string base = spec.name;
    for (int64_t i = 0; i < count; ++i) {
      spec.name = GroupMember(base, count, i);
      if (!names.insert(spec.name).second) {
        return BadField(JoinPath(path, "name"), absl::StrCat("'", spec.name, "' is used twice"));
      }
      config->tables.push_back(spec);
    }
  }
  return absl::OkStatus();
}

// A table reference by name: a single table (count 1) or one member of an expanded group.
absl::StatusOr<int> FindTable(const ModelConfig& config, const std::string& name,
                              const std::string& path) {
  for (size_t t = 0; t < config.tables.size(); ++t) {
    if (config.tables[t].name == name) return static_cast<int>(t);
  }
  return BadField(path, absl::StrCat("'", name, "' is not a table"));
}

absl::Status ParseFeatures(const json& root, const std::map<std::string, TableGroup>& groups,
                           ModelConfig* config) {
  if (!root.contains("features")) return absl::OkStatus();
  if (!root["features"].is_array()) return BadField("features", "must be an array");
  std::set<std::string> names;
  for (size_t f = 0; f < root["features"].size(); ++f) {
    const json& fj = root["features"][f];
    const std::string path = IndexPath("features", f);
    GEMTB_RETURN_IF_ERROR(CheckKeys(fj, path, {"name", "count", "table", "pooling", "max_len"}));
    std::string name, table;
    GEMTB_RETURN_IF_ERROR(GetString(fj, "name", path, &name, true));
    if (name.empty()) return BadField(JoinPath(path, "name"), "is empty");
    GEMTB_RETURN_IF_ERROR(GetString(fj, "table", path, &table, true));
    int64_t count = 1;
    GEMTB_RETURN_IF_ERROR(GetCount(fj, path, &count));
    auto group = groups.find(table);
    if (group == groups.end()) {
      return BadField(JoinPath(path, "table"), absl::StrCat("'", table, "' is not a table"));
    }
    // A group of features over a table group of the same size pairs them up; over a single table
    // they all share it.
    if (group->second.count != 1 && group->second.count != count) {
      return BadField(JoinPath(path, "count"),
                 absl::StrCat(count, " features over table group '", table, "' of ",
                              group->second.count, " tables (must be equal, or the table single)"));
    }
    SparseFeatureSpec spec;
    GEMTB_RETURN_IF_ERROR(GetInt(fj, "max_len", path, &spec.max_len, true, 1, kMaxSize));
    for (int64_t i = 0; i < count; ++i) {
      spec.name = GroupMember(name, count, i);
      spec.table_index = group->second.first + (group->second.count == 1 ? 0 : static_cast<int>(i));
      spec.table = config->tables[spec.table_index].name;
      spec.pooling = config->tables[spec.table_index].pooling;
      GEMTB_RETURN_IF_ERROR(GetPooling(fj, path, &spec.pooling));
      if (spec.pooling == Pooling::kNone) {
        return BadField(JoinPath(path, "pooling"),
                   "'none' is for sequences; a non-sequence feature pools its bag");
      }
      if (!names.insert(spec.name).second) {
        return BadField(JoinPath(path, "name"), absl::StrCat("'", spec.name, "' is used twice"));
      }
      config->features.push_back(spec);
    }
  }
  return absl::OkStatus();
}

absl::Status ParseSequences(const json& root, ModelConfig* config) {
  if (!root.contains("sequences")) return absl::OkStatus();
  if (!root["sequences"].is_array()) return BadField("sequences", "must be an array");
  std::set<std::string> names;
  for (size_t s = 0; s < root["sequences"].size(); ++s) {
    const json& sj = root["sequences"][s];
    const std::string path = IndexPath("sequences", s);
    GEMTB_RETURN_IF_ERROR(CheckKeys(sj, path, {"name", "count", "Lmax", "item_table", "action_table",
                                              "dt_table", "attention", "act", "rope"}));
    SequenceSpec spec;
    std::string name;
    GEMTB_RETURN_IF_ERROR(GetString(sj, "name", path, &name, true));
    if (name.empty()) return BadField(JoinPath(path, "name"), "is empty");
    int64_t count = 1;
    GEMTB_RETURN_IF_ERROR(GetCount(sj, path, &count));
    GEMTB_RETURN_IF_ERROR(GetInt(sj, "Lmax", path, &spec.lmax, true, 1, kMaxSize));
    GEMTB_RETURN_IF_ERROR(GetString(sj, "item_table", path, &spec.item_table, true));
    GEMTB_RETURN_IF_ERROR(GetString(sj, "action_table", path, &spec.action_table, true));
    GEMTB_RETURN_IF_ERROR(GetString(sj, "dt_table", path, &spec.dt_table, true));
    {
      auto item = FindTable(*config, spec.item_table, JoinPath(path, "item_table"));
      if (!item.ok()) return item.status();
      auto action = FindTable(*config, spec.action_table, JoinPath(path, "action_table"));
      if (!action.ok()) return action.status();
      auto dt = FindTable(*config, spec.dt_table, JoinPath(path, "dt_table"));
      if (!dt.ok()) return dt.status();
      spec.item_table_index = *item;
      spec.action_table_index = *action;
      spec.dt_table_index = *dt;
    }
    const std::string apath = JoinPath(path, "attention");
    if (!sj.contains("attention")) return BadField(apath, "required");
    const json& aj = sj["attention"];
    GEMTB_RETURN_IF_ERROR(CheckKeys(aj, apath, {"window", "block"}));
    if (aj.size() != 1) return BadField(apath, absl::StrCat(aj.dump(), " must hold exactly one of window|block"));
    if (aj.contains("window")) {
      spec.attention = SeqAttentionKind::kWindow;
      GEMTB_RETURN_IF_ERROR(GetInt(aj, "window", apath, &spec.window, true, 0, kMaxSize));
    } else {
      spec.attention = SeqAttentionKind::kBlock;
      GEMTB_RETURN_IF_ERROR(GetInt(aj, "block", apath, &spec.block, true, 1, kMaxSize));
    }
    GEMTB_RETURN_IF_ERROR(GetEnum(sj, "act", path, kSequenceActNames, &spec.act, false));
    GEMTB_RETURN_IF_ERROR(GetEnum(sj, "rope", path, kRopeKindNames, &spec.rope, false));
    for (int64_t i = 0; i < count; ++i) {
      spec.name = GroupMember(name, count, i);
      if (!names.insert(spec.name).second) {
        return BadField(JoinPath(path, "name"), absl::StrCat("'", spec.name, "' is used twice"));
      }
      if (config->sequences.size() >= kMaxSequences) {
        return BadField(JoinPath(path, "count"), absl::StrCat("more than ", kMaxSequences, " sequences"));
      }
      config->sequences.push_back(spec);
    }
  }
  return absl::OkStatus();
}

absl::Status ParseArch(const json& root, ModelConfig* config) {
  const std::string path = "arch";
  if (!root.contains("arch")) return BadField(path, "required");
  const json& aj = root["arch"];
  GEMTB_RETURN_IF_ERROR(CheckKeys(aj, path, {"n_x", "n_s", "k_p", "K_r", "wukong", "f", "L", "compskip"}));
  ArchSpec& a = config->arch;
  GEMTB_RETURN_IF_ERROR(GetInt(aj, "n_x", path, &a.n_x, true, 1, kMaxSize));
  GEMTB_RETURN_IF_ERROR(GetInt(aj, "n_s", path, &a.n_s, true, 1, kMaxSize));
  GEMTB_RETURN_IF_ERROR(GetInt(aj, "k_p", path, &a.k_p, true, 0, kMaxSize));
  GEMTB_RETURN_IF_ERROR(GetInt(aj, "K_r", path, &a.k_r, true, 0, kMaxSize));
  GEMTB_RETURN_IF_ERROR(GetInt(aj, "f", path, &a.f, true, 1, kMaxSize));
  GEMTB_RETURN_IF_ERROR(GetInt(aj, "L", path, &a.layers, true, 1, kMaxSize));
  GEMTB_RETURN_IF_ERROR(GetBool(aj, "compskip", path, &a.compskip, false));
  const std::string wpath = "arch.wukong";
  if (!aj.contains("wukong")) return BadField(wpath, "required");
  const json& wj = aj["wukong"];
  GEMTB_RETURN_IF_ERROR(CheckKeys(wj, wpath, {"k", "n_F", "n_L", "H", "experts"}));
  WukongSpec& w = a.wukong;
  GEMTB_RETURN_IF_ERROR(GetInt(wj, "k", wpath, &w.k, true, 1, kMaxSize));
  GEMTB_RETURN_IF_ERROR(GetInt(wj, "n_F", wpath, &w.n_f, true, 0, kMaxSize));
  GEMTB_RETURN_IF_ERROR(GetInt(wj, "n_L", wpath, &w.n_l, true, 0, kMaxSize));
  GEMTB_RETURN_IF_ERROR(GetInt(wj, "H", wpath, &w.hidden, true, 1, kMaxSize));
  if (w.n_f + w.n_l != a.n_x) {
    return BadField(JoinPath(wpath, "n_F"), absl::StrCat(w.n_f, " + n_L ", w.n_l, " != n_x ", a.n_x));
  }
  if (wj.contains("experts")) {
    const std::string epath = "arch.wukong.experts";
    GEMTB_RETURN_IF_ERROR(CheckKeys(wj["experts"], epath, {"count", "shard_group"}));
    GEMTB_RETURN_IF_ERROR(GetInt(wj["experts"], "count", epath, &w.experts.count, true, 1, kMaxSize));
    GEMTB_RETURN_IF_ERROR(GetInt(wj["experts"], "shard_group", epath, &w.experts.shard_group, false, 1, kMaxSize));
    if (w.hidden % w.experts.count != 0) {
      return BadField(JoinPath(epath, "count"),
                 absl::StrCat(w.experts.count, " does not divide H ", w.hidden));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseTasks(const json& root, ModelConfig* config) {
  GEMTB_RETURN_IF_ERROR(GetInt32(root, "surfaces", "", &config->surfaces, true, 1));
  if (!root.contains("tasks") || !root["tasks"].is_array() || root["tasks"].empty()) {
    return BadField("tasks", "required non-empty array");
  }
  std::set<std::string> names;
  for (size_t t = 0; t < root["tasks"].size(); ++t) {
    const json& tj = root["tasks"][t];
    const std::string path = IndexPath("tasks", t);
    GEMTB_RETURN_IF_ERROR(CheckKeys(tj, path, {"name", "objective", "surfaces"}));
    TaskSpec task;
    GEMTB_RETURN_IF_ERROR(GetString(tj, "name", path, &task.name, true));
    if (task.name.empty()) return BadField(JoinPath(path, "name"), "is empty");
    if (!names.insert(task.name).second) {
      return BadField(JoinPath(path, "name"), absl::StrCat("'", task.name, "' is used twice"));
    }
    GEMTB_RETURN_IF_ERROR(GetEnum(tj, "objective", path, kTaskObjectiveNames, &task.objective, true));
    const std::string spath = JoinPath(path, "surfaces");
    if (!tj.contains("surfaces") || !tj["surfaces"].is_array() || tj["surfaces"].empty()) {
      return BadField(spath, "required non-empty array");
    }
    std::set<int> seen;
    for (size_t i = 0; i < tj["surfaces"].size(); ++i) {
      const json& v = tj["surfaces"][i];
      const std::string vpath = IndexPath(spath, i);
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= config->surfaces) {
        return BadField(vpath, absl::StrCat(v.dump(), " is not a surface in [0, ", config->surfaces, ")"));
      }
      const int s = static_cast<int>(v.get<int64_t>());
      if (!seen.insert(s).second) return BadField(vpath, absl::StrCat(s, " is listed twice"));
      task.surfaces.push_back(s);
    }
    config->tasks.push_back(task);
  }
  return absl::OkStatus();
}

absl::Status ParseHead(const json& root, ModelConfig* config) {
  const std::string path = "head";
  if (!root.contains("head")) return BadField(path, "required");
  GEMTB_RETURN_IF_ERROR(CheckKeys(root["head"], path, {"widths"}));
  const std::string wpath = "head.widths";
  const json& wj = root["head"].contains("widths") ? root["head"]["widths"] : json();
  if (!wj.is_array() || wj.size() < 2) return BadField(wpath, "required array of at least 2 widths");
  for (size_t i = 0; i < wj.size(); ++i) {
    if (!wj[i].is_number_integer() || wj[i].get<int64_t>() < 1) {
      return BadField(IndexPath(wpath, i), absl::StrCat(wj[i].dump(), " is not a positive integer"));
    }
    config->head.widths.push_back(wj[i].get<int64_t>());
  }
  if (config->head.widths.front() != config->HeadInputWidth()) {
    return BadField(IndexPath(wpath, 0),
               absl::StrCat(config->head.widths.front(), " != n_s*d + J*(n_s+k_p+K_r)*d = ",
                            config->HeadInputWidth()));
  }
  if (config->head.widths.back() != config->NumTasks()) {
    return BadField(IndexPath(wpath, wj.size() - 1),
               absl::StrCat(config->head.widths.back(), " != the number of tasks ", config->NumTasks()));
  }
  return absl::OkStatus();
}

// Every count the expansion forms (params, per-sample FLOPs, sparse rows * dim) must stay exact in
// int64 and double: bound the largest products by 2^52 in floating point before anything multiplies
// in integers.
absl::Status CheckSizesFit(const ModelConfig& c) {
  constexpr double kLimit = 4503599627370496.0;  // 2^52
  const double d = static_cast<double>(c.d);
  const double n_z = static_cast<double>(c.InteractionTokens());
  const double k = static_cast<double>(c.arch.wukong.k);
  const double h = static_cast<double>(c.arch.wukong.hidden);
  const double fd = static_cast<double>(c.arch.f) * d;
  double sparse = 0;
  for (const TableSpec& t : c.tables) sparse += static_cast<double>(t.rows) * static_cast<double>(t.dim);
  double head = 0;
  for (size_t i = 0; i + 1 < c.head.widths.size(); ++i) {
    head += static_cast<double>(c.head.widths[i]) * static_cast<double>(c.head.widths[i + 1]);
  }
  double lmax = 0;
  for (const SequenceSpec& s : c.sequences) lmax = std::max(lmax, static_cast<double>(s.lmax));
  const std::pair<const char*, double> sizes[] = {
      {"tables: sum of rows * dim", sparse},
      {"arch.wukong: n_z * k * H", n_z * k * h},
      {"arch.wukong: H * n_F * d", h * static_cast<double>(c.arch.wukong.n_f) * d},
      {"arch.wukong: n_z * k * d", n_z * k * d},
      {"arch: L * J * f * d * d", static_cast<double>(c.arch.layers) *
                                       static_cast<double>(c.sequences.size() + 1) * fd * d},
      {"sequences: Lmax^2 * d", lmax * lmax * d},
      {"features: F * n_x * d", static_cast<double>(c.features.size() + c.dense.n_d) *
                                    static_cast<double>(c.arch.n_x) * d},
      {"dense: m * n_d * d", static_cast<double>(c.dense.m) * static_cast<double>(c.dense.n_d) * d},
      {"head.widths: sum of products", head}};
  for (const auto& [what, value] : sizes) {
    if (!(value < kLimit)) {
      return BadField(what, absl::StrCat(value, " exceeds 2^52: the model is too large to count exactly"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfig(const json& root) {
  GEMTB_RETURN_IF_ERROR(CheckKeys(root, "", {"version", "name", "d", "heads", "table_defaults", "tables",
                                            "features", "dense", "sequences", "arch", "head",
                                            "surfaces", "tasks"}));
  ModelConfig config;
  GEMTB_RETURN_IF_ERROR(GetInt32(root, "version", "", &config.version, true));
  if (config.version != 1) return BadField("version", absl::StrCat(config.version, " is not supported (1)"));
  GEMTB_RETURN_IF_ERROR(GetString(root, "name", "", &config.name, true));
  if (config.name.empty()) return BadField("name", "is empty");
  GEMTB_RETURN_IF_ERROR(GetInt(root, "d", "", &config.d, true, 4, kMaxWidth));
  if (config.d % 4 != 0) return BadField("d", absl::StrCat(config.d, " is not a multiple of 4"));
  GEMTB_RETURN_IF_ERROR(GetInt(root, "heads", "", &config.heads, true, 1, kMaxWidth));
  if (config.d % (2 * config.heads) != 0) {
    return BadField("heads", absl::StrCat(config.heads, " does not split d ", config.d,
                                     " into even head dims (RoPE rotates pairs)"));
  }
  std::map<std::string, TableGroup> groups;
  GEMTB_RETURN_IF_ERROR(ParseTables(root, &config, &groups));
  GEMTB_RETURN_IF_ERROR(ParseFeatures(root, groups, &config));
  if (!root.contains("dense")) return BadField("dense", "required");
  GEMTB_RETURN_IF_ERROR(CheckKeys(root["dense"], "dense", {"m", "n_d"}));
  GEMTB_RETURN_IF_ERROR(GetInt(root["dense"], "m", "dense", &config.dense.m, true, 0, kMaxSize));
  GEMTB_RETURN_IF_ERROR(GetInt(root["dense"], "n_d", "dense", &config.dense.n_d, true, 0, kMaxSize));
  if ((config.dense.m == 0) != (config.dense.n_d == 0)) {
    return BadField("dense.n_d", absl::StrCat(config.dense.n_d, " with m ", config.dense.m,
                                         " (both zero or both positive)"));
  }
  if (config.features.empty() && config.dense.n_d == 0) {
    return BadField("features", "no sparse features and no dense tokens: LCE_in has no input");
  }
  GEMTB_RETURN_IF_ERROR(ParseSequences(root, &config));
  GEMTB_RETURN_IF_ERROR(ParseArch(root, &config));
  GEMTB_RETURN_IF_ERROR(ParseTasks(root, &config));
  GEMTB_RETURN_IF_ERROR(ParseHead(root, &config));
  GEMTB_RETURN_IF_ERROR(CheckSizesFit(config));
  return config;
}

absl::StatusOr<ModelConfig> ParseModelConfigText(std::string_view text) {
  json root = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return absl::InvalidArgumentError("config: not valid JSON");
  return ParseModelConfig(root);
}

std::string BuiltinConfigPath(std::string_view name) {
  if (name == "tiny" || name == "small" || name == "gem-scale") {
    return absl::StrCat(DataDir(), "/model/configs/", absl::string_view(name.data(), name.size()),
                        ".json");
  }
  return "";
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& name_or_path) {
  const std::string builtin = BuiltinConfigPath(name_or_path);
  const std::string path = builtin.empty() ? name_or_path : builtin;
  absl::StatusOr<std::string> text = ReadUserFile(path);
  if (!text.ok() && !builtin.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("config: built-in '", name_or_path, "' cannot be read at ", path,
                                                   " (the data folder: gemtb --version; ", text.status().message(), ")"));
  }
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("config: '", name_or_path,
                                                   "' is neither tiny|small|gem-scale nor a readable file (",
                                                   text.status().message(), ")"));
  }
  auto config = ParseModelConfigText(*text);
  if (!config.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

int64_t SparseParamCount(const ModelConfig& config) {
  int64_t total = 0;
  for (const TableSpec& t : config.tables) total += t.rows * t.dim;
  return total;
}

}  // namespace gemtb::model
