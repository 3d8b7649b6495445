// What a stretch of recorded device activity (kernel_timer.h) says about the GPU's time: how much of a
// window it was busy, the idle gaps between one activity and the next (the host's share of a step:
// launches, synchronisations, host work the device waits for) with the activities on either side of
// each, and the kernels that took the most time. Host code only; `gemtb train --trace-kernels` reports
// it for the last step.
#ifndef GEMTB_GPU_BENCH_DEVICE_TIMELINE_H_
#define GEMTB_GPU_BENCH_DEVICE_TIMELINE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "gpu/bench/kernel_timer.h"

namespace gemtb::gpu::bench {

// Time in one CUDA runtime call (by name), or several of the same name.
struct HostCallTime {
  std::string name;  // "cudaMemcpy", "cudaDeviceSynchronize", ...
  int64_t calls = 0;
  double ms = 0;
};

// An idle stretch of the window: no activity ran from `at_ms` (from the window's start) for `ms`.
// Where host calls were recorded: the runtime calls the host was in meanwhile (their overlap with the
// gap, the longest first) and the gap's time outside any call (host work: the program's own, a
// library's such as cuBLASLt's heuristic).
struct IdleGap {
  double at_ms = 0, ms = 0;
  std::string after, before;  // the activities that end and start it ("(window start)", "(window end)")
  std::vector<HostCallTime> host_calls;
  double outside_calls_ms = 0;
};

// The gaps between the same two activities, summed: a gap that recurs (a synchronisation after a
// kernel, a host computation before one) shows up here even when each is short.
struct GapTotal {
  std::string after, before;
  int64_t count = 0;
  double ms = 0;
};

struct KernelTotal {
  std::string name;
  int64_t launches = 0;
  double ms = 0;
};

struct TimelineSummary {
  double window_ms = 0;
  double busy_ms = 0;    // the union of the activities' intervals inside the window
  double idle_ms = 0;    // window_ms - busy_ms
  double kernel_ms = 0;  // the kernels' durations summed (overlapping kernels counted each)
  int64_t kernels = 0, memcpys = 0, memsets = 0;
  std::vector<IdleGap> largest_gaps;    // the longest first
  std::vector<GapTotal> gap_totals;     // by summed time, the longest first
  std::vector<KernelTotal> top_kernels;  // by summed time, the longest first
  int64_t host_calls = 0;                // runtime calls recorded in the window (0: none were)
  std::vector<HostCallTime> top_host_calls;  // by summed time inside the window, the longest first
};

// The readable name of an activity: a kernel's demangled name without its parameter list ("memcpy",
// "memset" for the others).
std::string ActivityName(const DeviceActivity& a);

// The activities inside [from_ns, to_ns) (clipped to it), in any order; `top` gaps, kernels and host
// calls kept. Host calls (kHostCall) are not the device's activity: they only say what the host was
// doing in the gaps.
TimelineSummary SummarizeTimeline(const std::vector<DeviceActivity>& activities, uint64_t from_ns, uint64_t to_ns,
                                  int top);

}  // namespace gemtb::gpu::bench

#endif  // GEMTB_GPU_BENCH_DEVICE_TIMELINE_H_
