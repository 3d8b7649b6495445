// ScenarioDocument -> Scenario: the cluster (sim/network's parser), the model (parsed at load), the
// plan, batches and noise sections, and the assumptions list, each validated with named errors.
#include "sim/scenario/scenario_json.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "model/description/model_graph.h"
#include "sim/network/cluster_json.h"
#include "sim/network/collective_cost.h"
#include "model/json/json_reader.h"
#include "sim/scenario/plan_json.h"

namespace gemtb::sim {

using namespace ::gemtb::json;  // the strict reader: ObjectReader, BadValue, JoinPath, ...
namespace {

absl::StatusOr<Assumption> ParseAssumption(const ScenarioDocument& doc, const nlohmann::json& json,
                                           const std::string& path) {
  absl::StatusOr<ObjectReader> r = ObjectReader::Open(
      json, path, {"name", "path", "paths", "low", "high", "low_factor", "high_factor", "note"});
  if (!r.ok()) return r.status();
  Assumption a;
  GEMTB_RETURN_IF_ERROR(r->Require("name"));
  GEMTB_RETURN_IF_ERROR(r->String("name", &a.name));
  GEMTB_RETURN_IF_ERROR(r->String("note", &a.note));
  if (r->Has("path") == r->Has("paths")) return BadField(path, "needs exactly one of path and paths");
  if (r->Has("path")) {
    std::string p;
    GEMTB_RETURN_IF_ERROR(r->String("path", &p));
    a.paths.push_back(p);
  } else {
    const nlohmann::json& paths = *r->Get("paths");
    if (!paths.is_array() || paths.empty()) return BadValue(JoinPath(path, "paths"), paths, "is not a non-empty array of paths");
    for (size_t i = 0; i < paths.size(); ++i) {
      if (!paths[i].is_string()) return BadValue(IndexPath(JoinPath(path, "paths"), i), paths[i], "is not a path");
      a.paths.push_back(paths[i].get<std::string>());
    }
  }
  for (size_t i = 0; i < a.paths.size(); ++i) {
    absl::StatusOr<double> v = GetNumber(doc, a.paths[i]);
    if (!v.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(r->Has("path") ? JoinPath(path, "path") : IndexPath(JoinPath(path, "paths"), i),
                                                     ": ", v.status().message()));
    }
    if (i == 0) a.value = *v;
  }
  a.path = a.paths.front();
  const bool absolute = r->Has("low") || r->Has("high");
  const bool factors = r->Has("low_factor") || r->Has("high_factor");
  if (absolute == factors) return BadField(path, "needs either low and high or low_factor and high_factor");
  if (absolute) {
    GEMTB_RETURN_IF_ERROR(r->Require("low"));
    GEMTB_RETURN_IF_ERROR(r->Require("high"));
    if (a.paths.size() != 1) return BadField(path, "absolute low/high need a single path; use low_factor/high_factor");
    GEMTB_RETURN_IF_ERROR(r->Range("low", &a.low, -1e300, 1e300));
    GEMTB_RETURN_IF_ERROR(r->Range("high", &a.high, -1e300, 1e300));
    // A single path moves to the absolute values; the factors are informational and undefined at
    // a value of 0 (e.g. a 0/1 switch in a variant whose value is the low case).
    a.low_factor = a.value != 0 ? a.low / a.value : std::numeric_limits<double>::quiet_NaN();
    a.high_factor = a.value != 0 ? a.high / a.value : std::numeric_limits<double>::quiet_NaN();
  } else {
    GEMTB_RETURN_IF_ERROR(r->Require("low_factor"));
    GEMTB_RETURN_IF_ERROR(r->Require("high_factor"));
    GEMTB_RETURN_IF_ERROR(r->Range("low_factor", &a.low_factor, 0, 1e6));
    GEMTB_RETURN_IF_ERROR(r->Range("high_factor", &a.high_factor, 0, 1e6));
    a.low = a.value * a.low_factor;
    a.high = a.value * a.high_factor;
  }
  if (a.low > a.high) return BadField(JoinPath(path, absolute ? "low" : "low_factor"),
                                      absl::StrCat("low case ", a.low, " must be <= high case ", a.high));
  return a;
}

absl::Status ParseAssumptions(const ScenarioDocument& doc, std::vector<Assumption>* out) {
  if (!doc.json.contains("assumptions")) return absl::OkStatus();
  const nlohmann::json& list = doc.json["assumptions"];
  if (!list.is_array()) return BadValue("assumptions", list, "is not an array");
  for (size_t i = 0; i < list.size(); ++i) {
    absl::StatusOr<Assumption> a = ParseAssumption(doc, list[i], IndexPath("assumptions", i));
    if (!a.ok()) return a.status();
    out->push_back(*std::move(a));
  }
  return absl::OkStatus();
}

std::shared_ptr<const model::ModelGraph> ScaledRows(const std::shared_ptr<const model::ModelGraph>& graph,
                                                    double scale) {
  if (scale == 1) return graph;
  auto copy = std::make_shared<model::ModelGraph>(*graph);
  for (model::GraphTable& t : copy->tables) {
    t.rows = std::max<int64_t>(1, static_cast<int64_t>(std::llround(static_cast<double>(t.rows) * scale)));
  }
  return copy;
}

}  // namespace

