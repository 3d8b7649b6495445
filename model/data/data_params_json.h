// Parses model/configs/data/<name>.json into DataParams (host only) with the strict JSON reader
// (model/json): unknown keys are errors, except keys starting with '_' (comments, e.g. "_comment");
// every error reads "<path>: <value> <rule>". Needs gemtb::model_json.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "model/common/status_macros.h"
#include "model/data/data_params.h"
#include "model/json/json_reader.h"
#include "model/json/user_file.h"
#include "nlohmann/json.hpp"

namespace gemtb::data {
namespace params_json_detail {

using Json = nlohmann::json;
using json::ObjectReader;

inline absl::Status ParseIds(const ObjectReader& r, IdParams* ids) {
  GEMTB_RETURN_IF_ERROR(r.Range("zipf_s", &ids->zipf_s, 0.0, 4.0));
  GEMTB_RETURN_IF_ERROR(r.Range("heavy_prob", &ids->heavy_prob, 0.0, 1.0));
  return r.Int64("heavy_count", &ids->heavy_count, 0, int64_t{1} << 30);
}

inline absl::Status ParseFeature(const Json& j, const std::string& path, FeatureParams* f) {
  absl::StatusOr<ObjectReader> r =
      ObjectReader::OpenAllowingComments(j, path, {"zipf_s", "heavy_prob", "heavy_count", "beta_scale"});
  if (!r.ok()) return r.status();
  GEMTB_RETURN_IF_ERROR(ParseIds(*r, &f->ids));
  return r->Range("beta_scale", &f->beta_scale, 0.0, 100.0);
}

}  // namespace params_json_detail

inline absl::StatusOr<DataParams> ParseDataParams(const nlohmann::json& j) {
  using namespace params_json_detail;
  DataParams p;
  absl::StatusOr<ObjectReader> root = ObjectReader::OpenAllowingComments(
      j, "$", {"version", "config", "lengths", "features", "roles", "sequences", "teacher", "dense_noise", "tasks"});
  if (!root.ok()) return root.status();
  GEMTB_RETURN_IF_ERROR(root->Int("version", &p.version, 1, 1));
  GEMTB_RETURN_IF_ERROR(root->String("config", &p.config));
  if (const Json* l = root->Get("lengths")) {
    absl::StatusOr<ObjectReader> r =
        ObjectReader::OpenAllowingComments(*l, "$.lengths", {"mu_offset", "sigma", "empty_prob"});
    if (!r.ok()) return r.status();
    GEMTB_RETURN_IF_ERROR(r->Range("mu_offset", &p.lengths.mu_offset, -20.0, 20.0));
    GEMTB_RETURN_IF_ERROR(r->Range("sigma", &p.lengths.sigma, 0.0, 10.0));
    GEMTB_RETURN_IF_ERROR(r->Range("empty_prob", &p.lengths.empty_prob, 0.0, 1.0));
  }
  if (const Json* fs = root->Get("features")) {
    if (!fs->is_object()) return json::BadValue("$.features", *fs, "is not an object of feature name -> parameters");
    for (auto it = fs->begin(); it != fs->end(); ++it) {
      if (it.key() == "default") {
        GEMTB_RETURN_IF_ERROR(ParseFeature(it.value(), "$.features.default", &p.default_feature));
      }
    }
    for (auto it = fs->begin(); it != fs->end(); ++it) {
      if (it.key().empty() || it.key()[0] == '_' || it.key() == "default") continue;
      FeatureParams f = p.default_feature;  // unlisted keys inherit the default
      f.name = it.key();
      GEMTB_RETURN_IF_ERROR(ParseFeature(it.value(), json::JoinPath("$.features", it.key()), &f));
      p.features.push_back(f);
    }
  }
  if (const Json* roles = root->Get("roles")) {
    absl::StatusOr<ObjectReader> r = ObjectReader::OpenAllowingComments(*roles, "$.roles", {"user", "ad", "surface"});
    if (!r.ok()) return r.status();
    GEMTB_RETURN_IF_ERROR(r->String("user", &p.user_feature));
    GEMTB_RETURN_IF_ERROR(r->String("ad", &p.ad_feature));
    GEMTB_RETURN_IF_ERROR(r->String("surface", &p.surface_feature));
  }
  if (const Json* seqs = root->Get("sequences")) {
    absl::StatusOr<ObjectReader> s =
        ObjectReader::OpenAllowingComments(*seqs, "$.sequences", {"items", "actions", "dt"});
    if (!s.ok()) return s.status();
    if (const Json* items = s->Get("items")) {
      absl::StatusOr<ObjectReader> r = ObjectReader::OpenAllowingComments(
          *items, "$.sequences.items", {"zipf_s", "heavy_prob", "heavy_count", "beta_scale"});
      if (!r.ok()) return r.status();
      GEMTB_RETURN_IF_ERROR(ParseIds(*r, &p.sequences.item_ids));
      GEMTB_RETURN_IF_ERROR(r->Range("beta_scale", &p.sequences.item_beta_scale, 0.0, 100.0));
    }
    if (const Json* actions = s->Get("actions")) {
      absl::StatusOr<ObjectReader> r = ObjectReader::OpenAllowingComments(
          *actions, "$.sequences.actions", {"zipf_s", "heavy_prob", "heavy_count"});
      if (!r.ok()) return r.status();
      GEMTB_RETURN_IF_ERROR(ParseIds(*r, &p.sequences.action_ids));
    }
    if (const Json* dt = s->Get("dt")) {
      absl::StatusOr<ObjectReader> r =
          ObjectReader::OpenAllowingComments(*dt, "$.sequences.dt", {"mean_gap", "buckets_per_octave"});
      if (!r.ok()) return r.status();
      GEMTB_RETURN_IF_ERROR(r->Range("mean_gap", &p.sequences.dt_mean_gap, 1e-6, 1e9));
      GEMTB_RETURN_IF_ERROR(r->Range("buckets_per_octave", &p.sequences.dt_buckets_per_octave, 1e-6, 1e6));
    }
  }
  if (const Json* teacher = root->Get("teacher")) {
    absl::StatusOr<ObjectReader> r = ObjectReader::OpenAllowingComments(
        *teacher, "$.teacher",
        {"seed", "user_ad_scale", "history_scale", "history_events", "action_scale", "action_events",
         "positive_actions"});
    if (!r.ok()) return r.status();
    int64_t seed = 0;
    GEMTB_RETURN_IF_ERROR(r->Int64("seed", &seed, 0, INT64_MAX));
    p.teacher.seed = static_cast<uint64_t>(seed);
    GEMTB_RETURN_IF_ERROR(r->Range("user_ad_scale", &p.teacher.user_ad_scale, 0.0, 100.0));
    GEMTB_RETURN_IF_ERROR(r->Range("history_scale", &p.teacher.history_scale, 0.0, 100.0));
    GEMTB_RETURN_IF_ERROR(r->Int64("history_events", &p.teacher.history_events, 0, 1 << 20));
    GEMTB_RETURN_IF_ERROR(r->Range("action_scale", &p.teacher.action_scale, -100.0, 100.0));
    GEMTB_RETURN_IF_ERROR(r->Int64("action_events", &p.teacher.action_events, 0, 1 << 20));
    GEMTB_RETURN_IF_ERROR(r->Int64("positive_actions", &p.teacher.positive_actions, 0, int64_t{1} << 40));
  }
  GEMTB_RETURN_IF_ERROR(root->Range("dense_noise", &p.dense_noise, 0.0, 100.0));
  if (const Json* ts = root->Get("tasks")) {
    if (!ts->is_object()) return json::BadValue("$.tasks", *ts, "is not an object of task name -> parameters");
    for (auto it = ts->begin(); it != ts->end(); ++it) {
      if (!it.key().empty() && it.key()[0] == '_') continue;
      const std::string path = json::JoinPath("$.tasks", it.key());
      TaskParams t;
      t.name = it.key();
      absl::StatusOr<ObjectReader> r = ObjectReader::OpenAllowingComments(it.value(), path, {"bias", "surface_offsets"});
      if (!r.ok()) return r.status();
      GEMTB_RETURN_IF_ERROR(r->Range("bias", &t.bias, -50.0, 50.0));
      if (const Json* o = r->Get("surface_offsets")) {
        const std::string opath = json::JoinPath(path, "surface_offsets");
        if (!o->is_array()) return json::BadValue(opath, *o, "is not an array of numbers");
        for (size_t k = 0; k < o->size(); ++k) {
          absl::StatusOr<double> v = json::ReadNumber((*o)[k], json::IndexPath(opath, k));
          if (!v.ok()) return v.status();
          t.surface_offsets.push_back(*v);
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
  absl::StatusOr<std::string> text = ReadUserFile(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<DataParams> p = ParseDataParamsText(*text);
  if (!p.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", p.status().message()));
  return p;
}

}  // namespace gemtb::data
