// The model FLOPs of one training step on a real batch, whose samples have different sequence
// lengths: the ops that MFU counts (Op::local_mfu: GEMMs, attention), forward and backward, as
// EvaluateGraph (graph_costs.h) would add them up sample by sample. Every op's cost is affine in the
// batch's samples, tokens and attention pairs of at most one sequence, so a step's FLOPs are the
// ops' constant terms plus, per sample, one table entry per sequence (its length's FLOPs): a step of
// B samples costs B x J lookups.
#ifndef GEMTB_MODEL_DESCRIPTION_BATCH_FLOPS_H_
#define GEMTB_MODEL_DESCRIPTION_BATCH_FLOPS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/description/model_graph.h"

namespace gemtb::model {

class BatchFlops {
 public:
  static BatchFlops Create(const ModelGraph& graph);

  // Forward plus backward model FLOPs of `batch` samples; lengths[j * batch + b] = events of sample b
  // in sequence j (model/data's Batch::seq_lengths). InvalidArgument naming the entry when the sizes
  // do not fit or a length is outside [0, Lmax_j].
  absl::StatusOr<double> Of(absl::Span<const int32_t> lengths, int64_t batch) const;

 private:
  double constant_ = 0;                         // every op's batch-independent terms, once per step
  double per_sample_ = 0;                       // per sample, the ops of no sequence
  std::vector<std::vector<double>> by_length_;  // [j][l]: per sample, sequence j's ops at l events
};

}  // namespace gemtb::model

#endif  // GEMTB_MODEL_DESCRIPTION_BATCH_FLOPS_H_
