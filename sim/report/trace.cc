#include "sim/report/trace.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "sim/report/json_text.h"

namespace gemtb::sim::report {
namespace {

std::string Quoted(const std::string& text) { return nlohmann::json(text).dump(); }

std::string StreamName(const SimResult& r, int stream) {
  if (stream >= 0 && static_cast<size_t>(stream) < r.stream_names.size()) return r.stream_names[static_cast<size_t>(stream)];
  return absl::StrCat("stream ", stream);
}

}  // namespace

std::string TraceJson(const SimResult& r) {
  std::vector<const TraceEvent*> events;
  events.reserve(r.trace.size());
  for (const TraceEvent& e : r.trace) events.push_back(&e);
  std::stable_sort(events.begin(), events.end(), [](const TraceEvent* a, const TraceEvent* b) {
    return std::tie(a->rank, a->stream, a->start_s, a->name) < std::tie(b->rank, b->stream, b->start_s, b->name);
  });
  std::set<std::pair<int, int>> threads;
  std::set<int> ranks;
  for (const TraceEvent* e : events) {
    threads.insert({e->rank, e->stream});
    ranks.insert(e->rank);
  }

  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  auto line = [&](const std::string& text) {
    if (!first) out += ",\n";
    first = false;
    out += text;
  };
  for (int rank : ranks) {
    line(absl::StrCat("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": ", rank, ", \"tid\": 0, \"args\": {\"name\": ",
                      Quoted(absl::StrCat("rank ", rank)), "}}"));
    line(absl::StrCat("{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": ", rank,
                      ", \"tid\": 0, \"args\": {\"sort_index\": ", rank, "}}"));
  }
  for (const auto& [rank, stream] : threads) {
    line(absl::StrCat("{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": ", rank, ", \"tid\": ", stream,
                      ", \"args\": {\"name\": ", Quoted(StreamName(r, stream)), "}}"));
  }
  for (const TraceEvent* e : events) {
    line(absl::StrCat("{\"name\": ", Quoted(e->name), ", \"cat\": ", Quoted(e->category),
                      ", \"ph\": \"X\", \"ts\": ", FormatDouble(e->start_s * 1e6), ", \"dur\": ",
                      FormatDouble(e->duration_s * 1e6), ", \"pid\": ", e->rank, ", \"tid\": ", e->stream, "}"));
  }
  out += "\n]}\n";
  return out;
}

}  // namespace gemtb::sim::report
