#include "reference/embedding/embedding_json.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "model/embedding/embedding_math.h"
#include "model/json/json_reader.h"
#include "model/json/user_file.h"
#include "reference/embedding/tbe.h"

namespace gemtb::reference {
namespace {

using gemtb::json::ObjectReader;
using nlohmann::json;

// A float field: any finite number, rounded to fp32 (RNE); absent keeps *out.
absl::Status ReadFloat(const ObjectReader& r, std::string_view key, float* out) {
  double v = *out;
  GEMTB_RETURN_IF_ERROR(r.Double(key, &v));
  *out = static_cast<float>(v);
  return absl::OkStatus();
}

absl::StatusOr<std::string> RequiredString(const ObjectReader& r, std::string_view key) {
  GEMTB_RETURN_IF_ERROR(r.Require(key));
  std::string text;
  GEMTB_RETURN_IF_ERROR(r.String(key, &text));
  return text;
}

absl::Status ParseOptimizer(const json& j, const std::string& path, OptimizerConfig* o) {
  absl::StatusOr<ObjectReader> r =
      ObjectReader::Open(j, path, {"kind", "lr", "weight_decay", "decay_mode", "eps", "beta1", "beta2"});
  if (!r.ok()) return r.status();
  GEMTB_RETURN_IF_ERROR(r->Named("kind", &o->kind, kOptimizerKindNames));
  GEMTB_RETURN_IF_ERROR(ReadFloat(*r, "lr", &o->lr));
  GEMTB_RETURN_IF_ERROR(ReadFloat(*r, "weight_decay", &o->weight_decay));
  GEMTB_RETURN_IF_ERROR(r->Named("decay_mode", &o->decay_mode, kWeightDecayModeNames));
  GEMTB_RETURN_IF_ERROR(ReadFloat(*r, "eps", &o->eps));
  GEMTB_RETURN_IF_ERROR(ReadFloat(*r, "beta1", &o->beta1));
  return ReadFloat(*r, "beta2", &o->beta2);
}

absl::Status ParseTable(const json& j, const std::string& path, int index, TableConfig* tc) {
  absl::StatusOr<ObjectReader> r = ObjectReader::Open(
      j, path, {"name", "rows", "dim", "dtype", "hashing", "hash_seed", "bounds", "stochastic_rounding", "optimizer"});
  if (!r.ok()) return r.status();
  absl::StatusOr<std::string> name = RequiredString(*r, "name");
  if (!name.ok()) return name.status();
  tc->name = *name;
  GEMTB_RETURN_IF_ERROR(r->Require("rows"));
  GEMTB_RETURN_IF_ERROR(r->Int64("rows", &tc->rows, INT64_MIN, INT64_MAX));
  GEMTB_RETURN_IF_ERROR(r->Require("dim"));
  GEMTB_RETURN_IF_ERROR(r->Int64("dim", &tc->dim, INT64_MIN, INT64_MAX));
  GEMTB_RETURN_IF_ERROR(r->Named("dtype", &tc->dtype, kTableDtypeNames));
  GEMTB_RETURN_IF_ERROR(r->Named("hashing", &tc->hashing, kHashingNames));
  GEMTB_RETURN_IF_ERROR(r->Named("bounds", &tc->bounds, kBoundsModeNames));
  tc->hash_seed = embedding::DefaultHashSeed(index);
  GEMTB_RETURN_IF_ERROR(r->Uint64("hash_seed", &tc->hash_seed));
  GEMTB_RETURN_IF_ERROR(r->Bool("stochastic_rounding", &tc->stochastic_rounding));
  if (const json* o = r->Get("optimizer")) {
    GEMTB_RETURN_IF_ERROR(ParseOptimizer(*o, gemtb::json::JoinPath(path, "optimizer"), &tc->optimizer));
  }
  return absl::OkStatus();
}

absl::Status ParseFeature(const json& j, const std::string& path, const std::vector<TableConfig>& tables,
                          FeatureConfig* fc) {
  absl::StatusOr<ObjectReader> r = ObjectReader::Open(j, path, {"key", "table", "pooling", "max_len"});
  if (!r.ok()) return r.status();
  absl::StatusOr<std::string> key = RequiredString(*r, "key");
  if (!key.ok()) return key.status();
  fc->key = *key;
  absl::StatusOr<std::string> table = RequiredString(*r, "table");
  if (!table.ok()) return table.status();
  fc->table = -1;
  for (size_t t = 0; t < tables.size(); ++t) {
    if (tables[t].name == *table) fc->table = static_cast<int>(t);
  }
  if (fc->table < 0) return gemtb::json::BadValue(gemtb::json::JoinPath(path, "table"), *r->Get("table"), "is not a table");
  GEMTB_RETURN_IF_ERROR(r->Named("pooling", &fc->pooling, kPoolingNames));
  return r->Int64("max_len", &fc->max_len, INT64_MIN, INT64_MAX);
}

}  // namespace

absl::StatusOr<EmbeddingSpec> ParseEmbeddingSpec(const json& j) {
  absl::StatusOr<ObjectReader> r = ObjectReader::Open(
      j, "spec", {"seed", "batch", "keys", "tables", "features", "plan", "world_size", "gpus_per_host"});
  if (!r.ok()) return r.status();
  EmbeddingSpec s;
  int64_t seed = 0;
  GEMTB_RETURN_IF_ERROR(r->Int64("seed", &seed, 0, INT64_MAX));
  s.config.seed = static_cast<uint64_t>(seed);
  GEMTB_RETURN_IF_ERROR(r->Require("batch"));
  GEMTB_RETURN_IF_ERROR(r->Int64("batch", &s.batch, 0, INT64_MAX));
  const json* tables = r->Get("tables");
  if (tables == nullptr || !tables->is_array()) {
    return gemtb::json::BadValue("spec.tables", tables == nullptr ? json() : *tables, "is not an array of tables");
  }
  for (size_t t = 0; t < tables->size(); ++t) {
    TableConfig tc;
    GEMTB_RETURN_IF_ERROR(ParseTable((*tables)[t], gemtb::json::IndexPath("spec.tables", t), static_cast<int>(t), &tc));
    s.config.tables.push_back(tc);
  }
  const json* features = r->Get("features");
  if (features == nullptr || !features->is_array()) {
    return gemtb::json::BadValue("spec.features", features == nullptr ? json() : *features, "is not an array of features");
  }
  for (size_t f = 0; f < features->size(); ++f) {
    FeatureConfig fc;
    GEMTB_RETURN_IF_ERROR(
        ParseFeature((*features)[f], gemtb::json::IndexPath("spec.features", f), s.config.tables, &fc));
    s.config.features.push_back(fc);
  }
  if (const json* keys = r->Get("keys")) {
    if (!keys->is_array()) return gemtb::json::BadValue("spec.keys", *keys, "is not an array of feature keys");
    for (size_t k = 0; k < keys->size(); ++k) {
      if (!(*keys)[k].is_string()) return gemtb::json::BadValue(gemtb::json::IndexPath("spec.keys", k), (*keys)[k], "is not a string");
      s.keys.push_back((*keys)[k].get<std::string>());
    }
  } else {
    for (const FeatureConfig& f : s.config.features) s.keys.push_back(f.key);
  }
  GEMTB_RETURN_IF_ERROR(r->Int("world_size", &s.world_size, 1, 4096));
  GEMTB_RETURN_IF_ERROR(r->Int("gpus_per_host", &s.gpus_per_host, 1, INT32_MAX));
  if (const json* plan = r->Get("plan")) s.plan = *plan;
  absl::Status valid = ValidateEmbeddingConfig(s.config);
  if (!valid.ok()) return absl::InvalidArgumentError(absl::StrCat("spec.", valid.message()));
  return s;
}

absl::StatusOr<EmbeddingSpec> ReadEmbeddingSpec(const std::string& path) {
  absl::StatusOr<std::string> text = ReadUserFile(path);
  if (!text.ok()) return text.status();
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  absl::StatusOr<EmbeddingSpec> s = ParseEmbeddingSpec(j);
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.status().message()));
  return s;
}

}  // namespace gemtb::reference
