#include "sim/network/layer_calibration_json.h"

#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "model/description/model_graph.h"
#include "model/json/json_reader.h"

namespace gemtb::sim {
namespace {

namespace jr = gemtb::json;
using jr::ObjectReader;
using nlohmann::json;

absl::Status NonEmptyText(const ObjectReader& r, const json& j, std::string_view key, std::string* out) {
  GEMTB_RETURN_IF_ERROR(r.Require(key));
  GEMTB_RETURN_IF_ERROR(r.String(key, out));
  if (out->empty()) return jr::BadValue(jr::JoinPath(r.path(), key), j.at(key), "must not be empty");
  return absl::OkStatus();
}

absl::Status ParseEntry(const json& j, const std::string& path, MeasuredEfficiency* out) {
  absl::StatusOr<ObjectReader> r = ObjectReader::Open(j, path, {"fwd", "bwd"});
  if (!r.ok()) return r.status();
  if (!r->Has("fwd") && !r->Has("bwd")) return jr::BadField(path, "needs fwd, bwd or both");
  for (const auto& [key, slot] : {std::pair<std::string_view, std::optional<double>*>{"fwd", &out->fwd},
                                  std::pair<std::string_view, std::optional<double>*>{"bwd", &out->bwd}}) {
    if (!r->Has(key)) continue;
    double e = 0;
    GEMTB_RETURN_IF_ERROR(r->Fraction(key, &e));
    *slot = e;
  }
  return absl::OkStatus();
}

// What a table's keys name. Op and region names are checked against the model later
// (CheckLayerCalibration); op kinds are a fixed set and are checked here.
enum class TableKey { kOpName, kRegion, kOpKind };

absl::Status ParseTable(const json& j, const std::string& path, TableKey key,
                        std::map<std::string, MeasuredEfficiency>* out) {
  if (!j.is_object()) return jr::BadValue(path, j, "must be an object {name: {\"fwd\": e, \"bwd\": e}}");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string entry_path = jr::JoinPath(path, it.key());
    if (key == TableKey::kOpKind && !ParseIn(model::kOpKindNames, it.key()).has_value()) {
      return jr::BadField(entry_path, "is not an op kind (" + NamesOf(model::kOpKindNames) + ")");
    }
    if (key == TableKey::kOpName && it.key().empty()) return jr::BadField(entry_path, "an op name must not be empty");
    if (key == TableKey::kRegion && it.key().empty()) return jr::BadField(entry_path, "a region name must not be empty");
    GEMTB_RETURN_IF_ERROR(ParseEntry(it.value(), entry_path, &(*out)[it.key()]));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LayerCalibration> ParseLayerCalibration(const json& j, std::string_view path_prefix) {
  const std::string path(path_prefix);
  absl::StatusOr<ObjectReader> r =
      ObjectReader::Open(j, path, {"format", "version", "hardware", "commit", "command", "config", "ops", "layers",
                                   "kinds", "note"});
  if (!r.ok()) return r.status();
  std::string format;
  GEMTB_RETURN_IF_ERROR(r->Require("format"));
  GEMTB_RETURN_IF_ERROR(r->Enum("format", &format, {kLayerCalibrationFormat}));
  LayerCalibration cal;
  GEMTB_RETURN_IF_ERROR(r->Require("version"));
  GEMTB_RETURN_IF_ERROR(r->Int("version", &cal.version, kLayerCalibrationVersion, kLayerCalibrationVersion));
  GEMTB_RETURN_IF_ERROR(NonEmptyText(*r, j, "hardware", &cal.hardware));
  GEMTB_RETURN_IF_ERROR(NonEmptyText(*r, j, "commit", &cal.commit));
  GEMTB_RETURN_IF_ERROR(NonEmptyText(*r, j, "command", &cal.command));
  GEMTB_RETURN_IF_ERROR(NonEmptyText(*r, j, "config", &cal.config));
  if (r->Has("ops")) {
    GEMTB_RETURN_IF_ERROR(ParseTable(j.at("ops"), jr::JoinPath(path, "ops"), TableKey::kOpName, &cal.ops));
  }
  if (r->Has("layers")) {
    GEMTB_RETURN_IF_ERROR(ParseTable(j.at("layers"), jr::JoinPath(path, "layers"), TableKey::kRegion, &cal.layers));
  }
  if (r->Has("kinds")) {
    GEMTB_RETURN_IF_ERROR(ParseTable(j.at("kinds"), jr::JoinPath(path, "kinds"), TableKey::kOpKind, &cal.kinds));
  }
  if (cal.ops.empty() && cal.layers.empty() && cal.kinds.empty()) {
    return jr::BadField(path, "has no efficiency (ops, layers and kinds empty)");
  }
  return cal;
}

}  // namespace gemtb::sim
