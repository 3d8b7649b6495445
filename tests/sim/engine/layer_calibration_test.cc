// A measured per-layer calibration (Calibration::layers) through Simulate() on a one-GPU toy
// scenario: efficiencies equal to the kind defaults change nothing, halving one op's efficiency adds
// exactly that op's time to the step, and calibrations that do not fit the model are named errors.
#include <string>

#include "gtest/gtest.h"
#include "sim/engine/simulate.h"
#include "sim/scenario/op_efficiency.h"
#include "tests/sim/engine/test_scenario.h"

namespace gemtb::sim {
namespace {

using testing::ToyModel;
using testing::ToyScenario;

constexpr int kRegions = 3;
constexpr double kFlopsPerToken = 4e6;
constexpr double kLinearDefault = 0.5;  // TestCluster's linear efficiency

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