absl::StatusOr<Scenario> BuildScenario(const ScenarioDocument& doc) {
  if (doc.model == nullptr) return absl::InvalidArgumentError("model: not loaded");
  Scenario s;
  s.name = doc.name;
  absl::StatusOr<ObjectReader> top = ObjectReader::Open(
      doc.json, "", {"name", "description", "seed", "model", "cluster", "plan", "batches", "noise", "assumptions"});
  if (!top.ok()) return top.status();
  GEMTB_RETURN_IF_ERROR(top->Require("seed"));
  GEMTB_RETURN_IF_ERROR(top->Uint64("seed", &s.seed));

  absl::StatusOr<Cluster> cluster = ParseCluster(doc.json["cluster"], "cluster", doc.cluster_base_dir);
  if (!cluster.ok()) return cluster.status();
  if (cluster->world_size < 1) return BadField("cluster.world_size", "missing (the scenario needs a world size)");
  GEMTB_RETURN_IF_ERROR(ValidateClusterWorld(*cluster, "cluster"));
  s.cluster = *std::move(cluster);

  s.model = ScaledRows(doc.model, doc.model_rows_scale);

  absl::StatusOr<Plan> plan = ParsePlan(doc.json["plan"], s.cluster, *s.model, &s.warnings);
  if (!plan.ok()) return plan.status();
  s.plan = *std::move(plan);
  // The cost model's own checks (algorithm valid for its op, calibration tiers).
  absl::StatusOr<CollectiveCostModel> costs = CollectiveCostModel::Create(s.cluster, s.plan.collectives);
  if (!costs.ok()) return costs.status();

  absl::StatusOr<Batches> batches = ParseBatches(doc.json["batches"], s.cluster, *s.model);
  if (!batches.ok()) return batches.status();
  s.batches = *std::move(batches);

  if (doc.json.contains("noise")) {
    absl::StatusOr<Noise> noise = ParseNoise(doc.json["noise"], s.cluster);
    if (!noise.ok()) return noise.status();
    s.noise = *std::move(noise);
  }
  GEMTB_RETURN_IF_ERROR(ParseAssumptions(doc, &s.assumptions));
  return s;
}

absl::StatusOr<Scenario> ParseScenario(const std::string& path) {
  absl::StatusOr<ScenarioDocument> doc = LoadScenarioDocument(path);
  if (!doc.ok()) return doc.status();
  return BuildScenario(*doc);
}

absl::StatusOr<Scenario> ParseScenarioJson(const nlohmann::json& json, const std::string& base_dir, std::string name) {
  absl::StatusOr<ScenarioDocument> doc = LoadScenarioDocument(json, base_dir, std::move(name));
  if (!doc.ok()) return doc.status();
  return BuildScenario(*doc);
}

}  // namespace gemtb::sim
