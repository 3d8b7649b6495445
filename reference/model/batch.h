// A training batch as the reference model reads it (raw ids, before hashing), and the embedding
// configuration the model's tables use.
#ifndef GEMTB_REFERENCE_MODEL_BATCH_H_
#define GEMTB_REFERENCE_MODEL_BATCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "model/data/batch.h"
#include "model/description/model_config.h"
#include "model/embedding/embedding_config.h"
#include "reference/embedding/kjt.h"

namespace gemtb::reference::model {

struct TrainBatch {
  int64_t size = 0;                             // B
  std::vector<std::vector<int64_t>> sparse;     // [F*B], key-major: bag of feature f, sample b at f*B+b
  std::vector<std::vector<int64_t>> item, action, dt;  // [J*B]: sequence j, sample b at j*B+b (oldest first)
  std::vector<float> dense;                     // [B, m]
  std::vector<float> labels, masks;             // [B, T]
  std::vector<double> true_p;                   // [B, T] the teacher's probabilities (oracle NE)
};

// The model's tables as TBE tables (fp32, the config's hashing, bounds error, rowwise Adagrad with
// `table_lr`); features: the sparse features in key order (their pooling), then per sequence j the
// item, action and dt features ("<seq>.item", ...) with NONE pooling. Sequence bags hold at most Lmax ids.
EmbeddingConfig ModelEmbeddingConfig(const gemtb::model::ModelConfig& config, float table_lr, uint64_t seed);

// The batch as one KJT over ModelEmbeddingConfig's features.
KeyedJaggedTensor BatchKjt(const gemtb::model::ModelConfig& config, const TrainBatch& batch);

// A batch of model/data's generator as one KJT over the same features: its keys, lengths and ids
// (the generator's features are unweighted).
KeyedJaggedTensor KjtOfBatch(const data::Batch& batch);

}  // namespace gemtb::reference::model

#endif  // GEMTB_REFERENCE_MODEL_BATCH_H_
