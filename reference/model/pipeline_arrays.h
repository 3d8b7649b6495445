// The semi-synchronous pipeline's pending lookups (model/description/train_options.h) as arrays of a
// checkpoint, written and read the same way by the oracle's trainer and `gemtb train`:
//   "pipeline.pooled" f32 [B, W]; per NONE feature of the embedding config, in feature order,
//   "pipeline.sequence.<key>" f32 [ids, D].
#ifndef GEMTB_REFERENCE_MODEL_PIPELINE_ARRAYS_H_
#define GEMTB_REFERENCE_MODEL_PIPELINE_ARRAYS_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "model/embedding/embedding_config.h"
#include "reference/model/checkpoint.h"

namespace gemtb::reference::model {

struct PipelineLookups {
  std::vector<float> pooled;                   // [B, W]
  std::vector<std::vector<float>> sequence;    // per NONE feature, [ids, D]
};

// Appends the arrays of `lookups` for a batch of `batch` samples.
void AppendPipelineArrays(const EmbeddingConfig& emb, int64_t batch, const PipelineLookups& lookups,
                          NamedArrays* out);

// The pending lookups of a state at `step` for a run with (`semi_sync`) or without the pipeline:
// nullopt when the run needs none. FailedPrecondition when the arrays do not fit the run (lookups in
// a synchronous run's state, none after step 0 of a semi-synchronous one) or one is missing or not
// float32, naming it. Sizes are the caller's to check against its batch.
absl::StatusOr<std::optional<PipelineLookups>> ReadPipelineArrays(const NamedArrays& arrays, const EmbeddingConfig& emb,
                                                                  bool semi_sync, int64_t step);

}  // namespace gemtb::reference::model

#endif  // GEMTB_REFERENCE_MODEL_PIPELINE_ARRAYS_H_
