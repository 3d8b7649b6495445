// Batch statistics drawn once per distinct draw and shared by every run that draws the same
// batches. A study's attribution reruns (ideal network, SM-free, balance, no noise, no recompute)
// and most of its sensitivity cases (bandwidths, alphas, zone size, efficiencies, table rows, ...)
// change nothing that DrawBatchStats reads, so they would otherwise redraw identical rows: at
// 16,384 ranks a draw is about a sixth of a run.
//
// The key is every input DrawBatchStats reads (BatchDrawKey), written exactly (doubles in hex), so
// a hit returns the bytes a fresh draw would. Thread-safe: concurrent runs asking for one key wait
// for a single draw.
#ifndef GEMTB_SIM_WORKLOAD_BATCH_STATS_CACHE_H_
#define GEMTB_SIM_WORKLOAD_BATCH_STATS_CACHE_H_

#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sim/scenario/scenario.h"
#include "sim/workload/batch_draw.h"

namespace gemtb::sim {

// Every field of (config, batches) that DrawBatchStats reads, exactly. Two inputs with equal keys
// draw identical statistics.
std::string BatchDrawKey(const BatchDrawConfig& config, const Batches& batches);

class BatchStatsCache {
 public:
  using Stats = std::shared_ptr<const std::vector<double>>;
  // DrawBatchStats(config, batches, threads), drawn on the first request of its key.
  absl::StatusOr<Stats> Get(const BatchDrawConfig& config, const Batches& batches, int threads);
  // Distinct draws made so far.
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_future<absl::StatusOr<Stats>>> entries_;
};

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_WORKLOAD_BATCH_STATS_CACHE_H_
