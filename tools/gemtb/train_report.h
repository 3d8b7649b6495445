// `gemtb ref train --report FILE`: rank 0's JSON of every rank's times and their aggregate.
//
//   {"world_size": R, "steps": S,
//    "ranks": [{"rank": r, "wall_s": w, "collectives_s": c, "data_parallel_s": d, "sharded_tables_s": t,
//               "busy_s": w - c}, ...],
//    "aggregate": {"slowest_rank": r, "slowest_busy_s": b, "mean_busy_s": m, "imbalance": b / m - 1,
//                  "max_wall_s": w, "mean_collectives_s": c}}
//
// wall_s: the training steps from the first to the last (checkpoints included, start-up and final
// evaluation not); collectives_s: the part of it spent inside the rendezvous store's collectives,
// sending or waiting for the other ranks (data_parallel_s: the dense model's gradient exchange and
// the per-step stop agreement; sharded_tables_s: the --plan's id, embedding and gradient exchanges);
// busy_s = wall_s - collectives_s. The ranks wait for each other at every step, so their walls agree
// and the slowest rank is the one with the most busy time: imbalance = its busy time over the mean
// busy time, minus 1 (0 when every rank is as busy).
#ifndef GEMTB_TOOLS_GEMTB_TRAIN_REPORT_H_
#define GEMTB_TOOLS_GEMTB_TRAIN_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gemtb::cli {

struct RankTimes {
  int rank = 0;
  double wall_s = 0, data_parallel_s = 0, sharded_tables_s = 0;
};

// One rank's times as the text ranks hand rank 0, and back (DataLoss naming the text when malformed).
std::string RankTimesText(const RankTimes& t);
absl::StatusOr<RankTimes> ParseRankTimes(const std::string& text);

// The report's JSON (2-space indented) for every rank's times, in rank order.
std::string TrainReportJson(const std::vector<RankTimes>& ranks, int64_t steps);

}  // namespace gemtb::cli

#endif  // GEMTB_TOOLS_GEMTB_TRAIN_REPORT_H_
