#include "sim/scenario/op_efficiency.h"

#include <optional>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "model/common/enum_names.h"

namespace gemtb::sim {
namespace {

using model::Op;
using model::OpKind;

std::optional<double> Measured(const std::map<std::string, MeasuredEfficiency>& table, const std::string& key,
                               bool backward) {
  const auto it = table.find(key);
  if (it == table.end()) return std::nullopt;
  return backward ? it->second.bwd : it->second.fwd;
}

const Curve* KindCurve(const Efficiency& eff, const Op& op) {
  if (auto it = eff.by_name_or_kind.find(op.name); it != eff.by_name_or_kind.end()) return &it->second;
  if (auto it = eff.by_name_or_kind.find(std::string(NameIn(model::kOpKindNames, op.kind)));
      it != eff.by_name_or_kind.end()) {
    return &it->second;
  }
  return nullptr;
}

// The measured efficiency of (op, direction) and where it came from; none: the kind default.
std::optional<std::pair<double, EfficiencySource>> FindMeasured(const Calibration& cal, const Op& op, bool backward) {
  if (!cal.layers.has_value()) return std::nullopt;
  if (std::optional<double> e = Measured(cal.layers->ops, op.name, backward)) {
    return std::make_pair(*e, EfficiencySource::kMeasuredOp);
  }
  if (std::optional<double> e = Measured(cal.layers->layers, op.region, backward)) {
    return std::make_pair(*e, EfficiencySource::kMeasuredLayer);
  }
  if (std::optional<double> e = Measured(cal.layers->kinds, std::string(NameIn(model::kOpKindNames, op.kind)), backward)) {
    return std::make_pair(*e, EfficiencySource::kMeasuredKind);
  }
  return std::nullopt;
}

}  // namespace

bool MemoryBound(OpKind kind) {
  return kind == OpKind::kNorm || kind == OpKind::kPointwise || kind == OpKind::kEmbedding || kind == OpKind::kLoss;
}

OpRate ResolveOpRate(const Cluster& cluster, double peak_flops, const Op& op, bool backward) {
  const bool mem = MemoryBound(op.kind);
  OpRate r;
  if (const auto measured = FindMeasured(cluster.calibration, op, backward)) {
    // A layer's efficiency is of its FLOPs, memory-bound ops' included (op_efficiency.h).
    r.flops_work = !mem || measured->second == EfficiencySource::kMeasuredLayer;
    r.rate = r.flops_work ? peak_flops : cluster.gpu.hbm_Bps;
    r.e = measured->first;
    r.source = measured->second;
    return r;
  }
  r.flops_work = !mem;
  r.rate = mem ? cluster.gpu.hbm_Bps * cluster.calibration.efficiency.e_mem : peak_flops;
  const Curve* curve = mem ? nullptr : KindCurve(cluster.calibration.efficiency, op);
  if (curve != nullptr && curve->points.size() > 1) {
    r.curve = curve;
  } else if (curve != nullptr && !curve->points.empty()) {
    r.e = curve->points[0].second;
  }
  return r;
}

EfficiencySourceCounts CountEfficiencySources(const model::ModelGraph& model, const Calibration& calibration) {
  EfficiencySourceCounts counts;
  for (const Op& op : model.ops) {
    for (bool backward : {false, true}) {
      const auto measured = FindMeasured(calibration, op, backward);
      const EfficiencySource source = measured ? measured->second : EfficiencySource::kKindDefault;
      ++(source == EfficiencySource::kMeasuredOp      ? counts.measured_op
         : source == EfficiencySource::kMeasuredLayer ? counts.measured_layer
         : source == EfficiencySource::kMeasuredKind  ? counts.measured_kind
                                                      : counts.kind_default);
    }
  }
  return counts;
}

absl::Status CheckLayerCalibration(const model::ModelGraph& model, const LayerCalibration& layers) {
  if (layers.config != model.config) {
    return absl::InvalidArgumentError(absl::StrCat("cluster.calibration.layers.config: \"", layers.config,
                                                   "\" is not the scenario's model config \"", model.config, "\""));
  }
  std::set<std::string> names, regions;
  for (const Op& op : model.ops) {
    names.insert(op.name);
    regions.insert(op.region);
  }
  for (const auto& [name, e] : layers.ops) {
    if (!names.contains(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("cluster.calibration.layers.ops.", name, ": is not an op of the model (config \"", model.config, "\")"));
    }
  }
  for (const auto& [region, e] : layers.layers) {
    if (!regions.contains(region)) {
      return absl::InvalidArgumentError(absl::StrCat("cluster.calibration.layers.layers.", region,
                                                     ": is not a region of the model (config \"", model.config, "\")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace gemtb::sim
