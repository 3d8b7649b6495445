// Simulate() end to end on toy scenarios: order statistics of imbalance, batch policies
// and SM-free collectives, determinism.
#include "sim/engine/simulate.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "sim/engine/memory_model.h"
#include "sim/workload/rank_groups.h"
#include "sim/workload/step_template.h"
#include "tests/sim/engine/test_scenario.h"

namespace gemtb::sim {
namespace {

using testing::ToyModel;
using testing::ToyScenario;

SimOptions NoTrace() {
  SimOptions o;
  o.trace = false;
  return o;
}

TEST(SimulateTest, ImbalanceFollowsOrderStatisticsOfIidSamples) {
  // R ranks with B i.i.d. samples of cost CV c: E[max]/mean - 1 ~ c sqrt(2 ln R / B).
  const int R = 256;
  const int B = 64;
  Scenario s = ToyScenario(R, B, ToyModel(1, 1e9, 0));
  const double sigma = s.batches.features[0].sigma;
  const double c = std::sqrt(std::exp(sigma * sigma) - 1.0);  // CV of a lognormal cost
  const double predicted = c * std::sqrt(2.0 * std::log(static_cast<double>(R)) / B);
  double mean = 0;
  const int seeds = 20;
  for (int seed = 0; seed < seeds; ++seed) {
    s.seed = 1000 + seed;
    auto r = Simulate(s, Counterfactuals{}, NoTrace());
    ASSERT_TRUE(r.ok()) << r.status();
    mean += r->imbalance / seeds;
  }
  EXPECT_GT(mean, 0.75 * predicted);
  EXPECT_LT(mean, 1.25 * predicted);
}

Scenario PolicyScenario(const std::string& policy) {
  Scenario s = ToyScenario(64, 256, ToyModel(2, 1e9, 0, /*saved_per_token=*/4096));
  s.batches.assignment.policy = policy;
  s.batches.assignment.sub_batch = 32;
  s.batches.assignment.pool_factor = 8;
  s.batches.assignment.max_len = 20000;
  s.batches.measured_steps = 8;
  return s;
}

double MaxPeakActivation(const SimResult& r) {
  double m = 0;
  for (const RankStats& x : r.ranks) m = std::max(m, x.peak_activation_bytes);
  return m;
}

TEST(SimulateTest, BbsLowersImbalanceAndPeakActivationOnTheSameDraws) {
  auto random = Simulate(PolicyScenario("random"), Counterfactuals{}, NoTrace());
  auto bbs = Simulate(PolicyScenario("bbs"), Counterfactuals{}, NoTrace());
  ASSERT_TRUE(random.ok()) << random.status();
  ASSERT_TRUE(bbs.ok()) << bbs.status();
  EXPECT_GT(random->imbalance, 0.05);
  EXPECT_LT(bbs->imbalance, random->imbalance);
  EXPECT_LT(MaxPeakActivation(*bbs), MaxPeakActivation(*random));
  // Same samples, just regrouped: the FLOPs over the block are equal.
  double f_random = 0, f_bbs = 0;
  for (const RankStats& x : random->ranks) f_random += x.flops;
  for (const RankStats& x : bbs->ranks) f_bbs += x.flops;
  EXPECT_NEAR(f_bbs, f_random, 1e-9 * f_random);
}

TEST(SimulateTest, PaddedHasNoImbalanceButAHigherStepTime) {
  auto random = Simulate(PolicyScenario("random"), Counterfactuals{}, NoTrace());
  auto padded = Simulate(PolicyScenario("padded"), Counterfactuals{}, NoTrace());
  ASSERT_TRUE(random.ok()) << random.status();
  ASSERT_TRUE(padded.ok()) << padded.status();
  EXPECT_EQ(padded->imbalance, 0.0);
  EXPECT_GT(padded->step_mean_s, random->step_mean_s);
}

TEST(SimulateTest, GlobalBalancingBalancesAndAddsAnAllToAll) {
  auto random = Simulate(PolicyScenario("random"), Counterfactuals{}, NoTrace());
  auto global = Simulate(PolicyScenario("global"), Counterfactuals{}, NoTrace());
  ASSERT_TRUE(global.ok()) << global.status();
  EXPECT_LT(global->imbalance, random->imbalance);
  bool has_a2a = false;
  for (const CollectiveStats& c : global->collectives) has_a2a |= c.name == "sparse.global_a2a" && c.bytes > 0;
  EXPECT_TRUE(has_a2a);
}

Scenario FsdpScenario(const std::string& library) {
  Scenario s = ToyScenario(16, 64, ToyModel(6, 2e8, 200'000'000));
  s.plan.dense.fsdp_shard_group = 16;
  s.plan.collectives.library = library;
  s.batches.measured_steps = 2;
  return s;
}

TEST(SimulateTest, SmFreeCollectivesZeroContentionAndNeverRaiseStepTime) {
  auto based = Simulate(FsdpScenario("sm_based"), Counterfactuals{}, NoTrace());
  auto free = Simulate(FsdpScenario("sm_free"), Counterfactuals{}, NoTrace());
  ASSERT_TRUE(based.ok()) << based.status();
  ASSERT_TRUE(free.ok()) << free.status();
  double cont_based = 0, cont_free = 0;
  for (const RankStats& x : based->ranks) cont_based += x.contention_s;
  for (const RankStats& x : free->ranks) cont_free += x.contention_s;
  EXPECT_GT(cont_based, 0.0);
  EXPECT_EQ(cont_free, 0.0);
  EXPECT_LE(free->step_mean_s, based->step_mean_s);
  // The counterfactual switch does the same as the plan's library.
  Counterfactuals cf;
  cf.sm_free = true;
  auto switched = Simulate(FsdpScenario("sm_based"), cf, NoTrace());
  ASSERT_TRUE(switched.ok());
  EXPECT_EQ(switched->step_mean_s, free->step_mean_s);
}

// The copy engine is not free (with a measured or assumed kappa_copy_engine): SM-free
// collectives then slow compute by that kappa, less than SM-based ones do; the counterfactual
// sm_free (attribution rerun 2) is contention-free.
TEST(SimulateTest, CopyEngineCollectivesContendByTheirOwnKappa) {
  Scenario based_s = FsdpScenario("sm_based");
  Scenario free_s = FsdpScenario("sm_free");
  free_s.cluster.calibration.kappa_copy_engine = 0.06;
  auto based = Simulate(based_s, Counterfactuals{}, NoTrace());
  auto free = Simulate(free_s, Counterfactuals{}, NoTrace());
  ASSERT_TRUE(based.ok()) << based.status();
  ASSERT_TRUE(free.ok()) << free.status();
  double cont_based = 0, cont_free = 0;
  for (const RankStats& x : based->ranks) cont_based += x.contention_s;
  for (const RankStats& x : free->ranks) cont_free += x.contention_s;
  EXPECT_GT(cont_free, 0.0);
  EXPECT_LT(cont_free, cont_based);
  Counterfactuals cf;
  cf.sm_free = true;
  auto none = Simulate(free_s, cf, NoTrace());
  ASSERT_TRUE(none.ok());
  double cont_none = 0;
  for (const RankStats& x : none->ranks) cont_none += x.contention_s;
  EXPECT_EQ(cont_none, 0.0);
  EXPECT_LT(none->step_mean_s, free->step_mean_s);
}

// plan.collectives.flow: "none" prices every collective alone, "maxmin" shares links, so a step is
// never faster under maxmin.
TEST(SimulateTest, FlowNoneIsNeverSlowerThanMaxmin) {
  Scenario shared = FsdpScenario("sm_free");
  Scenario alone = shared;
  alone.plan.collectives.flow = "none";
  auto a = Simulate(shared, Counterfactuals{}, NoTrace());
  auto b = Simulate(alone, Counterfactuals{}, NoTrace());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_LE(b->step_mean_s, a->step_mean_s);
}

// Static memory: V2 keeps the MP shard (rows * (D * e_w + 4) / M); V3 keeps a 1/N
// sub-block of it, i.e. rows * (D * e_w + 4) / R, plus the transient gathered copy of the shard,
// rows * D * e_w / M. Toy table: 1e6 rows of 64 fp16 (128 B + 4 B rowwise state); R = 16, M = 4.
TEST(SimulateTest, FullyShardedStaticMemoryCountsTheGatheredCopy) {
  auto run = [](bool fully_sharded) {
    Scenario s = ToyScenario(16, 32, ToyModel(2, 1e6, 1000));
    s.plan.sparse.mp_group = 4;
    s.plan.sparse.fully_sharded = fully_sharded;
    s.plan.sparse.tables.assign(s.model->tables.size(), TableSharding{ShardingType::kRowWise});
    auto r = Simulate(s, Counterfactuals{}, NoTrace());
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->memory.static_bytes : -1.0;
  };
  const double v2 = run(false), v3 = run(true);
  const double row = 64 * 2.0 + 4.0, rows = 1e6;
  const double want = rows * row / 16 + rows * 64 * 2.0 / 4 - rows * row / 4;  // V3 - V2
  EXPECT_NEAR(v3 - v2, want, 1e-6 * rows * row);
}

TEST(SimulateTest, IdealNetworkIsNoSlowerThanTheRealOne) {
  auto real = Simulate(FsdpScenario("sm_based"), Counterfactuals{}, NoTrace());
  Counterfactuals cf;
  cf.ideal_network = true;
  auto ideal = Simulate(FsdpScenario("sm_based"), cf, NoTrace());
  ASSERT_TRUE(real.ok() && ideal.ok());
  EXPECT_LE(ideal->step_mean_s, real->step_mean_s);
}

TEST(SimulateTest, IdenticalInputsGiveIdenticalResults) {
  Scenario s = FsdpScenario("sm_based");
  s.noise.step_sigma = 0.05;
  s.noise.collective_jitter_sigma = 0.05;
  s.noise.slow_fraction = 0.1;
  s.noise.slow_factor = 1.3;
  SimOptions o;
  o.threads = 1;
  auto a = Simulate(s, Counterfactuals{}, o);
  o.threads = 2;
  auto b = Simulate(s, Counterfactuals{}, o);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->step_times_s, b->step_times_s);
  ASSERT_EQ(a->events, b->events);
  ASSERT_EQ(a->ranks.size(), b->ranks.size());
  for (size_t r = 0; r < a->ranks.size(); ++r) {
    EXPECT_EQ(a->ranks[r].work_s, b->ranks[r].work_s);
    EXPECT_EQ(a->ranks[r].exposed_comm_s, b->ranks[r].exposed_comm_s);
  }
  ASSERT_EQ(a->trace.size(), b->trace.size());
  for (size_t i = 0; i < a->trace.size(); ++i) {
    EXPECT_EQ(a->trace[i].start_s, b->trace[i].start_s);
    EXPECT_EQ(a->trace[i].name, b->trace[i].name);
  }
  EXPECT_FALSE(a->trace.empty());
}

// plan.pipeline.sparse_ahead = 1, TorchRec's semi-synchronous pipeline (scenario.h): each step looks
// up the next batch after its dense forward, so that batch's embedding all-to-all runs beside this
// step's dense backward instead of ahead of the dense forward.
Scenario PipelineScenario(int sparse_ahead, const std::string& library) {
  Scenario s = ToyScenario(16, 64, ToyModel(4, 2e6, 1000));
  s.plan.pipeline.sparse_ahead = sparse_ahead;
  s.plan.collectives.library = library;
  s.batches.warmup_steps = 1;
  s.batches.measured_steps = 3;
  return s;
}

const TraceEvent* FindEvent(const SimResult& r, int rank, const std::string& name, const std::string& category) {
  for (const TraceEvent& e : r.trace) {
    if (e.rank == rank && e.name == name && e.category == category) return &e;
  }
  return nullptr;
}

TEST(SimulateTest, SemiSyncPipelineRunsTheEmbeddingExchangeBesideTheDenseBackward) {
  auto sync = Simulate(PipelineScenario(0, "sm_free"), Counterfactuals{});
  auto semi = Simulate(PipelineScenario(1, "sm_free"), Counterfactuals{});
  ASSERT_TRUE(sync.ok()) << sync.status();
  ASSERT_TRUE(semi.ok()) << semi.status();
  // The traced (first measured) step of rank 0.
  for (const SimResult* r : {&*sync, &*semi}) {
    ASSERT_NE(FindEvent(*r, 0, "sparse.emb_a2a", "copy"), nullptr);
    ASSERT_NE(FindEvent(*r, 0, "L0.fwd", "compute"), nullptr);
    ASSERT_NE(FindEvent(*r, 0, "L3.fwd", "compute"), nullptr);
    ASSERT_NE(FindEvent(*r, 0, "L3.bwd", "compute"), nullptr);
  }
  const TraceEvent& a2a_sync = *FindEvent(*sync, 0, "sparse.emb_a2a", "copy");
  EXPECT_LE(a2a_sync.start_s + a2a_sync.duration_s, FindEvent(*sync, 0, "L0.fwd", "compute")->start_s);
  const TraceEvent& a2a = *FindEvent(*semi, 0, "sparse.emb_a2a", "copy");
  const TraceEvent& last_fwd = *FindEvent(*semi, 0, "L3.fwd", "compute");
  const TraceEvent& first_bwd = *FindEvent(*semi, 0, "L3.bwd", "compute");
  const TraceEvent& last_bwd = *FindEvent(*semi, 0, "L0.bwd", "compute");
  EXPECT_GE(FindEvent(*semi, 0, "sparse.lookup", "compute")->start_s, last_fwd.start_s + last_fwd.duration_s);
  EXPECT_LT(a2a.start_s, last_bwd.start_s + last_bwd.duration_s);  // beside the dense backward
  EXPECT_GT(a2a.start_s + a2a.duration_s, first_bwd.start_s);
  EXPECT_LT(semi->step_mean_s, sync->step_mean_s);
  // The next batch's embeddings stay resident.
  EXPECT_GT(semi->memory.static_bytes, sync->memory.static_bytes);
}

TEST(SimulateTest, SemiSyncPipelineLetsContentionReachTheEmbeddingExchange) {
  // Overlapped with the dense backward, an SM-based embedding all-to-all slows compute, so SM-free
  // collectives save more than when the exchange runs alone.
  auto saved = [](int ahead) {
    auto based = Simulate(PipelineScenario(ahead, "sm_based"), Counterfactuals{}, NoTrace());
    auto free = Simulate(PipelineScenario(ahead, "sm_free"), Counterfactuals{}, NoTrace());
    EXPECT_TRUE(based.ok() && free.ok());
    return based.ok() && free.ok() ? based->step_mean_s - free->step_mean_s : 0.0;
  };
  EXPECT_GT(saved(1), saved(0));
}

TEST(SimulateTest, MissingModelIsANamedError) {
  Scenario s = ToyScenario(4, 8, nullptr);
  auto r = Simulate(s, Counterfactuals{}, NoTrace());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model"), std::string::npos);
}

// The checkpoint order (memory_model.h) is the stable sort's, whatever order it starts from:
// regions with equal ratios (repeated values, zero bytes, zero seconds floored at 1e-30) keep index
// order, and a start that is sorted, reversed or shuffled gives the same result.
// Two regions, each a GEMM (few saved bytes per second of recompute) and a pointwise op that saves
// three times the GEMM's bytes and costs almost nothing to re-run.
std::shared_ptr<model::ModelGraph> GemmAndPointwiseModel() {
  auto model = ToyModel(2, 1e9, 1000, /*saved_per_token=*/100);
  std::vector<model::Op> ops;
  for (model::Op op : model->ops) {
    op.saved.recompute = model::RecomputeClass::kLinear;
    ops.push_back(op);
    model::Op pw = op;
    pw.name = op.region + ".act";
    pw.kind = model::OpKind::kPointwise;
    pw.params = 0;
    pw.local_mfu = false;
    pw.flops.fwd = {0, 0, 1, 0};
    pw.flops.bwd = {0, 0, 1, 0};
    pw.bytes.fwd = {0, 0, 8, 0};
    pw.bytes.bwd = {0, 0, 16, 0};
    pw.saved.bytes = {0, 0, 300, 0};
    pw.saved.recompute = model::RecomputeClass::kPointwise;
    ops.push_back(pw);
  }
  model->ops = ops;
  return model;
}

TEST(MemoryPlanTest, PerRegionDropsCheapPiecesFirstAndUniformWholeRegions) {
  Scenario s = ToyScenario(1, 1, GemmAndPointwiseModel());
  absl::StatusOr<RankGroups> groups = BuildRankGroups(s.plan, 1);
  ASSERT_TRUE(groups.ok()) << groups.status();
  absl::StatusOr<StepTemplate> tpl = BuildStepTemplate(s, *groups);
  ASSERT_TRUE(tpl.ok()) << tpl.status();
  ASSERT_EQ(tpl->regions.size(), 2u);
  ASSERT_EQ(tpl->pieces.size(), 4u);  // per region: the GEMM's piece and the pointwise op's
  constexpr double N = 1000;  // saved: GEMM 1e5, pointwise 3e5 bytes per region; 8e5 in all
  std::vector<double> stats(tpl->layout.size(), 0.0);
  stats[StatLayout::kOne] = 1;
  stats[StatLayout::kB] = 1;
  stats[tpl->layout.N(0)] = N;
  // A budget of 6.5e5: dropping one pointwise piece leaves 5e5 kept + 3e5 rebuilt, still over;
  // dropping both leaves 2e5 + 3e5. Whole regions: 4e5 + 4e5, then 0 + 4e5.
  s.cluster.gpu.hbm_bytes = s.plan.memory.reserve_bytes + tpl->static_bytes + 6.5e5;
  for (const std::string policy : {"per_region", "uniform"}) {
    s.plan.memory.budget_policy = policy;
    const MemoryPlanOutput mem = PlanMemory(*tpl, s, stats, 1, 1, false);
    ASSERT_EQ(mem.checkpointed.size(), 4u);
    EXPECT_TRUE(mem.fit.fits) << policy;
    for (size_t p = 0; p < tpl->pieces.size(); ++p) {
      const bool pointwise = tpl->pieces[p].recompute == model::RecomputeClass::kPointwise;
      EXPECT_EQ(mem.checkpointed[p], policy == "uniform" || pointwise ? 1 : 0) << policy << " piece " << p;
    }
    EXPECT_DOUBLE_EQ(mem.peak_activation_bytes[0], policy == "uniform" ? 4e5 : 5e5) << policy;
    EXPECT_DOUBLE_EQ(mem.fit.recomputed_fraction, policy == "uniform" ? 1.0 : 0.75) << policy;
  }
}

TEST(SimulateTest, DroppingCheapPiecesCostsLessThanWholeRegions) {
  Scenario s = ToyScenario(8, 16, GemmAndPointwiseModel());
  s.batches.measured_steps = 2;
  s.plan.memory.budget_policy = "none";
  absl::StatusOr<SimResult> free_run = Simulate(s, Counterfactuals{}, NoTrace());
  ASSERT_TRUE(free_run.ok()) << free_run.status();
  double most = 0;
  for (const RankStats& x : free_run->ranks) most = std::max(most, x.peak_activation_bytes);
  ASSERT_GT(most, 0);
  // Room for 70% of the heaviest rank-step's saved bytes: the pointwise pieces (75%) cover it.
  s.cluster.gpu.hbm_bytes = s.plan.memory.reserve_bytes + free_run->memory.static_bytes + 0.7 * most;
  s.plan.memory.budget_policy = "per_region";
  absl::StatusOr<SimResult> per_region = Simulate(s, Counterfactuals{}, NoTrace());
  s.plan.memory.budget_policy = "uniform";
  absl::StatusOr<SimResult> uniform = Simulate(s, Counterfactuals{}, NoTrace());
  ASSERT_TRUE(per_region.ok() && uniform.ok());
  EXPECT_TRUE(per_region->memory.fits);
  EXPECT_TRUE(uniform->memory.fits);
  EXPECT_GT(per_region->step_mean_s, free_run->step_mean_s);  // the pointwise ops run again
  // The GEMMs' forward (1e9 FLOPs per token) dwarfs the pointwise ops' (8 bytes per token).
  EXPECT_LT(per_region->step_mean_s - free_run->step_mean_s, 0.01 * (uniform->step_mean_s - free_run->step_mean_s));
}

TEST(MemoryPlanTest, CheckpointOrderIsTheStableSortFromAnyStart) {
  std::mt19937_64 rng(20261201);
  const double values[] = {0.0, 1.0, 2.0, 3.0, 0.5, 1e-40};
  for (int trial = 0; trial < 300; ++trial) {
    const int U = 1 + static_cast<int>(rng() % 80);
    std::vector<double> saved(U), secs(U);
    for (int u = 0; u < U; ++u) {
      // A few repeated values make exact ties; the rest are arbitrary.
      saved[u] = rng() % 3 == 0 ? values[rng() % 6] : std::ldexp(static_cast<double>(rng() % 1000000), -10);
      secs[u] = rng() % 3 == 0 ? values[rng() % 6] : std::ldexp(static_cast<double>(rng() % 1000000), -30);
    }
    std::vector<int> want(U);
    std::iota(want.begin(), want.end(), 0);
    std::stable_sort(want.begin(), want.end(), [&](int a, int b) {
      return saved[a] * std::max(secs[b], 1e-30) > saved[b] * std::max(secs[a], 1e-30);
    });
    std::vector<int> start(U);
    std::iota(start.begin(), start.end(), 0);
    for (int kind = 0; kind < 3; ++kind) {
      std::vector<int> order = start;
      if (kind == 1) std::reverse(order.begin(), order.end());
      if (kind == 2) std::shuffle(order.begin(), order.end(), rng);
      CheckpointOrder(saved, secs, order);
      ASSERT_EQ(order, want) << "trial " << trial << " start kind " << kind;
    }
  }
}

}  // namespace
}  // namespace gemtb::sim
