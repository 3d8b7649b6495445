// gpu/bench/device_timeline.h on made-up activity records (no GPU): busy and idle time, the gaps and
// their neighbours, overlapping kernels, clipping to the window, the kernels' totals and names.
#include "gpu/bench/device_timeline.h"

#include <gtest/gtest.h>

#include <vector>

namespace gemtb::gpu::bench {
namespace {

DeviceActivity Activity(DeviceActivity::Kind kind, const char* name, uint64_t start_ns, uint64_t end_ns) {
  DeviceActivity a;
  a.kind = kind;
  a.name = name;
  a.start_ns = start_ns;
  a.end_ns = end_ns;
  return a;
}
DeviceActivity Kernel(const char* name, uint64_t start_ns, uint64_t end_ns) {
  return Activity(DeviceActivity::Kind::kKernel, name, start_ns, end_ns);
}
DeviceActivity Copy(uint64_t start_ns, uint64_t end_ns) {
  return Activity(DeviceActivity::Kind::kMemcpy, "", start_ns, end_ns);
}
DeviceActivity HostCall(const char* name, uint64_t start_ns, uint64_t end_ns) {
  return Activity(DeviceActivity::Kind::kHostCall, name, start_ns, end_ns);
}

TEST(DeviceTimeline, BusyIdleAndTheGapsBetweenNeighbours) {
  // Window [1000, 11000) ns: idle 1000 ns before A; A [2000, 4000) and B [3000, 5000) overlap; idle
  // 2000 ns; a copy [7000, 8000); idle 500 ns; A again [8500, 9000); idle 2000 ns to the window's end.
  const std::vector<DeviceActivity> acts = {Kernel("A", 8500, 9000), Copy(7000, 8000), Kernel("B", 3000, 5000),
                                            Kernel("A", 2000, 4000)};
  const TimelineSummary s = SummarizeTimeline(acts, 1000, 11000, 10);
  EXPECT_DOUBLE_EQ(s.window_ms, 0.010);
  EXPECT_DOUBLE_EQ(s.busy_ms, (3000 + 1000 + 500) * 1e-6);
  EXPECT_DOUBLE_EQ(s.idle_ms, s.window_ms - s.busy_ms);
  EXPECT_DOUBLE_EQ(s.kernel_ms, (2000 + 2000 + 500) * 1e-6);
  EXPECT_EQ(s.kernels, 3);
  EXPECT_EQ(s.memcpys, 1);
  EXPECT_EQ(s.memsets, 0);
  ASSERT_EQ(s.largest_gaps.size(), 4u);
  // The two 2000 ns gaps in time order (a stable sort), then 1000, then 500.
  EXPECT_DOUBLE_EQ(s.largest_gaps[0].ms, 0.002);
  EXPECT_DOUBLE_EQ(s.largest_gaps[0].at_ms, 0.004);  // from 5000 ns: B reached furthest
  EXPECT_EQ(s.largest_gaps[0].after, "B");
  EXPECT_EQ(s.largest_gaps[0].before, "memcpy");
  EXPECT_EQ(s.largest_gaps[1].after, "A");
  EXPECT_EQ(s.largest_gaps[1].before, "(window end)");
  EXPECT_EQ(s.largest_gaps[2].after, "(window start)");
  EXPECT_EQ(s.largest_gaps[2].before, "A");
  EXPECT_DOUBLE_EQ(s.largest_gaps[3].ms, 0.0005);
  EXPECT_EQ(s.largest_gaps[3].after, "memcpy");
  ASSERT_EQ(s.top_kernels.size(), 2u);
  EXPECT_EQ(s.top_kernels[0].name, "A");
  EXPECT_EQ(s.top_kernels[0].launches, 2);
  EXPECT_DOUBLE_EQ(s.top_kernels[0].ms, 0.0025);
  EXPECT_EQ(s.top_kernels[1].name, "B");
}

TEST(DeviceTimeline, RecurringGapsAreSummedByTheirNeighbours) {
  // A, gap 100, B, gap 300, A, gap 100, B: (A -> B) twice for 200 ns, (B -> A) once for 300.
  const std::vector<DeviceActivity> acts = {Kernel("A", 0, 100), Kernel("B", 200, 300), Kernel("A", 600, 700),
                                            Kernel("B", 800, 900)};
  const TimelineSummary s = SummarizeTimeline(acts, 0, 900, 1);
  ASSERT_EQ(s.gap_totals.size(), 1u);  // `top` keeps one
  EXPECT_EQ(s.gap_totals[0].after, "B");
  EXPECT_EQ(s.gap_totals[0].before, "A");
  EXPECT_EQ(s.gap_totals[0].count, 1);
  const TimelineSummary all = SummarizeTimeline(acts, 0, 900, 10);
  ASSERT_EQ(all.gap_totals.size(), 2u);
  EXPECT_EQ(all.gap_totals[1].after, "A");
  EXPECT_EQ(all.gap_totals[1].count, 2);
  EXPECT_DOUBLE_EQ(all.gap_totals[1].ms, 200e-6);
}

TEST(DeviceTimeline, HostCallsSayWhatTheHostDidInAGap) {
  // A [0, 100), the host in cudaMemcpy [150, 250) and twice in cudaLaunchKernel [300, 310), [320, 330),
  // B [400, 500), a cudaLaunchKernel [450, 460) while B runs: the gap [100, 400) has 100 ns of copy,
  // 20 of launches and 180 outside any call; host calls are not device time.
  const std::vector<DeviceActivity> acts = {Kernel("A", 0, 100),
                                            HostCall("cudaMemcpy_v3020", 150, 250),
                                            HostCall("cudaLaunchKernel_v7000", 300, 310),
                                            HostCall("cudaLaunchKernel_v7000", 320, 330),
                                            Kernel("B", 400, 500),
                                            HostCall("cudaLaunchKernel_v7000", 450, 460)};
  const TimelineSummary s = SummarizeTimeline(acts, 0, 500, 10);
  EXPECT_DOUBLE_EQ(s.busy_ms, 200e-6);
  EXPECT_EQ(s.kernels, 2);
  EXPECT_EQ(s.host_calls, 4);
  ASSERT_EQ(s.largest_gaps.size(), 1u);
  const IdleGap& g = s.largest_gaps[0];
  EXPECT_EQ(g.after, "A");
  EXPECT_EQ(g.before, "B");
  ASSERT_EQ(g.host_calls.size(), 2u);
  EXPECT_EQ(g.host_calls[0].name, "cudaMemcpy");
  EXPECT_DOUBLE_EQ(g.host_calls[0].ms, 100e-6);
  EXPECT_EQ(g.host_calls[1].name, "cudaLaunchKernel");
  EXPECT_EQ(g.host_calls[1].calls, 2);
  EXPECT_DOUBLE_EQ(g.host_calls[1].ms, 20e-6);
  EXPECT_NEAR(g.outside_calls_ms, 180e-6, 1e-15);
  // In the whole window: the copy's 100 ns, then the three launches' 30.
  ASSERT_EQ(s.top_host_calls.size(), 2u);
  EXPECT_EQ(s.top_host_calls[0].name, "cudaMemcpy");
  EXPECT_EQ(s.top_host_calls[1].calls, 3);
  EXPECT_DOUBLE_EQ(s.top_host_calls[1].ms, 30e-6);
}

TEST(DeviceTimeline, ActivitiesAreClippedToTheWindow) {
  const std::vector<DeviceActivity> acts = {Kernel("early", 0, 1500), Kernel("late", 1800, 5000),
                                            Kernel("outside", 6000, 7000)};
  const TimelineSummary s = SummarizeTimeline(acts, 1000, 2000, 10);
  EXPECT_DOUBLE_EQ(s.busy_ms, (500 + 200) * 1e-6);
  EXPECT_EQ(s.kernels, 2);
  ASSERT_EQ(s.largest_gaps.size(), 1u);
  EXPECT_EQ(s.largest_gaps[0].after, "early");
  EXPECT_EQ(s.largest_gaps[0].before, "late");
  // An empty window says nothing.
  EXPECT_EQ(SummarizeTimeline(acts, 2000, 2000, 10).kernels, 0);
}

TEST(DeviceTimeline, KernelNamesAreDemangledWithoutTheirParameters) {
  DeviceActivity a = Kernel("_ZN2ns6KernelILi4EEEvPf", 0, 1);  // void ns::Kernel<4>(float*)
  EXPECT_EQ(ActivityName(a), "void ns::Kernel<4>");
  // gemtb::(anonymous namespace)::Sum(float const*, int) (a function, not a template: no return type)
  a.name = "_ZN5gemtb12_GLOBAL__N_13SumEPKfi";
  EXPECT_EQ(ActivityName(a), "gemtb::(anonymous namespace)::Sum");
  a.name = "nvjet_sm90_tss_128x288";  // not mangled: as is
  EXPECT_EQ(ActivityName(a), "nvjet_sm90_tss_128x288");
  EXPECT_EQ(ActivityName(Copy(0, 1)), "memcpy");
}

}  // namespace
}  // namespace gemtb::gpu::bench
