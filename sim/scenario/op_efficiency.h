// Which efficiency prices an op's forward or backward: a measured per-layer calibration
// (Calibration::layers) by op name, then by the op's layer (its region), then by op kind, then the
// cluster calibration's per-kind efficiency (GEMMs and attention against peak FLOP/s, memory-bound ops
// against HBM bandwidth x e_mem).
#ifndef GEMTB_SIM_SCENARIO_OP_EFFICIENCY_H_
#define GEMTB_SIM_SCENARIO_OP_EFFICIENCY_H_

#include "absl/status/status.h"
#include "model/description/model_graph.h"
#include "sim/scenario/scenario.h"

namespace gemtb::sim {

enum class EfficiencySource { kMeasuredOp, kMeasuredLayer, kMeasuredKind, kKindDefault };

// GEMMs and attention run at peak FLOP/s x efficiency; norms, pointwise ops, lookups and the loss at
// HBM bandwidth x efficiency.
bool MemoryBound(model::OpKind kind);

// An op's rate: time = work / (rate * e), work its FLOPs when flops_work, else its bytes. With a curve
// (the cluster calibration's, more than one point) e is read from it at the op's tokens instead.
// Memory-bound ops are priced by bytes except under a layer's entry: a layer is measured as one
// time for all its ops and reported as e = F / (peak x t) with F the FLOPs of all of them, so each
// op of the layer takes its FLOPs / (peak x e) and the layer's ops sum to the measured t.
struct OpRate {
  double rate = 0;
  double e = 1;
  bool flops_work = true;
  const Curve* curve = nullptr;
  EfficiencySource source = EfficiencySource::kKindDefault;
};
OpRate ResolveOpRate(const Cluster& cluster, double peak_flops, const model::Op& op, bool backward);

// How many (op, direction) pairs of the model take each source.
struct EfficiencySourceCounts {
  int measured_op = 0;
  int measured_layer = 0;
  int measured_kind = 0;
  int kind_default = 0;
};
EfficiencySourceCounts CountEfficiencySources(const model::ModelGraph& model, const Calibration& calibration);

// A layer calibration fits the model: it was measured on the model's config, every op it names is an
// op of the model and every layer it names is a region of the model. Errors name
// "cluster.calibration.layers.<field>".
absl::Status CheckLayerCalibration(const model::ModelGraph& model, const LayerCalibration& layers);

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_SCENARIO_OP_EFFICIENCY_H_
