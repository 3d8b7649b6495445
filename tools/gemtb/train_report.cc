#include "tools/gemtb/train_report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace gemtb::cli {

std::string RankTimesText(const RankTimes& t) {
  return nlohmann::json{{"rank", t.rank},
                        {"wall_s", t.wall_s},
                        {"data_parallel_s", t.data_parallel_s},
                        {"sharded_tables_s", t.sharded_tables_s}}
      .dump();
}

absl::StatusOr<RankTimes> ParseRankTimes(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  const char* fields[] = {"rank", "wall_s", "data_parallel_s", "sharded_tables_s"};
  bool ok = j.is_object();
  for (const char* f : fields) ok = ok && j.contains(f) && j[f].is_number();
  if (!ok) return absl::DataLossError(absl::StrCat("report: a rank's times are malformed: ", text));
  RankTimes t;
  t.rank = j["rank"].get<int>();
  t.wall_s = j["wall_s"].get<double>();
  t.data_parallel_s = j["data_parallel_s"].get<double>();
  t.sharded_tables_s = j["sharded_tables_s"].get<double>();
  return t;
}

std::string TrainReportJson(const std::vector<RankTimes>& ranks, int64_t steps) {
  nlohmann::json out = {{"world_size", ranks.size()}, {"steps", steps}};
  nlohmann::json list = nlohmann::json::array();
  double busy_sum = 0, collectives_sum = 0, max_wall = 0, slowest_busy = -1;
  int slowest = 0;
  for (const RankTimes& t : ranks) {
    const double collectives = t.data_parallel_s + t.sharded_tables_s;
    const double busy = t.wall_s - collectives;
    list.push_back({{"rank", t.rank},
                    {"wall_s", t.wall_s},
                    {"collectives_s", collectives},
                    {"data_parallel_s", t.data_parallel_s},
                    {"sharded_tables_s", t.sharded_tables_s},
                    {"busy_s", busy}});
    busy_sum += busy;
    collectives_sum += collectives;
    max_wall = std::max(max_wall, t.wall_s);
    if (busy > slowest_busy) {
      slowest_busy = busy;
      slowest = t.rank;
    }
  }
  out["ranks"] = list;
  const double n = static_cast<double>(std::max<size_t>(ranks.size(), 1));
  const double mean_busy = busy_sum / n;
  out["aggregate"] = {{"slowest_rank", slowest},  {"slowest_busy_s", slowest_busy},
                      {"mean_busy_s", mean_busy}, {"imbalance", mean_busy > 0 ? slowest_busy / mean_busy - 1 : 0.0},
                      {"max_wall_s", max_wall},   {"mean_collectives_s", collectives_sum / n}};
  return out.dump(2) + "\n";
}

}  // namespace gemtb::cli
