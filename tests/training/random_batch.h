// Random training batches for the model tests: ids uniform over each table, sequence lengths
// uniform in [0, max_len], Bernoulli labels, all masks 1. Independent of the data generator, so the
// model tests do not depend on it.
#ifndef GEMTB_TESTS_TRAINING_RANDOM_BATCH_H_
#define GEMTB_TESTS_TRAINING_RANDOM_BATCH_H_

#include <algorithm>
#include <random>

#include "model/description/model_config.h"
#include "reference/model/batch.h"

namespace gemtb::testing {

inline reference::model::TrainBatch RandomBatch(const model::ModelConfig& config, int64_t batch, uint64_t seed,
                                                int max_seq_len) {
  std::mt19937_64 rng(seed);
  reference::model::TrainBatch b;
  b.size = batch;
  for (const auto& f : config.features) {
    for (int64_t s = 0; s < batch; ++s) {
      const int64_t rows = config.tables[f.table_index].rows;
      const int64_t len = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(f.max_len));
      std::vector<int64_t> bag;
      for (int64_t k = 0; k < len; ++k) bag.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(rows)));
      b.sparse.push_back(bag);
    }
  }
  for (const auto& seq : config.sequences) {
    for (int64_t s = 0; s < batch; ++s) {
      const int cap = static_cast<int>(std::min<int64_t>(max_seq_len, seq.lmax));
      const int len = static_cast<int>(rng() % static_cast<uint64_t>(cap + 1));
      std::vector<int64_t> items, actions, dts;
      for (int k = 0; k < len; ++k) {
        items.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(config.tables[seq.item_table_index].rows)));
        actions.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(config.tables[seq.action_table_index].rows)));
        dts.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(config.tables[seq.dt_table_index].rows)));
      }
      b.item.push_back(items);
      b.action.push_back(actions);
      b.dt.push_back(dts);
    }
  }
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t k = 0; k < batch * config.dense.m; ++k) b.dense.push_back(normal(rng));
  for (int64_t k = 0; k < batch * config.NumTasks(); ++k) {
    b.labels.push_back((rng() % 4) == 0 ? 1.0f : 0.0f);
    b.masks.push_back(1.0f);
    b.true_p.push_back(0.25);
  }
  return b;
}

}  // namespace gemtb::testing

#endif  // GEMTB_TESTS_TRAINING_RANDOM_BATCH_H_
