#include "model/description/batch_flops.h"

#include "absl/strings/str_cat.h"
#include "model/description/graph_costs.h"

namespace gemtb::model {
namespace {

double Flops(const OpCost& c) { return c.flops_fwd + c.flops_bwd; }

}  // namespace

BatchFlops BatchFlops::Create(const ModelGraph& graph) {
  BatchFlops f;
  const size_t J = graph.sequences.size();
  f.by_length_.resize(J);
  for (size_t j = 0; j < J; ++j) f.by_length_[j].assign(static_cast<size_t>(graph.sequences[j].lmax + 1), 0.0);
  const std::vector<int64_t> none(J, 0);
  for (const Op& op : graph.ops) {
    if (!op.local_mfu) continue;
    // A batch of 0 samples leaves an op its constant terms only.
    const double constant = Flops(EvaluateOp(graph, op, 0, none));
    f.constant_ += constant;
    if (op.seq.has_value() && *op.seq >= 0 && static_cast<size_t>(*op.seq) < J) {
      const size_t j = static_cast<size_t>(*op.seq);
      std::vector<int64_t> lengths(J, 0);
      for (size_t l = 0; l < f.by_length_[j].size(); ++l) {
        lengths[j] = static_cast<int64_t>(l);
        f.by_length_[j][l] += Flops(EvaluateOp(graph, op, 1, lengths)) - constant;
      }
    } else {
      f.per_sample_ += Flops(EvaluateOp(graph, op, 1, none)) - constant;
    }
  }
  return f;
}

absl::StatusOr<double> BatchFlops::Of(absl::Span<const int32_t> lengths, int64_t batch) const {
  const size_t J = by_length_.size();
  if (batch < 0 || lengths.size() != J * static_cast<size_t>(batch))
    return absl::InvalidArgumentError(absl::StrCat("lengths: ", lengths.size(), " entries for batch ", batch, " and ", J,
                                                   " sequences (want batch x sequences)"));
  double total = constant_ + static_cast<double>(batch) * per_sample_;
  for (size_t j = 0; j < J; ++j) {
    for (int64_t b = 0; b < batch; ++b) {
      const int32_t l = lengths[j * static_cast<size_t>(batch) + static_cast<size_t>(b)];
      if (l < 0 || static_cast<size_t>(l) >= by_length_[j].size())
        return absl::InvalidArgumentError(absl::StrCat("lengths[", j, " * batch + ", b, "]: ", l, " events, want 0 .. ",
                                                       by_length_[j].size() - 1));
      total += by_length_[j][static_cast<size_t>(l)];
    }
  }
  return total;
}

}  // namespace gemtb::model
