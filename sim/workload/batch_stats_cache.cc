#include "sim/workload/batch_stats_cache.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gemtb::sim {
namespace {

void AppendDouble(std::string* out, double v) { absl::StrAppendFormat(out, "%a,", v); }

}  // namespace

std::string BatchDrawKey(const BatchDrawConfig& c, const Batches& b) {
  std::string key = absl::StrCat("seed=", c.seed, ",world=", c.world, ",steps=", c.steps, ",kjt=");
  AppendDouble(&key, c.kjt_per_sample);
  AppendDouble(&key, c.kjt_per_token);
  for (const SequenceCostInfo& s : c.sequences) {
    absl::StrAppend(&key, "|seq n_s=", s.n_s, ",mask=", static_cast<int>(s.mask.kind), ",", s.mask.left, ",",
                    s.mask.right, ",", s.mask.block, ",lmax=", s.lmax);
  }
  absl::StrAppend(&key, "|local_batch=", b.local_batch, ",policy=", b.assignment.policy, ",sub_batch=",
                  b.assignment.sub_batch, ",pool_factor=", b.assignment.pool_factor, ",max_len=", b.assignment.max_len);
  for (const LengthLaw& law : b.features) {
    absl::StrAppend(&key, "|law kind=", static_cast<int>(law.kind), ",min=", law.min, ",max=", law.max, ",");
    AppendDouble(&key, law.mu);
    AppendDouble(&key, law.sigma);
    AppendDouble(&key, law.s);
    AppendDouble(&key, law.corr);
    for (const auto& [length, weight] : law.bins) {
      AppendDouble(&key, length);
      AppendDouble(&key, weight);
    }
  }
  return key;
}

absl::StatusOr<BatchStatsCache::Stats> BatchStatsCache::Get(const BatchDrawConfig& config, const Batches& batches,
                                                             int threads) {
  std::string key = BatchDrawKey(config, batches);
  std::promise<absl::StatusOr<Stats>> promise;
  std::shared_future<absl::StatusOr<Stats>> future;
  bool draw = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      future = promise.get_future().share();
      entries_.emplace(std::move(key), future);
      draw = true;
    } else {
      future = it->second;
    }
  }
  if (draw) {
    absl::StatusOr<std::vector<double>> drawn = DrawBatchStats(config, batches, threads);
    if (drawn.ok()) {
      promise.set_value(Stats(std::make_shared<const std::vector<double>>(*std::move(drawn))));
    } else {
      promise.set_value(drawn.status());
    }
  }
  return future.get();
}

size_t BatchStatsCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace gemtb::sim
