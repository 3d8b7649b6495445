#include "tools/gemtb/step_trace.h"

#include <map>

#include "nlohmann/json.hpp"

namespace gemtb::cli {

std::string StepTraceJson(const std::vector<TraceSpan>& spans) {
  std::map<std::string, int> tids = {{"compute", 0}};
  std::vector<std::string> order = {"compute"};
  for (const TraceSpan& s : spans) {
    if (tids.emplace(s.track, static_cast<int>(tids.size())).second) order.push_back(s.track);
  }
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0}, {"tid", 0}, {"args", {{"name", "rank 0"}}}});
  for (const std::string& track : order)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", tids[track]}, {"args", {{"name", track}}}});
  for (const TraceSpan& s : spans) {
    events.push_back({{"name", s.name},
                      {"cat", s.category},
                      {"ph", "X"},
                      {"ts", s.start_ms * 1e3},
                      {"dur", s.dur_ms * 1e3},
                      {"pid", 0},
                      {"tid", tids[s.track]}});
  }
  return nlohmann::json({{"displayTimeUnit", "ms"}, {"traceEvents", events}}).dump(1) + "\n";
}

}  // namespace gemtb::cli
