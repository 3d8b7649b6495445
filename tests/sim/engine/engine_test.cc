// Spec/simulator.md §6.1 through the event engine: a lone collective ends at its closed form, and
// delaying one member delays everyone's end by exactly that much.
#include "sim/engine/engine.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "sim/engine/collective_timing.h"
#include "tests/sim/engine/test_scenario.h"

namespace gemtb::sim {
namespace {

// Each rank: a compute task of B_r * 1 ms, then one collective over all ranks (contiguous group).
StepTemplate OneCollective(int world, CollectiveOp op, double bytes) {
  StepTemplate t;
  t.layout.sequences = 0;
  GroupLayout all;
  all.size = world;
  all.stride = 1;
  all.count = 1;
  t.layouts.assign(kNumLayouts, all);
  TaskTemplate pre;
  pre.name = "pre";
  pre.time.coef = {0.0, 1e-3, 0.0};
  TaskTemplate coll;
  coll.name = "coll";
  coll.collective = true;
  coll.group_class = GroupClass::kDenseShard;
  coll.layout = 0;
  coll.stream = CommStream(GroupClass::kDenseShard);
  coll.op = op;
  coll.bytes.coef = {bytes, 0.0, 0.0};
  coll.deps = {0};
  t.tasks = {pre, coll};
  t.stream_tasks.assign(kNumStreams, {});
  t.stream_tasks[kComputeStream] = {0};
  t.stream_tasks[coll.stream] = {1};
  t.dependents = {{1}, {}};
  t.next_step_dependents = {{}, {}};
  return t;
}

double RunEnd(const StepTemplate& t, const CollectiveTiming& timing, const std::vector<double>& batch) {
  const int world = static_cast<int>(batch.size());
  std::vector<double> stats;
  for (double b : batch) stats.insert(stats.end(), {1.0, b, 0.0});
  EngineInput in;
  in.tpl = &t;
  in.timing = &timing;
  in.world = world;
  in.steps = 1;
  in.stats = &stats;
  auto out = RunEngine(in);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? out->step_end_s[0] : -1;
}

TEST(EngineTest, LoneRingAllGatherEqualsClosedForm) {
  const int p = 8;
  const double S = 256.0 * 1024 * 1024;
  const Cluster cluster = testing::TestCluster(p);
  CollectivesPlan plan;
  plan.algo["all_gather"] = "ring";
  plan.algo["all_reduce"] = "ring";
  const StepTemplate ag = OneCollective(p, CollectiveOp::kAllGather, S);
  auto timing = CollectiveTiming::Create(cluster, plan, ag.layouts);
  ASSERT_TRUE(timing.ok()) << timing.status();
  // One NVLink host: (p-1) alpha + (p-1)/p S / B_eff.
  const double alpha = 1.87e-6, bw = 370e9;
  const double want_ag = (p - 1) * alpha + (p - 1.0) / p * S / bw;
  const double got_ag = RunEnd(ag, *timing, std::vector<double>(p, 0.0));
  EXPECT_NEAR(got_ag, want_ag, 1e-9 * want_ag);
  const StepTemplate ar = OneCollective(p, CollectiveOp::kAllReduce, S);
  const double want_ar = 2 * (p - 1) * alpha + 2 * (p - 1.0) / p * S / bw;
  const double got_ar = RunEnd(ar, *timing, std::vector<double>(p, 0.0));
  EXPECT_NEAR(got_ar, want_ar, 1e-9 * want_ar);
}

TEST(EngineTest, StragglerDelaysEveryRankInTheCollectiveByExactlyItsDelay) {
  const int p = 16;
  const Cluster cluster = testing::TestCluster(p);
  CollectivesPlan plan;
  const StepTemplate t = OneCollective(p, CollectiveOp::kAllReduce, 64e6);
  auto timing = CollectiveTiming::Create(cluster, plan, t.layouts);
  ASSERT_TRUE(timing.ok()) << timing.status();
  std::vector<double> batch(p, 2.0);  // every rank computes 2 ms first
  const double base = RunEnd(t, *timing, batch);
  for (int late : {0, 5, 15}) {
    std::vector<double> delayed = batch;
    delayed[late] += 3.0;  // 3 ms more on one rank
    const double end = RunEnd(t, *timing, delayed);
    EXPECT_NEAR(end - base, 3e-3, 1e-12) << "late rank " << late;
  }
}

}  // namespace
}  // namespace gemtb::sim
