// Small scenarios built in code for the engine tests: a 3-tier H200-like cluster and a toy model
// whose costs are easy to compute by hand.
#ifndef GEMTB_TESTS_SIM_ENGINE_TEST_SCENARIO_H_
#define GEMTB_TESTS_SIM_ENGINE_TEST_SCENARIO_H_

#include <memory>
#include <string>

#include "model/description/model_graph.h"
#include "sim/scenario/scenario.h"

namespace gemtb::sim::testing {

inline Cluster TestCluster(int world) {
  Cluster c;
  c.world_size = world;
  c.gpus_per_host = 8;
  c.zone_size = world >= 64 ? world / 2 : world;
  c.tiers = {Tier{"nvlink", 450e9, 370e9, 1.87e-6, 1},
             Tier{"zone", 50e9, 48.5e9, 5e-6, 1},
             Tier{"cross_zone", 50e9, 48.5e9, 8e-6, 7}};
  c.gpu.peak_flops = {{"bf16", 989e12}, {"fp8", 1979e12}};
  c.gpu.hbm_bytes = 141e9;
  c.gpu.hbm_Bps = 4.8e12;
  c.gpu.sm_count = 132;
  c.calibration.efficiency.e_mem = 0.6;
  c.calibration.efficiency.by_name_or_kind["linear"].points = {{0, 0.5}};
  c.calibration.efficiency.by_name_or_kind["attention"].points = {{0, 0.4}};
  return c;
}

// One sequence (j = 0, n_s CLS tokens); per region one linear op whose forward FLOPs are
// flops_per_token * N_0 and `params` dense parameters, saved bytes saved_per_token * N_0.
inline std::shared_ptr<model::ModelGraph> ToyModel(int regions, double flops_per_token, int64_t params,
                                                   double saved_per_token = 0, int64_t n_s = 0) {
  auto m = std::make_shared<model::ModelGraph>();
  m->config = "toy";
  m->d = 64;
  m->sequences.push_back({0, 1 << 20, n_s});
  model::GraphTable items;
  items.name = "items";
  items.rows = 1'000'000;
  items.dim = 64;
  items.dtype = ElementType::kFloat16;
  items.pooling = Pooling::kNone;
  items.features = {"seq0.item"};
  m->tables.push_back(items);
  for (int u = 0; u < regions; ++u) {
    model::Op op;
    op.name = "L" + std::to_string(u) + ".mlp";
    op.region = "L" + std::to_string(u);
    op.kind = model::OpKind::kLinear;
    op.seq = 0;
    op.flops.fwd.N = flops_per_token;
    op.flops.bwd.N = 2 * flops_per_token;
    op.saved.bytes.N = saved_per_token;
    op.params = params;
    op.local_mfu = true;
    m->ops.push_back(op);
  }
  return m;
}

inline Scenario ToyScenario(int world, int64_t local_batch, std::shared_ptr<model::ModelGraph> model) {
  Scenario s;
  s.seed = 7;
  s.model = std::move(model);
  s.cluster = TestCluster(world);
  s.plan.dense.fsdp_shard_group = 1;
  s.plan.dense.dim_order = {"shard", "replica"};
  s.plan.sparse.mp_group = world;
  if (s.model != nullptr) s.plan.sparse.tables.assign(s.model->tables.size(), TableSharding{});  // every table TW
  s.batches.local_batch = local_batch;
  LengthLaw law;
  law.kind = LengthLaw::Kind::kLognormal;
  law.mu = std::log(1000.0);
  law.sigma = 0.8;
  law.min = 1;
  law.max = int64_t{1} << 16;
  law.corr = 1;
  s.batches.features = {law};
  s.batches.assignment.policy = "random";
  s.batches.assignment.sub_batch = 16;
  s.batches.warmup_steps = 0;
  s.batches.measured_steps = 1;
  return s;
}

}  // namespace gemtb::sim::testing

#endif  // GEMTB_TESTS_SIM_ENGINE_TEST_SCENARIO_H_
