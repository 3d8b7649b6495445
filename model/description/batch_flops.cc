#include "model/description/batch_flops.h"

#include <utility>
#include <vector>

namespace gemtb::model {

BatchFlops BatchFlops::Create(const ModelGraph& graph) { return BatchFlops(RegionCosts::Create(graph)); }

absl::StatusOr<double> BatchFlops::Of(absl::Span<const int32_t> lengths, int64_t batch) const {
  absl::StatusOr<std::vector<RegionCost>> regions = costs_.Of(lengths, batch);
  if (!regions.ok()) return regions.status();
  double total = 0;
  for (const RegionCost& r : *regions) total += r.fwd.model_flops + r.bwd.model_flops;
  return total;
}

}  // namespace gemtb::model
