// The model FLOPs of one training step on a real batch, whose samples have different sequence
// lengths: the ops that MFU counts (Op::local_mfu: GEMMs, attention), forward and backward, as
// EvaluateGraph (graph_costs.h) would add them up sample by sample: the model FLOPs of every region
// of RegionCosts (region_costs.h), summed.
#ifndef GEMTB_MODEL_DESCRIPTION_BATCH_FLOPS_H_
#define GEMTB_MODEL_DESCRIPTION_BATCH_FLOPS_H_

#include <cstdint>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/description/model_graph.h"
#include "model/description/region_costs.h"

namespace gemtb::model {

class BatchFlops {
 public:
  static BatchFlops Create(const ModelGraph& graph);

  // Forward plus backward model FLOPs of `batch` samples; lengths[j * batch + b] = events of sample b
  // in sequence j (model/data's Batch::seq_lengths). InvalidArgument naming the entry when the sizes
  // do not fit or a length is outside [0, Lmax_j].
  absl::StatusOr<double> Of(absl::Span<const int32_t> lengths, int64_t batch) const;

 private:
  explicit BatchFlops(RegionCosts costs) : costs_(std::move(costs)) {}
  RegionCosts costs_;
};

}  // namespace gemtb::model

#endif  // GEMTB_MODEL_DESCRIPTION_BATCH_FLOPS_H_
