// The FLOPs and HBM bytes of every region (layer) of the model graph on a real batch, whose samples
// have different sequence lengths: per region and pass, the sum over its ops of EvaluateOp
// (graph_costs.h) sample by sample. `gemtb bench layers` divides them by measured layer times to get
// each layer's MFU, its roofline and the efficiency the simulator prices the layer at.
//
// Every op's cost is affine in one sequence's tokens and pairs per sample, so the
// costs are tabulated once per (region, sequence, length) and a batch costs B x J lookups per region.
#ifndef GEMTB_MODEL_DESCRIPTION_REGION_COSTS_H_
#define GEMTB_MODEL_DESCRIPTION_REGION_COSTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/description/model_graph.h"

namespace gemtb::model {

// One pass (forward or backward) of one region.
struct PassCost {
  double flops = 0;        // every op of the region (norms and pointwise ops too)
  double model_flops = 0;  // the ops MFU counts (Op::local_mfu: GEMMs, attention)
  double bytes = 0;        // HBM traffic as model.json counts it (bf16 activations and weights)
  PassCost& operator+=(const PassCost& o) {
    flops += o.flops;
    model_flops += o.model_flops;
    bytes += o.bytes;
    return *this;
  }
};

struct RegionCost {
  std::string region;  // model.json's region name: "E.dense", "L1.cross", ..., "head"
  PassCost fwd, bwd;
};

class RegionCosts {
 public:
  static RegionCosts Create(const ModelGraph& graph);

  // The regions in the graph's order of first appearance.
  const std::vector<std::string>& regions() const { return regions_; }

  // Per region (in regions() order), the costs of `batch` samples; lengths[j * batch + b] = events of
  // sample b in sequence j (model/data's Batch::seq_lengths). InvalidArgument naming the entry when
  // the sizes do not fit or a length is outside [0, Lmax_j].
  absl::StatusOr<std::vector<RegionCost>> Of(absl::Span<const int32_t> lengths, int64_t batch) const;

 private:
  struct Table {
    PassCost fwd, bwd;
  };
  std::vector<std::string> regions_;
  std::vector<Table> constant_;                       // [r]: batch-independent terms, once per step
  std::vector<Table> per_sample_;                     // [r]: per sample, the ops of no sequence
  std::vector<std::vector<std::vector<Table>>> by_length_;  // [r][j][l]: per sample, sequence j's ops at l events
};

}  // namespace gemtb::model

#endif  // GEMTB_MODEL_DESCRIPTION_REGION_COSTS_H_
