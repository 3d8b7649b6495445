#include "model/description/region_costs.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "model/description/graph_costs.h"

namespace gemtb::model {
namespace {

struct Passes {
  PassCost fwd, bwd;
};

Passes Costs(const Op& op, const OpCost& c) {
  Passes p;
  p.fwd = {c.flops_fwd, op.local_mfu ? c.flops_fwd : 0.0, c.bytes_fwd};
  p.bwd = {c.flops_bwd, op.local_mfu ? c.flops_bwd : 0.0, c.bytes_bwd};
  return p;
}

PassCost Minus(PassCost a, const PassCost& b) {
  a.flops -= b.flops;
  a.model_flops -= b.model_flops;
  a.bytes -= b.bytes;
  return a;
}

}  // namespace

RegionCosts RegionCosts::Create(const ModelGraph& graph) {
  RegionCosts c;
  const size_t J = graph.sequences.size();
  std::map<std::string, size_t> index;
  for (const Op& op : graph.ops) {
    auto [it, inserted] = index.emplace(op.region, c.regions_.size());
    if (inserted) {
      c.regions_.push_back(op.region);
      c.constant_.emplace_back();
      c.per_sample_.emplace_back();
      c.by_length_.emplace_back(J);
      for (size_t j = 0; j < J; ++j) c.by_length_.back()[j].resize(static_cast<size_t>(graph.sequences[j].lmax + 1));
    }
    const size_t r = it->second;
    const std::vector<int64_t> none(J, 0);
    // A batch of 0 samples leaves an op its constant terms only.
    const Passes constant = Costs(op, EvaluateOp(graph, op, 0, none));
    c.constant_[r].fwd += constant.fwd;
    c.constant_[r].bwd += constant.bwd;
    if (op.seq.has_value() && *op.seq >= 0 && static_cast<size_t>(*op.seq) < J) {
      const size_t j = static_cast<size_t>(*op.seq);
      std::vector<int64_t> lengths(J, 0);
      std::vector<Table>& table = c.by_length_[r][j];
      for (size_t l = 0; l < table.size(); ++l) {
        lengths[j] = static_cast<int64_t>(l);
        const Passes one = Costs(op, EvaluateOp(graph, op, 1, lengths));
        table[l].fwd += Minus(one.fwd, constant.fwd);
        table[l].bwd += Minus(one.bwd, constant.bwd);
      }
    } else {
      const Passes one = Costs(op, EvaluateOp(graph, op, 1, none));
      c.per_sample_[r].fwd += Minus(one.fwd, constant.fwd);
      c.per_sample_[r].bwd += Minus(one.bwd, constant.bwd);
    }
  }
  return c;
}

absl::StatusOr<std::vector<RegionCost>> RegionCosts::Of(absl::Span<const int32_t> lengths, int64_t batch) const {
  const size_t J = by_length_.empty() ? 0 : by_length_.front().size();
  if (batch < 0 || lengths.size() != J * static_cast<size_t>(batch))
    return absl::InvalidArgumentError(absl::StrCat("lengths: ", lengths.size(), " entries for batch ", batch, " and ", J,
                                                   " sequences (want batch x sequences)"));
  for (size_t j = 0; j < J; ++j) {
    const size_t lmax = by_length_.front()[j].size() - 1;
    for (int64_t b = 0; b < batch; ++b) {
      const int32_t l = lengths[j * static_cast<size_t>(batch) + static_cast<size_t>(b)];
      if (l < 0 || static_cast<size_t>(l) > lmax)
        return absl::InvalidArgumentError(
            absl::StrCat("lengths[", j, " * batch + ", b, "]: ", l, " events, want 0 .. ", lmax));
    }
  }
  std::vector<RegionCost> out(regions_.size());
  const double samples = static_cast<double>(batch);
  for (size_t r = 0; r < regions_.size(); ++r) {
    RegionCost& rc = out[r];
    rc.region = regions_[r];
    rc.fwd = constant_[r].fwd;
    rc.bwd = constant_[r].bwd;
    rc.fwd += PassCost{samples * per_sample_[r].fwd.flops, samples * per_sample_[r].fwd.model_flops,
                       samples * per_sample_[r].fwd.bytes};
    rc.bwd += PassCost{samples * per_sample_[r].bwd.flops, samples * per_sample_[r].bwd.model_flops,
                       samples * per_sample_[r].bwd.bytes};
    for (size_t j = 0; j < J; ++j) {
      const std::vector<Table>& table = by_length_[r][j];
      for (int64_t b = 0; b < batch; ++b) {
        const Table& t = table[static_cast<size_t>(lengths[j * static_cast<size_t>(batch) + static_cast<size_t>(b)])];
        rc.fwd += t.fwd;
        rc.bwd += t.bwd;
      }
    }
  }
  return out;
}

}  // namespace gemtb::model
