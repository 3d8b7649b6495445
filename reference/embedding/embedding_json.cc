#include "reference/embedding/embedding_json.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "model/embedding/embedding_math.h"
#include "reference/embedding/tbe.h"

namespace gemtb::reference {
namespace {

using nlohmann::json;

absl::Status Bad(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

absl::Status OnlyKeys(const json& j, const std::string& path, std::initializer_list<const char*> allowed) {
  if (!j.is_object()) return Bad(path, "must be an object");
  for (const auto& item : j.items()) {
    bool ok = false;
    for (const char* a : allowed) ok = ok || item.key() == a;
    if (!ok) return Bad(absl::StrCat(path, ".", item.key()), "unknown key");
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status GetInt(const json& j, const char* key, const std::string& path, T* out, bool required) {
  if (!j.contains(key)) return required ? Bad(absl::StrCat(path, ".", key), "required") : absl::OkStatus();
  if (!j[key].is_number_integer()) return Bad(absl::StrCat(path, ".", key), absl::StrCat(j[key].dump(), " is not an integer"));
  // get<T>() wraps a value outside a narrower T (4294967297 would become the int 1). Out-of-range
  // int64 values wrap to negatives, which every int64 field rejects (hash_seed takes all 64 bits).
  if constexpr (sizeof(T) < sizeof(int64_t)) {
    const bool fits = j[key].is_number_unsigned()
                          ? j[key].get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                          : j[key].get<int64_t>() >= std::numeric_limits<T>::min() &&
                                j[key].get<int64_t>() <= std::numeric_limits<T>::max();
    if (!fits) return Bad(absl::StrCat(path, ".", key), absl::StrCat(j[key].dump(), " is out of range"));
  }
  *out = j[key].get<T>();
  return absl::OkStatus();
}

absl::Status GetFloat(const json& j, const char* key, const std::string& path, float* out) {
  if (!j.contains(key)) return absl::OkStatus();
  if (!j[key].is_number()) return Bad(absl::StrCat(path, ".", key), absl::StrCat(j[key].dump(), " is not a number"));
  const double v = j[key].get<double>();
  if (!std::isfinite(v)) return Bad(absl::StrCat(path, ".", key), "must be finite");
  *out = static_cast<float>(v);  // RNE to fp32
  return absl::OkStatus();
}

template <typename E>
absl::Status GetEnum(const json& j, const char* key, const std::string& path,
                     std::initializer_list<std::pair<const char*, E>> names, E* out) {
  if (!j.contains(key)) return absl::OkStatus();
  const std::string p = absl::StrCat(path, ".", key);
  if (!j[key].is_string()) return Bad(p, absl::StrCat(j[key].dump(), " is not a string"));
  const std::string v = j[key].get<std::string>();
  std::string all;
  for (const auto& [name, e] : names) {
    if (v == name) {
      *out = e;
      return absl::OkStatus();
    }
    absl::StrAppend(&all, all.empty() ? "" : "|", name);
  }
  return Bad(p, absl::StrCat("'", v, "' is not one of ", all));
}

}  // namespace

const char* ElementTypeShortName(ElementType t) {
  switch (t) {
    case ElementType::kFloat32: return "fp32";
    case ElementType::kFloat16: return "fp16";
    case ElementType::kBFloat16: return "bf16";
    case ElementType::kFloat64: return "fp64";
  }
  return "?";
}

absl::StatusOr<EmbeddingSpec> ParseEmbeddingSpec(const json& j) {
  GEMTB_RETURN_IF_ERROR(OnlyKeys(j, "spec", {"seed", "batch", "keys", "tables", "features", "plan", "world_size",
                                             "gpus_per_host"}));
  EmbeddingSpec s;
  int64_t seed = 0;
  GEMTB_RETURN_IF_ERROR(GetInt(j, "seed", "spec", &seed, false));
  if (seed < 0) return Bad("spec.seed", absl::StrCat(seed, " is negative"));
  s.config.seed = static_cast<uint64_t>(seed);
  GEMTB_RETURN_IF_ERROR(GetInt(j, "batch", "spec", &s.batch, true));
  if (s.batch < 0) return Bad("spec.batch", absl::StrCat(s.batch, " is negative"));
  if (!j.contains("tables") || !j["tables"].is_array()) return Bad("spec.tables", "required array");
  for (size_t t = 0; t < j["tables"].size(); ++t) {
    const json& tj = j["tables"][t];
    const std::string path = absl::StrCat("spec.tables[", t, "]");
    GEMTB_RETURN_IF_ERROR(OnlyKeys(tj, path, {"name", "rows", "dim", "dtype", "hashing", "hash_seed", "bounds",
                                              "stochastic_rounding", "optimizer"}));
    TableConfig tc;
    if (!tj.contains("name") || !tj["name"].is_string()) return Bad(path + ".name", "required string");
    tc.name = tj["name"].get<std::string>();
    GEMTB_RETURN_IF_ERROR(GetInt(tj, "rows", path, &tc.rows, true));
    GEMTB_RETURN_IF_ERROR(GetInt(tj, "dim", path, &tc.dim, true));
    GEMTB_RETURN_IF_ERROR(GetEnum<ElementType>(tj, "dtype", path, {{"fp32", ElementType::kFloat32},
                                                                 {"fp16", ElementType::kFloat16},
                                                                 {"bf16", ElementType::kBFloat16}}, &tc.dtype));
    GEMTB_RETURN_IF_ERROR(GetEnum<Hashing>(tj, "hashing", path, {{"identity", Hashing::kIdentity},
                                                                {"mod", Hashing::kMod},
                                                                {"splitmix64", Hashing::kSplitMix64}}, &tc.hashing));
    GEMTB_RETURN_IF_ERROR(GetEnum<BoundsMode>(tj, "bounds", path, {{"error", BoundsMode::kError},
                                                                   {"zero", BoundsMode::kZero},
                                                                   {"remap0", BoundsMode::kRemap0}}, &tc.bounds));
    tc.hash_seed = embedding::DefaultHashSeed(static_cast<int>(t));
    if (tj.contains("hash_seed")) {
      int64_t hs = 0;
      GEMTB_RETURN_IF_ERROR(GetInt(tj, "hash_seed", path, &hs, true));
      tc.hash_seed = static_cast<uint64_t>(hs);
    }
    if (tj.contains("stochastic_rounding")) {
      if (!tj["stochastic_rounding"].is_boolean()) return Bad(path + ".stochastic_rounding", "must be true/false");
      tc.stochastic_rounding = tj["stochastic_rounding"].get<bool>();
    }
    if (tj.contains("optimizer")) {
      const json& oj = tj["optimizer"];
      const std::string op = path + ".optimizer";
      GEMTB_RETURN_IF_ERROR(OnlyKeys(oj, op, {"kind", "lr", "weight_decay", "decay_mode", "eps", "beta1", "beta2"}));
      OptimizerConfig& o = tc.optimizer;
      GEMTB_RETURN_IF_ERROR(GetEnum<OptimizerKind>(oj, "kind", op, {{"sgd", OptimizerKind::kSgd},
                                                                   {"rowwise_adagrad", OptimizerKind::kRowwiseAdagrad},
                                                                   {"adam", OptimizerKind::kAdam}}, &o.kind));
      GEMTB_RETURN_IF_ERROR(GetFloat(oj, "lr", op, &o.lr));
      GEMTB_RETURN_IF_ERROR(GetFloat(oj, "weight_decay", op, &o.weight_decay));
      GEMTB_RETURN_IF_ERROR(GetEnum<WeightDecayMode>(oj, "decay_mode", op, {{"none", WeightDecayMode::kNone},
                                                                            {"l2", WeightDecayMode::kL2},
                                                                            {"decoupled", WeightDecayMode::kDecoupled}},
                                                     &o.decay_mode));
      GEMTB_RETURN_IF_ERROR(GetFloat(oj, "eps", op, &o.eps));
      GEMTB_RETURN_IF_ERROR(GetFloat(oj, "beta1", op, &o.beta1));
      GEMTB_RETURN_IF_ERROR(GetFloat(oj, "beta2", op, &o.beta2));
    }
    s.config.tables.push_back(tc);
  }
  if (!j.contains("features") || !j["features"].is_array()) return Bad("spec.features", "required array");
  for (size_t f = 0; f < j["features"].size(); ++f) {
    const json& fj = j["features"][f];
    const std::string path = absl::StrCat("spec.features[", f, "]");
    GEMTB_RETURN_IF_ERROR(OnlyKeys(fj, path, {"key", "table", "pooling", "max_len"}));
    FeatureConfig fc;
    if (!fj.contains("key") || !fj["key"].is_string()) return Bad(path + ".key", "required string");
    fc.key = fj["key"].get<std::string>();
    if (!fj.contains("table") || !fj["table"].is_string()) return Bad(path + ".table", "required table name");
    const std::string table = fj["table"].get<std::string>();
    fc.table = -1;
    for (size_t t = 0; t < s.config.tables.size(); ++t) {
      if (s.config.tables[t].name == table) fc.table = static_cast<int>(t);
    }
    if (fc.table < 0) return Bad(path + ".table", absl::StrCat("'", table, "' is not a table"));
    GEMTB_RETURN_IF_ERROR(GetEnum<Pooling>(fj, "pooling", path, {{"sum", Pooling::kSum},
                                                                 {"mean", Pooling::kMean},
                                                                 {"weighted_sum", Pooling::kWeightedSum},
                                                                 {"none", Pooling::kNone}}, &fc.pooling));
    GEMTB_RETURN_IF_ERROR(GetInt(fj, "max_len", path, &fc.max_len, false));
    s.config.features.push_back(fc);
  }
  if (j.contains("keys")) {
    if (!j["keys"].is_array()) return Bad("spec.keys", "must be an array of feature keys");
    for (const json& k : j["keys"]) {
      if (!k.is_string()) return Bad("spec.keys", absl::StrCat(k.dump(), " is not a string"));
      s.keys.push_back(k.get<std::string>());
    }
  } else {
    for (const FeatureConfig& f : s.config.features) s.keys.push_back(f.key);
  }
  GEMTB_RETURN_IF_ERROR(GetInt(j, "world_size", "spec", &s.world_size, false));
  GEMTB_RETURN_IF_ERROR(GetInt(j, "gpus_per_host", "spec", &s.gpus_per_host, false));
  if (s.world_size < 1 || s.world_size > 4096) return Bad("spec.world_size", absl::StrCat(s.world_size, " is not in 1..4096"));
  if (s.gpus_per_host < 1) return Bad("spec.gpus_per_host", absl::StrCat(s.gpus_per_host, " must be >= 1"));
  if (j.contains("plan")) s.plan = j["plan"];
  absl::Status valid = ValidateEmbeddingConfig(s.config);
  if (!valid.ok()) return absl::InvalidArgumentError(absl::StrCat("spec.", valid.message()));
  return s;
}

absl::StatusOr<EmbeddingSpec> ReadEmbeddingSpec(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  absl::StatusOr<EmbeddingSpec> s = ParseEmbeddingSpec(j);
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.status().message()));
  return s;
}

}  // namespace gemtb::reference
