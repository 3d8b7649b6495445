#include "reference/model/batch.h"

#include "absl/strings/str_cat.h"
#include "model/description/gem_geometry.h"

namespace gemtb::reference::model {

EmbeddingConfig ModelEmbeddingConfig(const gemtb::model::ModelConfig& config, float table_lr, uint64_t seed) {
  return gemtb::model::GemEmbeddingConfig(config, table_lr, seed);
}

KeyedJaggedTensor KjtOfBatch(const data::Batch& batch) {
  KeyedJaggedTensor kjt;
  kjt.keys = batch.keys;
  kjt.stride = batch.size;
  kjt.lengths = batch.lengths;
  kjt.values = batch.values;
  return kjt;
}

KeyedJaggedTensor BatchKjt(const gemtb::model::ModelConfig& config, const TrainBatch& batch) {
  KeyedJaggedTensor kjt;
  const int64_t B = batch.size;
  kjt.stride = B;
  auto add_key = [&](const std::string& key, const std::vector<std::vector<int64_t>>& bags, size_t first) {
    kjt.keys.push_back(key);
    for (int64_t b = 0; b < B; ++b) {
      const std::vector<int64_t>& bag = bags[first + static_cast<size_t>(b)];
      kjt.lengths.push_back(static_cast<int32_t>(bag.size()));
      kjt.values.insert(kjt.values.end(), bag.begin(), bag.end());
    }
  };
  for (size_t f = 0; f < config.features.size(); ++f) add_key(config.features[f].name, batch.sparse, f * B);
  for (size_t j = 0; j < config.sequences.size(); ++j) {
    const std::string& n = config.sequences[j].name;
    add_key(n + ".item", batch.item, j * B);
    add_key(n + ".action", batch.action, j * B);
    add_key(n + ".dt", batch.dt, j * B);
  }
  return kjt;
}

}  // namespace gemtb::reference::model
