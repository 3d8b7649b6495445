// The data set `gemtb data generate` writes and gemtb.data.generate returns: samples first ..
// first+N-1 of the planted-teacher generator as the arrays of npy_dataset.h (plus surface.npy), and
// meta.json with each task's oracle NE (the NE of the true probabilities: the best any model can
// reach on those samples). The bytes depend only on (config, data parameters, seed, indices).
#ifndef GEMTB_REFERENCE_MODEL_GENERATED_SET_H_
#define GEMTB_REFERENCE_MODEL_GENERATED_SET_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "model/data/data_params.h"
#include "model/description/model_config.h"
#include "model/metrics/ne.h"
#include "reference/io/npy.h"

namespace gemtb::reference::model {

struct GeneratedTask {
  std::string name;
  metrics::NeResult oracle;  // over the masked samples
  bool defined = false;      // NE has a meaning: some positives and some negatives
};

struct GeneratedSet {
  // lengths, ids, seq_lengths, dense, surface, labels, masks, probs: file names without ".npy", in
  // the order the command writes them.
  std::vector<std::pair<std::string, io::NpyArray>> arrays;
  std::vector<GeneratedTask> tasks;
  std::string meta_json;  // meta.json's text
};

// Samples first .. first+samples-1 with `seed`; `threads` worker threads (0: all cores) change only
// the time taken. The arguments are the caller's to check (samples >= 1, first >= 0, seed >= 0);
// a generator the parameters cannot make is the error.
absl::StatusOr<GeneratedSet> GenerateSet(const ::gemtb::model::ModelConfig& config, const data::DataParams& params,
                                         int64_t samples, int64_t first, int64_t seed, int threads);

}  // namespace gemtb::reference::model

#endif  // GEMTB_REFERENCE_MODEL_GENERATED_SET_H_
