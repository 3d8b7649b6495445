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

namespace {

constexpr double kMs = 1e-6;

// The totals of a map (each with an `ms`), the longest first, `keep` of them.
template <typename Key, typename Total>
std::vector<Total> LongestFirst(std::map<Key, Total>& totals, size_t keep) {
  std::vector<Total> out;
  for (auto& [key, t] : totals) out.push_back(std::move(t));
  std::stable_sort(out.begin(), out.end(), [](const Total& x, const Total& y) { return x.ms > y.ms; });
  if (out.size() > keep) out.resize(keep);
  return out;
}

// The host calls' time inside [from, to) by name (their overlap with it).
std::map<std::string, HostCallTime> CallTimes(const std::vector<const DeviceActivity*>& calls, uint64_t from,
                                              uint64_t to) {
  std::map<std::string, HostCallTime> by_name;
  for (const DeviceActivity* c : calls) {
    const uint64_t a = std::max(c->start_ns, from), b = std::min(c->end_ns, to);
    if (b <= a) continue;
    const std::string name = ActivityName(*c);
    HostCallTime& t = by_name[name];
    t.name = name;
    ++t.calls;
    t.ms += static_cast<double>(b - a) * kMs;
  }
  return by_name;
}

// A gap between the device's activities, in ns, with its neighbours.
struct Gap {
  uint64_t from, to;
  std::string after, before;
};

// Sweeps the device activities in start order: busy time, counts and kernel totals into `s`, and the
// gaps. `covered` is where the union of the activities so far ends, `last` the activity that reaches
// it (the one a gap comes after).
std::vector<Gap> Sweep(std::vector<const DeviceActivity*> inside, uint64_t from_ns, uint64_t to_ns,
                       TimelineSummary& s, std::map<std::string, KernelTotal>& kernels) {
  std::sort(inside.begin(), inside.end(), [](const DeviceActivity* x, const DeviceActivity* y) {
    return x->start_ns != y->start_ns ? x->start_ns < y->start_ns : x->end_ns < y->end_ns;
  });
  std::vector<Gap> gaps;
  uint64_t covered = from_ns;
  std::string last = "(window start)";
  for (const DeviceActivity* a : inside) {
    const uint64_t start = std::max(a->start_ns, from_ns), end = std::min(a->end_ns, to_ns);
    const std::string name = ActivityName(*a);
    if (start > covered) gaps.push_back({covered, start, last, name});
    if (end > covered) {
      s.busy_ms += static_cast<double>(end - std::max(start, covered)) * kMs;
      covered = end;
      last = name;
    }
    if (a->kind == DeviceActivity::Kind::kMemcpy) ++s.memcpys;
    if (a->kind == DeviceActivity::Kind::kMemset) ++s.memsets;
    if (a->kind != DeviceActivity::Kind::kKernel) continue;
    ++s.kernels;
    const double ms = static_cast<double>(end - start) * kMs;
    s.kernel_ms += ms;
    KernelTotal& t = kernels[name];
    t.name = name;
    ++t.launches;
    t.ms += ms;
  }
  if (to_ns > covered) gaps.push_back({covered, to_ns, last, "(window end)"});
  return gaps;
}

}  // namespace

TimelineSummary SummarizeTimeline(const std::vector<DeviceActivity>& activities, uint64_t from_ns, uint64_t to_ns,
                                  int top) {
  TimelineSummary s;
  if (to_ns <= from_ns) return s;
  s.window_ms = static_cast<double>(to_ns - from_ns) * kMs;
  std::vector<const DeviceActivity*> inside, calls;
  for (const DeviceActivity& a : activities) {
    if (a.end_ns <= from_ns || a.start_ns >= to_ns || a.end_ns < a.start_ns) continue;
    (a.kind == DeviceActivity::Kind::kHostCall ? calls : inside).push_back(&a);
  }
  std::map<std::string, KernelTotal> kernels;
  std::vector<Gap> gaps = Sweep(std::move(inside), from_ns, to_ns, s, kernels);
  s.idle_ms = s.window_ms - s.busy_ms;
  const size_t keep = static_cast<size_t>(std::max(top, 0));
  s.top_kernels = LongestFirst(kernels, keep);
  std::map<std::pair<std::string, std::string>, GapTotal> by_pair;
  for (const Gap& g : gaps) {
    GapTotal& t = by_pair[{g.after, g.before}];
    t.after = g.after;
    t.before = g.before;
    ++t.count;
    t.ms += static_cast<double>(g.to - g.from) * kMs;
  }
  s.gap_totals = LongestFirst(by_pair, keep);
  // What the host was in, in the whole window and during each kept gap. One thread's calls do not
  // overlap; the data thread's few that overlap the main thread's are counted each.
  s.host_calls = static_cast<int64_t>(calls.size());
  std::map<std::string, HostCallTime> window_calls = CallTimes(calls, from_ns, to_ns);
  s.top_host_calls = LongestFirst(window_calls, keep);
  std::stable_sort(gaps.begin(), gaps.end(), [](const Gap& x, const Gap& y) { return x.to - x.from > y.to - y.from; });
  if (gaps.size() > keep) gaps.resize(keep);
  for (const Gap& raw : gaps) {
    IdleGap& g = s.largest_gaps.emplace_back();
    g.at_ms = static_cast<double>(raw.from - from_ns) * kMs;
    g.ms = static_cast<double>(raw.to - raw.from) * kMs;
    g.after = raw.after;
    g.before = raw.before;
    if (calls.empty()) continue;
    std::map<std::string, HostCallTime> in_gap = CallTimes(calls, raw.from, raw.to);
    double in_calls = 0;
    for (const auto& [name, t] : in_gap) in_calls += t.ms;
    g.host_calls = LongestFirst(in_gap, 3);
    g.outside_calls_ms = std::max(0.0, g.ms - in_calls);
  }
  return s;
}

}  // namespace gemtb::gpu::bench
