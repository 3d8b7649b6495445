// Attention outputs computed elsewhere (another kernel, another framework) judged against the
// oracle with the GPU criteria, as `gemtb ref compare` does: the oracle's fp64 and
// emulate-mode outputs of one call, and the verdicts on one tensor.
#ifndef GEMTB_TOOLS_CHECK_ATTENTION_COMPARE_H_
#define GEMTB_TOOLS_CHECK_ATTENTION_COMPARE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/attention/attention_options.h"
#include "model/common/element_type.h"
#include "reference/attention/attention.h"
#include "tools/check/criteria.h"

namespace gemtb::check {

// One output of the call, from the oracle (`ref`) and its emulate mode (`emu`).
struct ReferenceTensor {
  std::string file;  // the name the CLI reads and writes it under: "o.npy", "lse.npy", "dq.npy", ...
  std::vector<double> ref, emu;
  std::vector<int64_t> shape;  // empty when the call has no such output
  ElementType dtype;           // the dtype whose ulp bounds the error
  bool gradient;
  bool lse;
};

// O and LSE, and with a cotangent `d_o` dQ, dK, dV and the bias gradients, in both modes.
absl::StatusOr<std::vector<ReferenceTensor>> ReferenceOutputs(
    const reference::AttentionInputs& inputs, const AttentionOptions& options,
    const std::optional<reference::TensorView<double>>& d_o, int threads);

// LSE: the LSE criterion; every other tensor: the primary and the secondary (rel-L2) criterion.
std::vector<Verdict> JudgeTensor(const ReferenceTensor& t, absl::Span<const double> got);

}  // namespace gemtb::check

#endif  // GEMTB_TOOLS_CHECK_ATTENTION_COMPARE_H_
