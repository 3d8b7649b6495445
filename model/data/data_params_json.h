// Parses model/configs/data/<name>.json into DataParams (host only). Unknown keys are errors, except
// keys starting with '_' (comments, e.g. "_comment"); every error names the JSON path and the value.
#pragma once

#include <cmath>
#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "model/data/data_params.h"
#include "nlohmann/json.hpp"

namespace gemtb::data {
namespace params_json_detail {

using Json = nlohmann::json;

inline absl::Status Bad(const std::string& path, const Json& value, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", value.dump(), ": ", what));
}

inline absl::Status CheckObject(const Json& j, const std::string& path, std::initializer_list<absl::string_view> keys) {
  if (!j.is_object()) return Bad(path, j, "expected an object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.key().empty() && it.key()[0] == '_') continue;
    bool known = false;
    for (absl::string_view k : keys) known = known || it.key() == k;
    if (!known) return Bad(absl::StrCat(path, ".", it.key()), it.value(), "unknown key");
  }
  return absl::OkStatus();
}

inline absl::Status GetDouble(const Json& j, const std::string& path, absl::string_view key, double lo, double hi,
                              double* out) {
  auto it = j.find(std::string(key));
  if (it == j.end()) return absl::OkStatus();  // keep the default
  const std::string p = absl::StrCat(path, ".", key);
  if (!it->is_number()) return Bad(p, *it, "expected a number");
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    return Bad(p, *it, absl::StrCat("expected a number in [", lo, ", ", hi, "]"));
  }
  *out = v;
  return absl::OkStatus();
}

inline absl::Status GetInt(const Json& j, const std::string& path, absl::string_view key, int64_t lo, int64_t hi,
                           int64_t* out) {
  auto it = j.find(std::string(key));
  if (it == j.end()) return absl::OkStatus();
  const std::string p = absl::StrCat(path, ".", key);
  if (!it->is_number_integer()) return Bad(p, *it, "expected an integer");
  if (it->is_number_unsigned() ? it->get<uint64_t>() > static_cast<uint64_t>(hi) : false) {
    return Bad(p, *it, absl::StrCat("expected an integer in [", lo, ", ", hi, "]"));
  }
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) return Bad(p, *it, absl::StrCat("expected an integer in [", lo, ", ", hi, "]"));
  *out = v;
  return absl::OkStatus();
}

inline absl::Status GetString(const Json& j, const std::string& path, absl::string_view key, std::string* out) {
  auto it = j.find(std::string(key));
  if (it == j.end()) return absl::OkStatus();
  if (!it->is_string()) return Bad(absl::StrCat(path, ".", key), *it, "expected a string");
  *out = it->get<std::string>();
  return absl::OkStatus();
}

inline absl::Status ParseIds(const Json& j, const std::string& path, IdParams* ids) {
  GEMTB_RETURN_IF_ERROR(GetDouble(j, path, "zipf_s", 0.0, 4.0, &ids->zipf_s));
  GEMTB_RETURN_IF_ERROR(GetDouble(j, path, "heavy_prob", 0.0, 1.0, &ids->heavy_prob));
  return GetInt(j, path, "heavy_count", 0, int64_t{1} << 30, &ids->heavy_count);
}

inline absl::Status ParseFeature(const Json& j, const std::string& path, FeatureParams* f) {
  GEMTB_RETURN_IF_ERROR(CheckObject(j, path, {"zipf_s", "heavy_prob", "heavy_count", "beta_scale"}));
  GEMTB_RETURN_IF_ERROR(ParseIds(j, path, &f->ids));
  return GetDouble(j, path, "beta_scale", 0.0, 100.0, &f->beta_scale);
}

}  // namespace params_json_detail

