// A measured per-layer calibration (Calibration::layers) through Simulate() on a one-GPU toy
// scenario: efficiencies equal to the kind defaults change nothing, halving one op's efficiency adds
// exactly that op's time to the step, a layer's efficiency prices its region's ops by FLOPs so that
// they sum to the measured layer time, and calibrations that do not fit the model are named errors.
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/engine/simulate.h"
#include "sim/scenario/op_efficiency.h"
#include "sim/workload/rank_groups.h"
#include "sim/workload/step_template.h"
#include "tests/sim/engine/test_scenario.h"

namespace gemtb::sim {
namespace {

using testing::ToyModel;
using testing::ToyScenario;

constexpr int kRegions = 3;
constexpr double kFlopsPerToken = 4e6;
constexpr double kLinearDefault = 0.5;  // TestCluster's linear efficiency
constexpr double kPeak = 989e12;        // TestCluster's bf16 peak FLOP/s
constexpr double kHbm = 4.8e12;         // TestCluster's HBM bandwidth

Scenario OneGpu() {
  Scenario s = ToyScenario(1, 64, ToyModel(kRegions, kFlopsPerToken, 1000));
  s.batches.measured_steps = 2;
  return s;
}

LayerCalibration Layers() {
  LayerCalibration l;
  l.hardware = "test GPU";
  l.commit = "test";
  l.command = "by hand";
  l.config = "toy";
  return l;
}

SimResult SimulateOk(const Scenario& s) {
  SimOptions o;
  o.trace = false;
  absl::StatusOr<SimResult> r = Simulate(s, Counterfactuals{}, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : SimResult{};
}

TEST(LayerCalibrationTest, KindDefaultsChangeNothing) {
  const Scenario base = OneGpu();
  Scenario measured = base;
  LayerCalibration l = Layers();
  l.kinds["linear"] = {kLinearDefault, kLinearDefault};
  measured.cluster.calibration.layers = l;
  const SimResult a = SimulateOk(base), b = SimulateOk(measured);
  ASSERT_FALSE(a.step_times_s.empty());
  EXPECT_EQ(a.step_times_s, b.step_times_s);
  EXPECT_EQ(a.local_mfu, b.local_mfu);
  EXPECT_EQ(a.t_local_s, b.t_local_s);
  const EfficiencySourceCounts counts = CountEfficiencySources(*measured.model, measured.cluster.calibration);
  EXPECT_EQ(counts.measured_kind, 2 * kRegions);
  EXPECT_EQ(counts.measured_op, 0);
  EXPECT_EQ(counts.kind_default, 0);
}

TEST(LayerCalibrationTest, HalvingOneOpsEfficiencyAddsThatOpsTime) {
  const Scenario base = OneGpu();
  Scenario halved = base;
  LayerCalibration l = Layers();
  l.ops["L1.mlp"].fwd = kLinearDefault / 2;
  halved.cluster.calibration.layers = l;
  const SimResult a = SimulateOk(base), b = SimulateOk(halved);
  ASSERT_EQ(a.ranks.size(), 1u);
  // Every toy op has forward f*N and backward 2f*N FLOPs: one op's forward is 1/(3 * regions) of the
  // rank's model FLOPs; at the default efficiency it takes that / (peak * e).
  const double op_fwd_s = a.ranks[0].flops / (3.0 * kRegions) / (989e12 * kLinearDefault);
  ASSERT_GT(op_fwd_s, 1e-6);
  EXPECT_NEAR(b.step_mean_s - a.step_mean_s, op_fwd_s, 1e-9 * a.step_mean_s);
  // Only the forward of that one op moved: its backward and the other ops keep their kind's.
  const EfficiencySourceCounts counts = CountEfficiencySources(*halved.model, halved.cluster.calibration);
  EXPECT_EQ(counts.measured_op, 1);
  EXPECT_EQ(counts.kind_default, 2 * kRegions - 1);
}

TEST(LayerCalibrationTest, MeasuredMemoryBoundOpsRunAgainstHbmBandwidth) {
  auto model = ToyModel(1, kFlopsPerToken, 1000);
  model::Op norm = model->ops[0];
  norm.name = "L0.norm";
  norm.kind = model::OpKind::kNorm;
  norm.local_mfu = false;
  norm.bytes.fwd.N = 1000;
  norm.bytes.bwd.N = 2000;
  model->ops.push_back(norm);
  Scenario s = ToyScenario(1, 64, model);
  const OpRate kind_default = ResolveOpRate(s.cluster, 989e12, norm, false);
  EXPECT_EQ(kind_default.source, EfficiencySource::kKindDefault);
  EXPECT_DOUBLE_EQ(kind_default.rate * kind_default.e, s.cluster.gpu.hbm_Bps * 0.6);
  LayerCalibration l = Layers();
  l.kinds["norm"].bwd = 0.3;
  s.cluster.calibration.layers = l;
  const OpRate bwd = ResolveOpRate(s.cluster, 989e12, norm, true);
  EXPECT_EQ(bwd.source, EfficiencySource::kMeasuredKind);
  EXPECT_DOUBLE_EQ(bwd.rate * bwd.e, s.cluster.gpu.hbm_Bps * 0.3);
  EXPECT_EQ(ResolveOpRate(s.cluster, 989e12, norm, false).source, EfficiencySource::kKindDefault);
}

// The toy model with a norm and a pointwise op added to region L0 beside its GEMM, each with FLOPs
// and bytes far apart, so that pricing them by bytes instead of FLOPs gives another time.
std::shared_ptr<model::ModelGraph> MixedModel() {
  auto model = ToyModel(kRegions, kFlopsPerToken, 1000);
  model::Op norm = model->ops[0];
  norm.name = "L0.norm";
  norm.kind = model::OpKind::kNorm;
  norm.local_mfu = false;
  norm.params = 0;
  norm.flops.fwd = {3, 0, 5, 0};
  norm.flops.bwd = {0, 0, 9, 0};
  norm.bytes.fwd = {0, 0, 1000, 0};
  norm.bytes.bwd = {0, 0, 3000, 0};
  model::Op gate = norm;
  gate.name = "L0.gate";
  gate.kind = model::OpKind::kPointwise;
  gate.flops.fwd = {0, 7e3, 2, 0.5};
  gate.bytes.fwd = {0, 4e5, 800, 0};
  model->ops.insert(model->ops.begin() + 1, {norm, gate});
  return model;
}

// The forward time the step template gives region `name` at batch B, tokens N and pairs P.
double RegionForwardTime(const Scenario& s, const std::string& name, double B, double N, double P) {
  absl::StatusOr<RankGroups> groups = BuildRankGroups(s.plan, s.cluster.world_size);
  EXPECT_TRUE(groups.ok()) << groups.status();
  if (!groups.ok()) return 0;
  absl::StatusOr<StepTemplate> t = BuildStepTemplate(s, *groups);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return 0;
  std::vector<double> stats(t->layout.size(), 0.0);
  stats[StatLayout::kOne] = 1;
  stats[StatLayout::kB] = B;
  stats[t->layout.N(0)] = N;
  stats[t->layout.P(0)] = P;
  for (const RegionTemplate& r : t->regions) {
    if (r.name != name) continue;
    double time = 0;  // the region's forward: its pieces'
    for (int p = r.piece_begin; p < r.piece_end; ++p) time += EvalTime(t->pieces[p].fwd_time, t->pieces[p].fwd_curve_terms, stats);
    return time;
  }
  ADD_FAILURE() << "no region " << name;
  return 0;
}

TEST(LayerCalibrationTest, LayerEfficiencyPricesItsRegionsOpsByFlops) {
  constexpr double B = 64, N = 50'000, P = 2e6, e = 0.2;
  Scenario s = ToyScenario(1, 64, MixedModel());
  // What the benchmark measured: t = F / (peak x e), F the forward FLOPs of every op of L0.
  double region_flops = 0, mlp_gate_flops = 0, norm_bytes = 0;
  for (const model::Op& op : s.model->ops) {
    if (op.region != "L0") continue;
    const double f = op.flops.fwd.Eval(B, N, P);
    region_flops += f;
    if (op.name != "L0.norm") mlp_gate_flops += f;
    if (op.name == "L0.norm") norm_bytes = op.bytes.fwd.Eval(B, N, P);
  }
  ASSERT_GT(region_flops, mlp_gate_flops);
  const double measured_t = region_flops / (kPeak * e);
  const double before = RegionForwardTime(s, "L0", B, N, P);

  LayerCalibration l = Layers();
  l.layers["L0"].fwd = e;
  s.cluster.calibration.layers = l;
  EXPECT_NEAR(RegionForwardTime(s, "L0", B, N, P), measured_t, 1e-12 * measured_t);
  EXPECT_NE(before, measured_t);
  EXPECT_NEAR(RegionForwardTime(s, "L1", B, N, P), N * kFlopsPerToken / (kPeak * kLinearDefault), 1e-12);
  // A memory-bound op of the layer is priced by its FLOPs at peak; its backward (no layer entry)
  // keeps bytes at HBM bandwidth x e_mem.
  const model::Op& norm = s.model->ops[1];
  ASSERT_EQ(norm.name, "L0.norm");
  const OpRate fwd = ResolveOpRate(s.cluster, kPeak, norm, false);
  EXPECT_EQ(fwd.source, EfficiencySource::kMeasuredLayer);
  EXPECT_TRUE(fwd.flops_work);
  EXPECT_DOUBLE_EQ(fwd.rate * fwd.e, kPeak * e);
  const OpRate bwd = ResolveOpRate(s.cluster, kPeak, norm, true);
  EXPECT_EQ(bwd.source, EfficiencySource::kKindDefault);
  EXPECT_FALSE(bwd.flops_work);
  EXPECT_DOUBLE_EQ(bwd.rate * bwd.e, kHbm * 0.6);
  EfficiencySourceCounts counts = CountEfficiencySources(*s.model, s.cluster.calibration);
  EXPECT_EQ(counts.measured_layer, 3);  // L0's three forwards
  EXPECT_EQ(counts.measured_op, 0);
  EXPECT_EQ(counts.measured_kind, 0);
  EXPECT_EQ(counts.kind_default, 2 * (kRegions + 2) - 3);

  // An op entry beats the layer's for that op only: the norm goes back to bytes at its own
  // efficiency, the rest of L0 keeps the layer's.
  l.ops["L0.norm"].fwd = 0.5;
  s.cluster.calibration.layers = l;
  EXPECT_NEAR(RegionForwardTime(s, "L0", B, N, P), mlp_gate_flops / (kPeak * e) + norm_bytes / (kHbm * 0.5),
              1e-12 * measured_t);
  counts = CountEfficiencySources(*s.model, s.cluster.calibration);
  EXPECT_EQ(counts.measured_op, 1);
  EXPECT_EQ(counts.measured_layer, 2);
  EXPECT_EQ(counts.kind_default, 2 * (kRegions + 2) - 3);
}

TEST(LayerCalibrationTest, UnknownOpAndOtherConfigAreNamedErrors) {
  Scenario s = OneGpu();
  LayerCalibration l = Layers();
  l.ops["L9.mlp"].fwd = 0.5;
  s.cluster.calibration.layers = l;
  absl::StatusOr<SimResult> r = Simulate(s, Counterfactuals{}, SimOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cluster.calibration.layers.ops.L9.mlp: is not an op of the model"),
            std::string::npos)
      << r.status();
  l.ops.clear();
  l.layers["L9"].fwd = 0.5;
  s.cluster.calibration.layers = l;
  r = Simulate(s, Counterfactuals{}, SimOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cluster.calibration.layers.layers.L9: is not a region of the model"),
            std::string::npos)
      << r.status();
  l.layers.clear();
  l.kinds["linear"].fwd = 0.5;
  l.config = "small";
  s.cluster.calibration.layers = l;
  r = Simulate(s, Counterfactuals{}, SimOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cluster.calibration.layers.config: \"small\" is not the scenario's model config"),
            std::string::npos)
      << r.status();
}

}  // namespace
}  // namespace gemtb::sim
