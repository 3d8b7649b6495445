#include "reference/model/batch.h"

#include "absl/strings/str_cat.h"
#include "model/embedding/embedding_math.h"

namespace gemtb::reference::model {

EmbeddingConfig ModelEmbeddingConfig(const gemtb::model::ModelConfig& config, float table_lr, uint64_t seed) {
  EmbeddingConfig e;
  e.seed = seed;
  for (size_t t = 0; t < config.tables.size(); ++t) {
    const gemtb::model::TableSpec& spec = config.tables[t];
    TableConfig tc;
    tc.name = spec.name;
    tc.rows = spec.rows;
    tc.dim = spec.dim;
    tc.dtype = ElementType::kFloat32;
    tc.hashing = spec.hashing;
    tc.bounds = BoundsMode::kError;
    tc.hash_seed = embedding::DefaultHashSeed(static_cast<int>(t));
    tc.optimizer.kind = OptimizerKind::kRowwiseAdagrad;
    tc.optimizer.lr = table_lr;
    e.tables.push_back(tc);
  }
  for (const auto& f : config.features) {
    FeatureConfig fc;
    fc.key = f.name;
    fc.table = f.table_index;
    fc.pooling = f.pooling;
    fc.max_len = f.max_len;
    e.features.push_back(fc);
  }
  for (const auto& s : config.sequences) {
    const int tables[3] = {s.item_table_index, s.action_table_index, s.dt_table_index};
    const char* parts[3] = {"item", "action", "dt"};
    for (int k = 0; k < 3; ++k) {
      FeatureConfig fc;
      fc.key = absl::StrCat(s.name, ".", parts[k]);
      fc.table = tables[k];
      fc.pooling = Pooling::kNone;
      fc.max_len = s.lmax;
      e.features.push_back(fc);
    }
  }
  return e;
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