inline absl::StatusOr<DataParams> ParseDataParams(const nlohmann::json& j) {
  using namespace params_json_detail;
  DataParams p;
  GEMTB_RETURN_IF_ERROR(CheckObject(j, "$", {"version", "config", "lengths", "features", "roles", "sequences",
                                             "teacher", "dense_noise", "tasks"}));
  int64_t version = 1;
  GEMTB_RETURN_IF_ERROR(GetInt(j, "$", "version", 1, 1, &version));
  p.version = static_cast<int>(version);
  GEMTB_RETURN_IF_ERROR(GetString(j, "$", "config", &p.config));
  if (j.contains("lengths")) {
    const Json& l = j["lengths"];
    GEMTB_RETURN_IF_ERROR(CheckObject(l, "$.lengths", {"mu_offset", "sigma", "empty_prob"}));
    GEMTB_RETURN_IF_ERROR(GetDouble(l, "$.lengths", "mu_offset", -20.0, 20.0, &p.lengths.mu_offset));
    GEMTB_RETURN_IF_ERROR(GetDouble(l, "$.lengths", "sigma", 0.0, 10.0, &p.lengths.sigma));
    GEMTB_RETURN_IF_ERROR(GetDouble(l, "$.lengths", "empty_prob", 0.0, 1.0, &p.lengths.empty_prob));
  }
  if (j.contains("features")) {
    const Json& fs = j["features"];
    if (!fs.is_object()) return Bad("$.features", fs, "expected an object of feature name -> parameters");
    for (auto it = fs.begin(); it != fs.end(); ++it) {
      if (!it.key().empty() && it.key()[0] == '_') continue;
      const std::string path = absl::StrCat("$.features.", it.key());
      if (it.key() == "default") {
        GEMTB_RETURN_IF_ERROR(ParseFeature(it.value(), path, &p.default_feature));
      }
    }
    for (auto it = fs.begin(); it != fs.end(); ++it) {
      if (it.key().empty() || it.key()[0] == '_' || it.key() == "default") continue;
      FeatureParams f = p.default_feature;  // unlisted keys inherit the default
      f.name = it.key();
      GEMTB_RETURN_IF_ERROR(ParseFeature(it.value(), absl::StrCat("$.features.", it.key()), &f));
      p.features.push_back(f);
    }
  }
  if (j.contains("roles")) {
    const Json& r = j["roles"];
    GEMTB_RETURN_IF_ERROR(CheckObject(r, "$.roles", {"user", "ad", "surface"}));
    GEMTB_RETURN_IF_ERROR(GetString(r, "$.roles", "user", &p.user_feature));
    GEMTB_RETURN_IF_ERROR(GetString(r, "$.roles", "ad", &p.ad_feature));
    GEMTB_RETURN_IF_ERROR(GetString(r, "$.roles", "surface", &p.surface_feature));
  }
  if (j.contains("sequences")) {
    const Json& s = j["sequences"];
    const std::string path = "$.sequences";
    GEMTB_RETURN_IF_ERROR(CheckObject(s, path, {"items", "actions", "dt"}));
    if (s.contains("items")) {
      const Json& it = s["items"];
      GEMTB_RETURN_IF_ERROR(CheckObject(it, path + ".items", {"zipf_s", "heavy_prob", "heavy_count", "beta_scale"}));
      GEMTB_RETURN_IF_ERROR(ParseIds(it, path + ".items", &p.sequences.item_ids));
      GEMTB_RETURN_IF_ERROR(GetDouble(it, path + ".items", "beta_scale", 0.0, 100.0, &p.sequences.item_beta_scale));
    }
    if (s.contains("actions")) {
      const Json& a = s["actions"];
      GEMTB_RETURN_IF_ERROR(CheckObject(a, path + ".actions", {"zipf_s", "heavy_prob", "heavy_count"}));
      GEMTB_RETURN_IF_ERROR(ParseIds(a, path + ".actions", &p.sequences.action_ids));
    }
    if (s.contains("dt")) {
      const Json& d = s["dt"];
      GEMTB_RETURN_IF_ERROR(CheckObject(d, path + ".dt", {"mean_gap", "buckets_per_octave"}));
      GEMTB_RETURN_IF_ERROR(GetDouble(d, path + ".dt", "mean_gap", 1e-6, 1e9, &p.sequences.dt_mean_gap));
      GEMTB_RETURN_IF_ERROR(
          GetDouble(d, path + ".dt", "buckets_per_octave", 1e-6, 1e6, &p.sequences.dt_buckets_per_octave));
    }
  }
  if (j.contains("teacher")) {
    const Json& t = j["teacher"];
    const std::string path = "$.teacher";
    GEMTB_RETURN_IF_ERROR(CheckObject(t, path, {"seed", "user_ad_scale", "history_scale", "history_events",
                                                "action_scale", "action_events", "positive_actions"}));
    int64_t seed = 0;
    GEMTB_RETURN_IF_ERROR(GetInt(t, path, "seed", 0, INT64_MAX, &seed));
    p.teacher.seed = static_cast<uint64_t>(seed);
    GEMTB_RETURN_IF_ERROR(GetDouble(t, path, "user_ad_scale", 0.0, 100.0, &p.teacher.user_ad_scale));
    GEMTB_RETURN_IF_ERROR(GetDouble(t, path, "history_scale", 0.0, 100.0, &p.teacher.history_scale));
    GEMTB_RETURN_IF_ERROR(GetInt(t, path, "history_events", 0, 1 << 20, &p.teacher.history_events));
    GEMTB_RETURN_IF_ERROR(GetDouble(t, path, "action_scale", -100.0, 100.0, &p.teacher.action_scale));
    GEMTB_RETURN_IF_ERROR(GetInt(t, path, "action_events", 0, 1 << 20, &p.teacher.action_events));
    GEMTB_RETURN_IF_ERROR(GetInt(t, path, "positive_actions", 0, int64_t{1} << 40, &p.teacher.positive_actions));
  }
  GEMTB_RETURN_IF_ERROR(GetDouble(j, "$", "dense_noise", 0.0, 100.0, &p.dense_noise));
  if (j.contains("tasks")) {
    const Json& ts = j["tasks"];
    if (!ts.is_object()) return Bad("$.tasks", ts, "expected an object of task name -> parameters");
    for (auto it = ts.begin(); it != ts.end(); ++it) {
      if (!it.key().empty() && it.key()[0] == '_') continue;
      const std::string path = absl::StrCat("$.tasks.", it.key());
      TaskParams t;
      t.name = it.key();
      GEMTB_RETURN_IF_ERROR(CheckObject(it.value(), path, {"bias", "surface_offsets"}));
      GEMTB_RETURN_IF_ERROR(GetDouble(it.value(), path, "bias", -50.0, 50.0, &t.bias));
      if (it.value().contains("surface_offsets")) {
        const Json& o = it.value()["surface_offsets"];
        if (!o.is_array()) return Bad(path + ".surface_offsets", o, "expected an array of numbers");
        for (size_t k = 0; k < o.size(); ++k) {
          if (!o[k].is_number() || !std::isfinite(o[k].get<double>())) {
            return Bad(absl::StrCat(path, ".surface_offsets[", k, "]"), o[k], "expected a finite number");
          }
          t.surface_offsets.push_back(o[k].get<double>());
        }
      }
      p.tasks.push_back(t);
    }
  }
  return p;
}

inline absl::StatusOr<DataParams> ParseDataParamsText(absl::string_view text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false, /*ignore_comments=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("data params: not valid JSON");
  return ParseDataParams(j);
}

inline absl::StatusOr<DataParams> LoadDataParamsFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open the data parameters file"));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<DataParams> p = ParseDataParamsText(text.str());
  if (!p.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", p.status().message()));
  return p;
}

}  // namespace gemtb::data
