// A training set on disk in the layout `gemtb data generate` writes, so that `gemtb ref train --data
// DIR` trains on a generated folder or on a user's own samples. N samples, T tasks, K = F + 3J keys
// (the sparse features in config order, then per sequence "<seq>.item", "<seq>.action", "<seq>.dt"):
//   lengths.npy     int32 [K*N]  ids per (key, sample), key-major
//   ids.npy         int64 [sum of lengths]  key -> sample -> position; sequence events oldest first
//   seq_lengths.npy int32 [J, N] events per sequence (equal to its item, action and dt lengths)
//   dense.npy       float32 [N, m]
//   labels.npy      uint8 [N, T] 0/1;  masks.npy uint8 [N, T] 0/1 (1 = the label counts)
//   probs.npy       float64 [N, T] optional: the true probabilities, for the oracle NE
// Other files (surface.npy, meta.json) are not read. Every id must be a row of its key's table and
// every length at most the config's max_len (feature) or lmax (sequence).
#ifndef GEMTB_REFERENCE_MODEL_NPY_DATASET_H_
#define GEMTB_REFERENCE_MODEL_NPY_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/data/batch.h"
#include "model/data/data_shape.h"

namespace gemtb::reference::model {

struct NpyDataset {
  data::DataShape shape;
  int64_t size = 0;                   // N
  std::vector<int32_t> lengths;       // [K*N]
  std::vector<int64_t> starts;        // [K*N] where each (key, sample)'s ids start in `ids`
  std::vector<int64_t> ids;
  std::vector<int32_t> seq_lengths;   // [J, N]
  std::vector<float> dense;           // [N, m]
  std::vector<uint8_t> labels, masks; // [N, T]
  std::vector<double> probs;          // [N, T]; NaN when probs.npy is absent
  bool has_probs = false;
};

// Reads and validates `dir` against `shape` (ShapeFromConfig of the model config); InvalidArgument
// naming the file, the index and the value otherwise.
absl::StatusOr<NpyDataset> LoadNpyDataset(const std::string& dir, const data::DataShape& shape);

// Samples (first + b) mod N, b in [0, count), as one batch (the set repeats in epochs).
data::Batch DatasetBatch(const NpyDataset& set, int64_t first, int64_t count);

}  // namespace gemtb::reference::model

#endif  // GEMTB_REFERENCE_MODEL_NPY_DATASET_H_
