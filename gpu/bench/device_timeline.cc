#include "gpu/bench/device_timeline.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <string_view>
#include <utility>

namespace gemtb::gpu::bench {

std::string ActivityName(const DeviceActivity& a) {
  if (a.kind == DeviceActivity::Kind::kMemcpy) return "memcpy";
  if (a.kind == DeviceActivity::Kind::kMemset) return "memset";
  if (a.kind == DeviceActivity::Kind::kHostCall) {  // "cudaMemcpy_v3020" -> "cudaMemcpy"
    const size_t v = a.name.rfind("_v");
    return v != std::string::npos && v > 0 ? a.name.substr(0, v) : a.name;
  }
  std::string name = a.name;
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(a.name.c_str(), nullptr, nullptr, &status),
                                                   std::free);
  if (status == 0 && demangled != nullptr) name = demangled.get();
  // "void ns::Kernel<4>(Params, int)" -> "void ns::Kernel<4>": the parameters say nothing a reader of
  // a profile needs, and make every line long. "(anonymous namespace)" is part of the name.
  constexpr std::string_view kAnonymous = "(anonymous namespace)";
  int depth = 0;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name.compare(i, kAnonymous.size(), kAnonymous) == 0) {
      i += kAnonymous.size() - 1;
      continue;
    }
    if (name[i] == '<') ++depth;
    if (name[i] == '>') --depth;
    if (name[i] == '(' && depth == 0 && i > 0) return name.substr(0, i);
  }
  return name.empty() ? "kernel" : name;
}

TimelineSummary SummarizeTimeline(const std::vector<DeviceActivity>& activities, uint64_t from_ns, uint64_t to_ns,
                                  int top) {
  TimelineSummary s;
  if (to_ns <= from_ns) return s;
  constexpr double kMs = 1e-6;
  s.window_ms = static_cast<double>(to_ns - from_ns) * kMs;
  std::vector<const DeviceActivity*> inside, calls;
  for (const DeviceActivity& a : activities) {
    if (a.end_ns <= from_ns || a.start_ns >= to_ns || a.end_ns < a.start_ns) continue;
    (a.kind == DeviceActivity::Kind::kHostCall ? calls : inside).push_back(&a);
  }
  std::sort(inside.begin(), inside.end(), [](const DeviceActivity* x, const DeviceActivity* y) {
    return x->start_ns != y->start_ns ? x->start_ns < y->start_ns : x->end_ns < y->end_ns;
  });
  std::map<std::string, KernelTotal> by_name;
  struct Gap {
    uint64_t from, to;
    std::string after, before;
  };
  std::vector<Gap> gaps;
  // Sweep in start order: `covered` is where the union of the activities so far ends, and `last` the
  // activity that reaches it (the one a gap comes after).
  uint64_t covered = from_ns;
  std::string last = "(window start)";
  for (const DeviceActivity* a : inside) {
    const uint64_t start = std::max(a->start_ns, from_ns), end = std::min(a->end_ns, to_ns);
    const std::string name = ActivityName(*a);
    if (start > covered) {
      gaps.push_back({covered, start, last, name});
    }
    if (end > covered) {
      s.busy_ms += static_cast<double>(end - std::max(start, covered)) * kMs;
      covered = end;
      last = name;
    }
    switch (a->kind) {
      case DeviceActivity::Kind::kKernel: {
        ++s.kernels;
        const double ms = static_cast<double>(end - start) * kMs;
        s.kernel_ms += ms;
        KernelTotal& t = by_name[name];
        t.name = name;
        ++t.launches;
        t.ms += ms;
        break;
      }
      case DeviceActivity::Kind::kMemcpy:
        ++s.memcpys;
        break;
      case DeviceActivity::Kind::kMemset:
        ++s.memsets;
        break;
      case DeviceActivity::Kind::kHostCall:
        break;
    }
  }
  if (to_ns > covered) {
    gaps.push_back({covered, to_ns, last, "(window end)"});
  }
  s.idle_ms = s.window_ms - s.busy_ms;
  const size_t keep = static_cast<size_t>(std::max(top, 0));
  std::map<std::pair<std::string, std::string>, GapTotal> by_pair;
  for (const Gap& g : gaps) {
    GapTotal& t = by_pair[{g.after, g.before}];
    t.after = g.after;
    t.before = g.before;
    ++t.count;
    t.ms += static_cast<double>(g.to - g.from) * kMs;
  }
  for (auto& [pair, t] : by_pair) s.gap_totals.push_back(std::move(t));
  std::stable_sort(s.gap_totals.begin(), s.gap_totals.end(),
                   [](const GapTotal& x, const GapTotal& y) { return x.ms > y.ms; });
  if (s.gap_totals.size() > keep) s.gap_totals.resize(keep);
  std::stable_sort(gaps.begin(), gaps.end(), [](const Gap& x, const Gap& y) { return x.to - x.from > y.to - y.from; });
  if (gaps.size() > keep) gaps.resize(keep);
  // What the host was in during each kept gap, and in the whole window. Calls do not nest (one thread's
  // runtime calls; the prefetch thread's few calls may overlap the main thread's, counted each).
  s.host_calls = static_cast<int64_t>(calls.size());
  std::map<std::string, HostCallTime> by_call;
  for (const DeviceActivity* c : calls) {
    const std::string name = ActivityName(*c);
    HostCallTime& t = by_call[name];
    t.name = name;
    ++t.calls;
    t.ms += static_cast<double>(std::min(c->end_ns, to_ns) - std::max(c->start_ns, from_ns)) * kMs;
  }
  for (auto& [name, t] : by_call) s.top_host_calls.push_back(std::move(t));
  std::stable_sort(s.top_host_calls.begin(), s.top_host_calls.end(),
                   [](const HostCallTime& x, const HostCallTime& y) { return x.ms > y.ms; });
  if (s.top_host_calls.size() > keep) s.top_host_calls.resize(keep);
  for (const Gap& raw : gaps) {
    IdleGap& g = s.largest_gaps.emplace_back();
    g.at_ms = static_cast<double>(raw.from - from_ns) * kMs;
    g.ms = static_cast<double>(raw.to - raw.from) * kMs;
    g.after = raw.after;
    g.before = raw.before;
    if (!calls.empty()) {
      const uint64_t g0 = raw.from, g1 = raw.to;
      std::map<std::string, HostCallTime> in_gap;
      double in_calls = 0;
      for (const DeviceActivity* c : calls) {
        const uint64_t a = std::max(c->start_ns, g0), b = std::min(c->end_ns, g1);
        if (b <= a) continue;
        const std::string name = ActivityName(*c);
        HostCallTime& t = in_gap[name];
        t.name = name;
        ++t.calls;
        t.ms += static_cast<double>(b - a) * kMs;
        in_calls += static_cast<double>(b - a) * kMs;
      }
      for (auto& [name, t] : in_gap) g.host_calls.push_back(std::move(t));
      std::stable_sort(g.host_calls.begin(), g.host_calls.end(),
                       [](const HostCallTime& x, const HostCallTime& y) { return x.ms > y.ms; });
      if (g.host_calls.size() > 3) g.host_calls.resize(3);
      g.outside_calls_ms = std::max(0.0, g.ms - in_calls);
    }
  }
  for (auto& [name, t] : by_name) s.top_kernels.push_back(std::move(t));
  std::stable_sort(s.top_kernels.begin(), s.top_kernels.end(),
                   [](const KernelTotal& x, const KernelTotal& y) { return x.ms > y.ms; });
  if (s.top_kernels.size() > keep) s.top_kernels.resize(keep);
  return s;
}

}  // namespace gemtb::gpu::bench
