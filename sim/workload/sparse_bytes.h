// The sparse collectives of one step evaluated on explicit per-rank batches:
// the step template's own byte formulas (step_template.cc, BuildSparse and the sparse backward),
// read per call site and per group instead of being folded into the event run, so that a test can
// compare them with the oracle's communication report for the same
// plan and batch. Nothing here computes bytes: every value is a template task's StatAffine
// evaluated on the rank's statistics row.
#ifndef GEMTB_SIM_WORKLOAD_SPARSE_BYTES_H_
#define GEMTB_SIM_WORKLOAD_SPARSE_BYTES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "sim/workload/batch_stats.h"
#include "sim/workload/step_template.h"

namespace gemtb::sim {

// One sparse collective call site of the template, issued by one group.
struct SparseCollectiveBytes {
  std::string task;        // template task name, e.g. "sparse.ids_a2a"
  std::string phase;       // the comm report's phase: "fwd" | "bwd" | "sync"
  GroupClass group_class = GroupClass::kSparseMp;
  CollectiveOp op = CollectiveOp::kAllToAll;
  std::vector<int> group;     // global ranks in group order
  std::vector<double> bytes;  // S (nccl-tests' convention) per member, in group order
};

// The statistics row of one rank's explicit batch: `samples` local samples and, per model sequence
// j, its tokens N_j (ids plus CLS tokens). P_j and X are left 0: no sparse byte depends on them.
// InvalidArgument when the token count does not match the layout's sequences or a count is < 0.
absl::StatusOr<std::vector<double>> ExplicitStatsRow(const StatLayout& layout, int64_t samples,
                                                     absl::Span<const int64_t> tokens);

// Every sparse collective ("sparse.*" tasks) of step `step` (0-based; a task with period k is issued
// when (step + 1) % k == 0, as the engine does), per group of its layout, with each member's S from
// its row of `stats` (row-major [rank][layout.size()], `world` rows). Tasks in template order, groups
// in ascending group index.
absl::StatusOr<std::vector<SparseCollectiveBytes>> SparseStepBytes(const StepTemplate& tpl,
                                                                   absl::Span<const double> stats, int world,
                                                                   int64_t step = 0);

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_WORKLOAD_SPARSE_BYTES_H_
