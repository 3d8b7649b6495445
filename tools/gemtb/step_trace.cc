#include "tools/gemtb/step_trace.h"

#include <map>
#include <string>

#include "nlohmann/json.hpp"

namespace gemtb::cli {

std::string StepTraceJson(const std::vector<TraceSpan>& spans) {
  return StepTraceJson(std::vector<std::vector<TraceSpan>>{spans});
}

std::string StepTraceJson(const std::vector<std::vector<TraceSpan>>& ranks) {
  nlohmann::json events = nlohmann::json::array();
  for (size_t pid = 0; pid < ranks.size(); ++pid) {
    const std::vector<TraceSpan>& spans = ranks[pid];
    std::map<std::string, int> tids = {{"compute", 0}};
    std::vector<std::string> order = {"compute"};
    for (const TraceSpan& s : spans) {
      if (tids.emplace(s.track, static_cast<int>(tids.size())).second) order.push_back(s.track);
    }
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0},
                      {"args", {{"name", "rank " + std::to_string(pid)}}}});
    for (const std::string& track : order)
      events.push_back(
          {{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tids[track]}, {"args", {{"name", track}}}});
    for (const TraceSpan& s : spans) {
      events.push_back({{"name", s.name},
                        {"cat", s.category},
                        {"ph", "X"},
                        {"ts", s.start_ms * 1e3},
                        {"dur", s.dur_ms * 1e3},
                        {"pid", pid},
                        {"tid", tids[s.track]}});
    }
  }
  return nlohmann::json({{"displayTimeUnit", "ms"}, {"traceEvents", events}}).dump(1) + "\n";
}

}  // namespace gemtb::cli
