// The event engine: a lone collective ends at its closed form, and
// delaying one member delays everyone's end by exactly that much; concurrent collectives on one
// tier share it (processor sharing).
#include <array>

#include "sim/engine/engine.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "sim/engine/collective_timing.h"
#include "tests/sim/engine/test_scenario.h"

namespace gemtb::sim {
namespace {

// `count` groups of `size` consecutive ranks.
GroupLayout Contiguous(int size, int count = 1) {
  GroupLayout l;
  l.size = size;
  l.count = count;
  return l;
}

// All-gathers as rings (the closed forms below are the ring's).
CollectivesPlan RingAllGather() {
  CollectivesPlan plan;
  plan.algo["all_gather"] = "ring";
  return plan;
}

// Each rank: a compute task of B_r * 1 ms, then one collective over all ranks (contiguous group).
StepTemplate OneCollective(int world, CollectiveOp op, double bytes) {
  StepTemplate t;
  t.layout.sequences = 0;
  t.layouts.assign(kNumLayouts, Contiguous(world));
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

// OneCollective plus a second collective of `bytes2` on another stream over `layout2`'s groups,
// also right after the compute task: the two run concurrently.
StepTemplate TwoCollectives(int world, double bytes1, double bytes2, GroupLayout layout2) {
  StepTemplate t = OneCollective(world, CollectiveOp::kAllGather, bytes1);
  t.layouts[1] = layout2;
  TaskTemplate second = t.tasks[1];
  second.name = "coll2";
  second.group_class = GroupClass::kExpertShard;
  second.layout = 1;
  second.stream = CommStream(GroupClass::kExpertShard);
  second.bytes.coef = {bytes2, 0.0, 0.0};
  t.tasks.push_back(second);
  t.stream_tasks[second.stream] = {2};
  t.dependents = {{1, 2}, {}, {}};
  t.next_step_dependents = {{}, {}, {}};
  return t;
}

// Appends compute task `post` after task 0 ("pre"), on the compute stream, beside the collective(s).
void AddPostTask(StepTemplate& t, TaskTemplate post) {
  post.name = "post";
  post.deps = {0};
  const int idx = static_cast<int>(t.tasks.size());
  t.tasks.push_back(post);
  t.stream_tasks[kComputeStream].push_back(idx);
  t.dependents[0].push_back(idx);
  t.dependents.emplace_back();
  t.next_step_dependents.emplace_back();
}

// One step of `t` over world = stats.size() / 3 ranks (stats: three per rank); `traced`: every
// rank's trace of that step.
EngineInput OneStep(const StepTemplate& t, const CollectiveTiming& timing, const std::vector<double>& stats,
                    bool traced = true) {
  EngineInput in;
  in.tpl = &t;
  in.timing = &timing;
  in.world = static_cast<int>(stats.size() / 3);
  in.steps = 1;
  in.stats = &stats;
  if (traced) {
    in.traced.assign(in.world, 1);
    in.trace_step = 0;
  }
  return in;
}

double RunEnd(const StepTemplate& t, const CollectiveTiming& timing, const std::vector<double>& batch,
              bool sharing = true) {
  std::vector<double> stats;
  for (double b : batch) stats.insert(stats.end(), {1.0, b, 0.0});
  EngineInput in = OneStep(t, timing, stats, /*traced=*/false);
  in.processor_sharing = sharing;
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

// Strided groups, of power-of-two and other sizes and strides: every member of a group ends when
// its heaviest member's all-gather does, and no rank waits for another group.
TEST(EngineTest, StridedGroupsRendezvousWithTheirOwnMembersOnly) {
  struct Case {
    int world, size, stride;
  };
  for (const Case& c : {Case{16, 4, 2}, Case{24, 3, 4}, Case{24, 2, 3}, Case{16, 16, 1}}) {
    const Cluster cluster = testing::TestCluster(c.world);
    GroupLayout l;
    l.size = c.size;
    l.stride = c.stride;
    l.count = c.world / c.size;
    StepTemplate t = OneCollective(c.world, CollectiveOp::kAllGather, 0.0);
    t.layouts[0] = l;
    t.tasks[1].bytes.coef = {0.0, 16e6, 0.0};  // 16 MB per unit of B
    auto timing = CollectiveTiming::Create(cluster, CollectivesPlan{}, t.layouts);
    ASSERT_TRUE(timing.ok()) << timing.status();
    std::vector<double> batch(c.world), stats;
    for (int r = 0; r < c.world; ++r) batch[r] = 1.0 + (r * 7) % c.world;  // uneven, not monotone
    for (double b : batch) stats.insert(stats.end(), {1.0, b, 0.0});
    EngineInput in = OneStep(t, *timing, stats);
    auto out = RunEngine(in);
    ASSERT_TRUE(out.ok()) << out.status();
    std::vector<double> end(c.world, -1.0);
    for (const TraceEvent& e : out->trace) {
      if (e.stream == t.tasks[1].stream && e.category != "wait") end[e.rank] = e.start_s + e.duration_s;
    }
    // Groups written out: blocks of size * stride consecutive ranks, in each block `stride` groups
    // whose members are `stride` apart.
    int groups = 0;
    for (int block = 0; block < c.world; block += c.size * c.stride) {
      for (int first = block; first < block + c.stride; ++first, ++groups) {
        double heaviest = 0;
        for (int q = 0; q < c.size; ++q) heaviest = std::max(heaviest, batch[first + q * c.stride]);
        const double want = heaviest * 1e-3 + (*timing).Cost(0, CollectiveOp::kAllGather, heaviest * 16e6, false).duration_s;
        for (int q = 0; q < c.size; ++q) {
          EXPECT_NEAR(end[first + q * c.stride], want, 1e-12)
              << "world " << c.world << " size " << c.size << " stride " << c.stride << " rank " << first + q * c.stride;
        }
      }
    }
    EXPECT_EQ(groups, l.count);
  }
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
// the heaviest; with "per_rank" each member leaves when its own bytes are through.
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
    EngineInput in = OneStep(t, *timing, stats);
    in.a2av_per_rank = per_rank;
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

// Two collectives over the same 8 ranks of one host start together. Sharing NVLink, each runs at half
// rate while both run: the shorter (lone duration d1) ends at 2*d1, the longer (d2) then runs alone
// and ends at 2*d1 + (d2 - d1) = d1 + d2. Without sharing the step ends at d2.
TEST(EngineTest, ConcurrentCollectivesOnOneTierShareItLoneOnesKeepTheirCost) {
  const int p = 8;
  const Cluster cluster = testing::TestCluster(p);
  const CollectivesPlan plan = RingAllGather();
  const GroupLayout all = Contiguous(p);
  const double S1 = 64.0 * 1024 * 1024, S2 = 256.0 * 1024 * 1024;
  const StepTemplate t = TwoCollectives(p, S1, S2, all);
  auto timing = CollectiveTiming::Create(cluster, plan, t.layouts);
  ASSERT_TRUE(timing.ok()) << timing.status();
  const double alpha = 1.87e-6, bw = 370e9;
  const double d1 = (p - 1) * alpha + (p - 1.0) / p * S1 / bw;
  const double d2 = (p - 1) * alpha + (p - 1.0) / p * S2 / bw;
  const std::vector<double> zero(p, 0.0);
  EXPECT_NEAR(RunEnd(t, *timing, zero), d1 + d2, 1e-9 * (d1 + d2));
  EXPECT_NEAR(RunEnd(t, *timing, zero, /*sharing=*/false), d2, 1e-9 * d2);
  // Equal sizes: both end at twice the lone duration.
  const StepTemplate same = TwoCollectives(p, S2, S2, all);
  EXPECT_NEAR(RunEnd(same, *timing, zero), 2 * d2, 1e-9 * d2);
  // A lone collective (the first one alone) keeps its closed form with sharing on.
  const StepTemplate lone = OneCollective(p, CollectiveOp::kAllGather, S1);
  EXPECT_NEAR(RunEnd(lone, *timing, zero), d1, 1e-9 * d1);
}

// The rate is set by the most-loaded member. The second collective is over groups of 4 (ranks 0-3 and
// 4-7); ranks 4-7 compute t0 first, so group 0's starts at 0 and the host-wide one and group 1's at t0.
//   0..t0: group 0's runs alone (rate 1), h - t0 left.
//   from t0: every rank holds two collectives: all three run at 1/2. Group 0's ends at t0 + 2(h - t0).
//   Ranks 0-3 then hold one, but ranks 4-7 still two, so the host-wide one stays at 1/2 until group
//   1's ends at t0 + 2h (h of its work done), then runs alone: it ends at t0 + 2h + (d - h).
TEST(EngineTest, SharingRateFollowsTheMostLoadedMember) {
  const int p = 8;
  const Cluster cluster = testing::TestCluster(p);
  const CollectivesPlan plan = RingAllGather();
  const GroupLayout half = Contiguous(4, 2);
  const double S = 256.0 * 1024 * 1024, S_half = 16.0 * 1024 * 1024;
  const StepTemplate t = TwoCollectives(p, S, S_half, half);
  auto timing = CollectiveTiming::Create(cluster, plan, t.layouts);
  ASSERT_TRUE(timing.ok()) << timing.status();
  const double alpha = 1.87e-6, bw = 370e9;
  const double d = (p - 1) * alpha + (p - 1.0) / p * S / bw;
  const double h = 3 * alpha + 3.0 / 4 * S_half / bw;
  // All start at 0: the host-wide one runs at 1/2 until both halves end at 2h, then alone.
  EXPECT_NEAR(RunEnd(t, *timing, std::vector<double>(p, 0.0)), d + h, 1e-9 * d);
  std::vector<double> late(p, 0.0);
  for (int r = 4; r < p; ++r) late[r] = 0.01;  // 10 us of compute (B_r * 1 ms)
  const double t0 = 1e-5;
  ASSERT_LT(t0, h);
  EXPECT_NEAR(RunEnd(t, *timing, late), t0 + 2 * h + (d - h), 1e-9 * d);
}

// A collective loads the outermost tier it spans: one across two hosts (the zone tier) and one inside
// each host (NVLink) do not slow each other; two across hosts do.
TEST(EngineTest, CollectivesOnDifferentTiersDoNotShare) {
  const int p = 16;
  const Cluster cluster = testing::TestCluster(p);
  const CollectivesPlan plan = RingAllGather();
  const GroupLayout host = Contiguous(8, 2);
  const GroupLayout world = Contiguous(p);
  const double S = 256.0 * 1024 * 1024;
  const StepTemplate mixed = TwoCollectives(p, S, S, host);
  auto timing = CollectiveTiming::Create(cluster, plan, mixed.layouts);
  ASSERT_TRUE(timing.ok()) << timing.status();
  const double across = timing->Cost(0, CollectiveOp::kAllGather, S, false).duration_s;
  const double inside = timing->Cost(1, CollectiveOp::kAllGather, S, false).duration_s;
  ASSERT_GT(across, inside);
  const std::vector<double> zero(p, 0.0);
  EXPECT_NEAR(RunEnd(mixed, *timing, zero), across, 1e-9 * across);
  const StepTemplate both = TwoCollectives(p, S, S, world);
  auto timing2 = CollectiveTiming::Create(cluster, plan, both.layouts);
  ASSERT_TRUE(timing2.ok()) << timing2.status();
  EXPECT_NEAR(RunEnd(both, *timing2, zero), 2 * across, 1e-9 * across);
}

// plan.collectives.flow maxmin: a collective across zones and one across hosts inside a zone both
// leave through the members' NICs, so they share them (each at half rate while both run); flow none
// prices each at its lone cost.
TEST(EngineTest, CrossZoneAndInZoneCollectivesShareTheNic) {
  const int p = 64;  // 8 hosts, 2 zones of 32
  const Cluster cluster = testing::TestCluster(p);
  const CollectivesPlan plan = RingAllGather();
  const GroupLayout zone = Contiguous(32, 2);
  const double S = 256.0 * 1024 * 1024;
  const StepTemplate t = TwoCollectives(p, S, S, zone);
  auto timing = CollectiveTiming::Create(cluster, plan, t.layouts);
  ASSERT_TRUE(timing.ok()) << timing.status();
  ASSERT_EQ(timing->shape(0).zones, 2);
  ASSERT_EQ(timing->shape(1).zones, 1);
  const double across = timing->Cost(0, CollectiveOp::kAllGather, S, false).duration_s;
  const double inside = timing->Cost(1, CollectiveOp::kAllGather, S, false).duration_s;
  ASSERT_GT(across, inside);
  const std::vector<double> zero(p, 0.0);
  // Both at 1/2 until the in-zone one ends at 2 * inside, then the cross-zone one alone.
  const double shared = RunEnd(t, *timing, zero);
  EXPECT_NEAR(shared, inside + across, 1e-9 * across);
  EXPECT_GT(shared, across);
  EXPECT_NEAR(RunEnd(t, *timing, zero, /*sharing=*/false), across, 1e-9 * across);
}

// Contention per op: a collective of op o slows compute by 1 + kappa[o]; the copy
// engine's kappa applies the same way.
TEST(EngineTest, ContentionTakesTheRunningCollectivesOwnKappa) {
  const int p = 8;
  const Cluster cluster = testing::TestCluster(p);
  const CollectivesPlan plan = RingAllGather();
  // "post" (1 ms of compute) on the compute stream overlaps the all-gather.
  StepTemplate t = OneCollective(p, CollectiveOp::kAllGather, 4e9);
  AddPostTask(t, t.tasks[0]);  // 1 ms, as "pre"
  auto timing = CollectiveTiming::Create(cluster, plan, t.layouts);
  ASSERT_TRUE(timing.ok()) << timing.status();
  auto post_time = [&](std::array<double, 5> kappa) {
    std::vector<double> stats;
    for (int r = 0; r < p; ++r) stats.insert(stats.end(), {1.0, 1.0, 0.0});
    EngineInput in = OneStep(t, *timing, stats);
    in.kappa = kappa;
    auto out = RunEngine(in);
    EXPECT_TRUE(out.ok()) << out.status();
    for (const TraceEvent& e : out->trace) {
      if (e.rank == 0 && e.name == "post") return e.duration_s;
    }
    return -1.0;
  };
  const int ag = static_cast<int>(CollectiveOp::kAllGather);
  std::array<double, 5> only_ag{}, only_ar{};
  only_ag[ag] = 0.06;
  only_ar[static_cast<int>(CollectiveOp::kAllReduce)] = 0.5;
  EXPECT_NEAR(post_time({}), 1e-3, 1e-12);
  EXPECT_NEAR(post_time(only_ag), 1.06e-3, 1e-12);
  EXPECT_NEAR(post_time(only_ar), 1e-3, 1e-12);  // no all-reduce runs
}

// A collective that ends inside a compute task slows only the part it overlaps: d at 1 + kappa, then
// the rest at full rate. The task's end is moved lazily: one extra event per rank (its queued end
// fires early once and re-queues), not one per rate change.
TEST(EngineTest, CollectiveEndingInsideComputeSlowsOnlyTheOverlap) {
  const int p = 8;
  const Cluster cluster = testing::TestCluster(p);
  const CollectivesPlan plan = RingAllGather();
  StepTemplate t = OneCollective(p, CollectiveOp::kAllGather, 4e6);
  AddPostTask(t, t.tasks[0]);  // 1 ms, as "pre"
  auto timing = CollectiveTiming::Create(cluster, plan, t.layouts);
  ASSERT_TRUE(timing.ok()) << timing.status();
  struct Seen { double post = -1, coll = -1; uint64_t events = 0; };
  auto run = [&](double kappa) {
    std::vector<double> stats;
    for (int r = 0; r < p; ++r) stats.insert(stats.end(), {1.0, 1.0, 0.0});
    EngineInput in = OneStep(t, *timing, stats);
    in.kappa.fill(kappa);
    auto out = RunEngine(in);
    EXPECT_TRUE(out.ok()) << out.status();
    Seen seen;
    seen.events = out->events;
    for (const TraceEvent& e : out->trace) {
      if (e.rank != 0) continue;
      if (e.name == "post") seen.post = e.duration_s;
      if (e.name == "coll" && e.category == "comm") seen.coll = e.duration_s;
    }
    return seen;
  };
  const Seen lone = run(0.0), slowed = run(0.06);
  const double d = slowed.coll;
  ASSERT_GT(d, 0.0);
  ASSERT_LT(d, 1e-3);  // the collective ends inside "post"
  EXPECT_NEAR(lone.post, 1e-3, 1e-12);
  EXPECT_NEAR(slowed.post, d + (1e-3 - d / 1.06), 1e-12);
  EXPECT_EQ(slowed.events, lone.events + p);
}

// SM contention: each SM-based collective takes s of the n SMs, kappa = s / (n - s); a
// compute task overlapping k of them runs on n - k*s SMs: slowed by n / (n - k*s).
TEST(EngineTest, ComputeUnderConcurrentSmBasedCollectivesLosesEachOnesSms) {
  const int p = 8;
  const Cluster cluster = testing::TestCluster(p);
  CollectivesPlan plan;
  const double S = 256.0 * 1024 * 1024;
  const GroupLayout all = Contiguous(p);
  auto slowdown = [&](int collectives) {
    StepTemplate t = collectives == 1 ? OneCollective(p, CollectiveOp::kAllGather, S) : TwoCollectives(p, S, S, all);
    // A 10 us compute task after "pre", beside the collective(s).
    TaskTemplate post;
    post.time.coef = {1e-5, 0.0, 0.0};
    AddPostTask(t, post);
    auto timing = CollectiveTiming::Create(cluster, plan, t.layouts);
    EXPECT_TRUE(timing.ok()) << timing.status();
    std::vector<double> stats;
    for (int r = 0; r < p; ++r) stats.insert(stats.end(), {1.0, 0.0, 0.0});
    EngineInput in = OneStep(t, *timing, stats);
    in.kappa.fill(24.0 / 108.0);
    auto out = RunEngine(in);
    EXPECT_TRUE(out.ok()) << out.status();
    for (const TraceEvent& e : out->trace) {
      if (e.rank == 0 && e.name == "post") return e.duration_s / 1e-5;
    }
    return -1.0;
  };
  EXPECT_NEAR(slowdown(1), 132.0 / 108.0, 1e-9);
  EXPECT_NEAR(slowdown(2), 132.0 / 84.0, 1e-9);
}

// A compute task's time, and a collective's batch-dependent bytes, come from a per-rank-step table
// of the distinct functions, holding at most time_table_functions of them; a task of another
// evaluates its own. The table is a cache: every output is the same bytes with all, some or none of
// the functions in it (three steps, two distinct time functions over three compute tasks, a
// collective whose bytes follow the batch, per-rank batches and noise, a copy-engine kappa so that
// rates change mid-task).
TEST(EngineTest, TimeTableSizeChangesNoOutput) {
  const int p = 8, steps = 3;
  const Cluster cluster = testing::TestCluster(p);
  StepTemplate t = OneCollective(p, CollectiveOp::kAllGather, 4e6);
  t.tasks[1].bytes.coef = {4e6, 3e6, 0.0};  // the all-gather's bytes grow with the rank's batch
  TaskTemplate other;
  other.time.coef = {2e-4, 3e-4, 0.0};
  AddPostTask(t, other);
  AddPostTask(t, t.tasks[0]);  // the same function as "pre"
  auto timing = CollectiveTiming::Create(cluster, RingAllGather(), t.layouts);
  ASSERT_TRUE(timing.ok()) << timing.status();
  std::vector<double> stats, noise;
  for (int s = 0; s < steps; ++s) {
    for (int r = 0; r < p; ++r) {
      stats.insert(stats.end(), {1.0, 0.5 + 0.37 * ((r * 7 + s * 3) % 5), 0.0});
      noise.push_back(1.0 + 0.01 * ((r + 2 * s) % 3));
    }
  }
  auto run = [&](int functions) {
    EngineInput in;
    in.tpl = &t;
    in.timing = &*timing;
    in.world = p;
    in.steps = steps;
    in.warmup = 1;
    in.stats = &stats;
    in.noise = &noise;
    in.kappa.fill(0.06);
    in.copy_engine = true;
    in.traced.assign(p, 1);
    in.trace_step = 1;
    in.time_table_functions = functions;
    auto out = RunEngine(in);
    EXPECT_TRUE(out.ok()) << out.status();
    return *std::move(out);
  };
  const EngineOutput all = run(128);
  for (int functions : {1, 0}) {
    SCOPED_TRACE(functions);
    const EngineOutput some = run(functions);
    EXPECT_EQ(some.events, all.events);
    EXPECT_EQ(some.step_end_s, all.step_end_s);
    EXPECT_EQ(some.step_work_s, all.step_work_s);
    EXPECT_EQ(some.comm_s, all.comm_s);
    ASSERT_EQ(some.ranks.size(), all.ranks.size());
    for (size_t r = 0; r < all.ranks.size(); ++r) {
      EXPECT_EQ(some.ranks[r].compute_s, all.ranks[r].compute_s);
      EXPECT_EQ(some.ranks[r].contention_s, all.ranks[r].contention_s);
      EXPECT_EQ(some.ranks[r].work_s, all.ranks[r].work_s);
      EXPECT_EQ(some.ranks[r].exposed_comm_s, all.ranks[r].exposed_comm_s);
      EXPECT_EQ(some.ranks[r].wait_s, all.ranks[r].wait_s);
      EXPECT_EQ(some.ranks[r].recompute_s, all.ranks[r].recompute_s);
      EXPECT_EQ(some.ranks[r].nonlayer_compute_s, all.ranks[r].nonlayer_compute_s);
    }
    ASSERT_EQ(some.trace.size(), all.trace.size());
    for (size_t k = 0; k < all.trace.size(); ++k) {
      EXPECT_EQ(some.trace[k].start_s, all.trace[k].start_s);
      EXPECT_EQ(some.trace[k].duration_s, all.trace[k].duration_s);
    }
    ASSERT_EQ(some.sites.size(), all.sites.size());
    for (size_t k = 0; k < all.sites.size(); ++k) {
      EXPECT_EQ(some.sites[k].bytes, all.sites[k].bytes);
      EXPECT_EQ(some.sites[k].duration_s, all.sites[k].duration_s);
      EXPECT_EQ(some.sites[k].exposed_s, all.sites[k].exposed_s);
    }
  }
  // The batches differ per rank and the kappa moved ends: the comparison saw distinct values.
  EXPECT_NE(all.ranks[0].compute_s, all.ranks[1].compute_s);
  EXPECT_GT(all.ranks[0].contention_s, 0.0);
  EXPECT_GT(all.sites[1].bytes, all.sites[1].calls * 4e6);  // the batch term counted
}

}  // namespace
}  // namespace gemtb::sim
