// Spec/simulator.md §6.1 through the event engine: a lone collective ends at its closed form, and
// delaying one member delays everyone's end by exactly that much.
#include "sim/engine/engine.h"

#include <cmath>
#include <string>
#include <utility>
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

// An all-to-allv whose bytes grow with each rank's batch: with a2av_end "all" every member ends with
// the heaviest; with "per_rank" each member leaves when its own bytes are through (spec §2.4).
TEST(EngineTest, PerRankAllToAllvEndsEachMemberAtItsOwnDuration) {
  const int p = 8;
  const Cluster cluster = testing::TestCluster(p);
  CollectivesPlan plan;
  StepTemplate t = OneCollective(p, CollectiveOp::kAllToAll, 0.0);
  t.tasks[1].a2av = true;
  t.tasks[1].bytes.coef = {0.0, 64e6, 0.0};  // 64 MB per unit of B
  auto timing = CollectiveTiming::Create(cluster, plan, t.layouts);
  ASSERT_TRUE(timing.ok()) << timing.status();
  std::vector<double> stats;
  for (int r = 0; r < p; ++r) stats.insert(stats.end(), {1.0, 1.0 + r, 0.0});
  auto run = [&](bool per_rank) {
    EngineInput in;
    in.tpl = &t;
    in.timing = &*timing;
    in.world = p;
    in.steps = 1;
    in.stats = &stats;
    in.a2av_per_rank = per_rank;
    in.traced.assign(p, 1);
    in.trace_step = 0;
    auto out = RunEngine(in);
    EXPECT_TRUE(out.ok()) << out.status();
    std::vector<double> dur(p, -1.0);
    for (const TraceEvent& e : out->trace) {
      if (e.stream == t.tasks[1].stream && e.category != "wait") dur[e.rank] = e.duration_s;
    }
    return std::make_pair(out->step_end_s[0], dur);
  };
  const auto [end_all, dur_all] = run(false);
  const auto [end_per_rank, dur_per_rank] = run(true);
  const double heaviest = timing->Cost(0, CollectiveOp::kAllToAll, 64e6 * p, true).duration_s;
  for (int r = 0; r < p; ++r) {
    const double own = timing->Cost(0, CollectiveOp::kAllToAll, 64e6 * (1 + r), true).duration_s;
    EXPECT_NEAR(dur_all[r], heaviest, 1e-12 * heaviest) << "rank " << r;
    EXPECT_NEAR(dur_per_rank[r], own, 1e-12 * own) << "rank " << r;
    if (r + 1 < p) {
      EXPECT_LT(dur_per_rank[r], dur_per_rank[r + 1]);
    }
  }
  // The heaviest member arrives last and needs longest: the step ends at the same time.
  EXPECT_EQ(end_all, end_per_rank);
}

}  // namespace
}  // namespace gemtb::sim
