// Samples assembled into a batch in the layouts the embedding oracle and the trainer take: one
// KeyedJaggedTensor (lengths int32 [K*B] key-major, values int64 key -> sample -> position)
// over the sparse features followed by, per sequence j, the keys "<seq>.item", "<seq>.action" and
// "<seq>.dt" (events oldest first), plus dense floats and per-task probabilities, labels and masks.
// Host only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/data/data_shape.h"
#include "model/data/generator.h"

namespace gemtb::data {

struct Batch {
  int64_t size = 0;                 // B
  std::vector<int64_t> indices;     // [B] sample indices
  std::vector<std::string> keys;    // K = F + 3J KJT keys (KjtKeys)
  std::vector<int32_t> lengths;     // [K*B], lengths[k*B + b]
  std::vector<int64_t> values;      // ids, key -> sample -> position
  std::vector<float> dense;         // [B, m]
  std::vector<int32_t> surface;     // [B]
  std::vector<int32_t> seq_lengths; // [J, B] events per sequence (= the item key's lengths)
  std::vector<double> prob;         // [B, T] true probabilities
  std::vector<uint8_t> label;       // [B, T]
  std::vector<uint8_t> mask;        // [B, T]
};

// The KJT keys of a shape: sparse feature names, then "<seq>.item", "<seq>.action", "<seq>.dt" per j.
inline std::vector<std::string> KjtKeys(const DataShape& shape) {
  std::vector<std::string> keys;
  for (const FeatureShape& f : shape.features) keys.push_back(f.name);
  for (const SequenceShape& s : shape.sequences) {
    keys.push_back(s.name + ".item");
    keys.push_back(s.name + ".action");
    keys.push_back(s.name + ".dt");
  }
  return keys;
}

// Assembles `count` samples (in order) into `batch`.
inline void AssembleBatch(const DataShape& shape, const Sample* samples, int64_t count, Batch* batch) {
  const size_t B = static_cast<size_t>(count);
  const size_t F = shape.features.size(), J = shape.sequences.size(), T = shape.tasks.size();
  const size_t m = static_cast<size_t>(shape.dense);
  batch->size = count;
  batch->keys = KjtKeys(shape);
  batch->indices.resize(B);
  batch->lengths.assign((F + 3 * J) * B, 0);
  batch->values.clear();
  batch->dense.resize(B * m);
  batch->surface.resize(B);
  batch->seq_lengths.resize(J * B);
  batch->prob.resize(B * T);
  batch->label.resize(B * T);
  batch->mask.resize(B * T);
  for (size_t f = 0; f < F; ++f) {
    for (size_t b = 0; b < B; ++b) {
      const std::vector<int64_t>& bag = samples[b].sparse[f];
      batch->lengths[f * B + b] = static_cast<int32_t>(bag.size());
      batch->values.insert(batch->values.end(), bag.begin(), bag.end());
    }
  }
  for (size_t j = 0; j < J; ++j) {
    for (size_t c = 0; c < 3; ++c) {
      const size_t key = F + 3 * j + c;
      for (size_t b = 0; b < B; ++b) {
        const SequenceEvents& ev = samples[b].sequences[j];
        const std::vector<int64_t>& ids = c == 0 ? ev.item : c == 1 ? ev.action : ev.dt;
        batch->lengths[key * B + b] = static_cast<int32_t>(ids.size());
        batch->values.insert(batch->values.end(), ids.begin(), ids.end());
        if (c == 0) batch->seq_lengths[j * B + b] = static_cast<int32_t>(ids.size());
      }
    }
  }
  for (size_t b = 0; b < B; ++b) {
    const Sample& s = samples[b];
    batch->indices[b] = s.index;
    batch->surface[b] = s.surface;
    for (size_t c = 0; c < m; ++c) batch->dense[b * m + c] = s.dense[c];
    for (size_t t = 0; t < T; ++t) {
      batch->prob[b * T + t] = s.prob[t];
      batch->label[b * T + t] = s.label[t];
      batch->mask[b * T + t] = s.mask[t];
    }
  }
}

// Samples first .. first + count - 1 of `seed` as one batch (single-threaded; parallel callers
// generate samples themselves and call AssembleBatch: the bits are the same).
inline Batch GenerateBatch(const Generator& generator, uint64_t seed, int64_t first, int64_t count) {
  std::vector<Sample> samples(static_cast<size_t>(count));
  for (int64_t b = 0; b < count; ++b) generator.Generate(seed, first + b, &samples[static_cast<size_t>(b)]);
  Batch batch;
  AssembleBatch(generator.shape(), samples.data(), count, &batch);
  return batch;
}

}  // namespace gemtb::data
