#include "sim/workload/sparse_bytes.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/sharding/comm_pattern.h"

namespace gemtb::sim {
namespace {

// The comm report's phase of a sparse task of the template: its call site's (model/sharding's
// pattern); global balancing's exchange belongs to the forward.
std::string PhaseOf(const std::string& task) {
  for (int k = 0; k < kNumCommSites; ++k) {
    const CommSite site = static_cast<CommSite>(k);
    if (task != absl::StrCat("sparse.", CommSiteName(site))) continue;
    switch (CommSitePhase(site)) {
      case CommPhase::kForward: return "fwd";
      case CommPhase::kBackward: return "bwd";
      case CommPhase::kSync: return "sync";
    }
  }
  return "fwd";
}

}  // namespace

absl::StatusOr<std::vector<double>> ExplicitStatsRow(const StatLayout& layout, int64_t samples,
                                                     absl::Span<const int64_t> tokens) {
  if (samples < 0) return absl::InvalidArgumentError(absl::StrCat("samples: ", samples, " < 0"));
  if (static_cast<int>(tokens.size()) != layout.sequences) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokens: ", tokens.size(), " entries, the model has ", layout.sequences, " sequences"));
  }
  std::vector<double> row(layout.size(), 0.0);
  row[StatLayout::kOne] = 1.0;
  row[StatLayout::kB] = static_cast<double>(samples);
  for (int j = 0; j < layout.sequences; ++j) {
    if (tokens[j] < 0) return absl::InvalidArgumentError(absl::StrCat("tokens[", j, "]: ", tokens[j], " < 0"));
    row[layout.N(j)] = static_cast<double>(tokens[j]);
  }
  return row;
}

absl::StatusOr<std::vector<SparseCollectiveBytes>> SparseStepBytes(const StepTemplate& tpl,
                                                                   absl::Span<const double> stats, int world,
                                                                   int64_t step) {
  const size_t width = static_cast<size_t>(tpl.layout.size());
  if (world <= 0 || stats.size() != width * static_cast<size_t>(world)) {
    return absl::InvalidArgumentError(
        absl::StrCat("stats: ", stats.size(), " values, expected ", world, " ranks x ", width));
  }
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat("step: ", step, " < 0"));
  std::vector<SparseCollectiveBytes> out;
  for (const TaskTemplate& task : tpl.tasks) {
    if (!task.collective || !absl::StartsWith(task.name, "sparse.")) continue;
    if (task.period > 1 && (step + 1) % task.period != 0) continue;
    const GroupLayout& layout = tpl.layouts[task.layout];
    if (layout.size * layout.count != world) {
      return absl::InvalidArgumentError(absl::StrCat("world: ", world, " ranks, task ", task.name, "'s groups cover ",
                                                     layout.size * layout.count));
    }
    for (int g = 0; g < layout.count; ++g) {
      SparseCollectiveBytes c;
      c.task = task.name;
      c.phase = PhaseOf(task.name);
      c.group_class = task.group_class;
      c.op = task.op;
      for (int p = 0; p < layout.size; ++p) {
        const int rank = layout.Member(g, p);
        c.group.push_back(rank);
        c.bytes.push_back(task.bytes.Eval(stats.subspan(static_cast<size_t>(rank) * width, width)));
      }
      out.push_back(std::move(c));
    }
  }
  return out;
}

}  // namespace gemtb::sim
