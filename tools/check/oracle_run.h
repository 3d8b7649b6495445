// Runs a random attention case through the oracle (reference/attention): forward, and backward with
// a given cotangent, in the oracle's fp64 mode or its emulate mode.
#ifndef GEMTB_TOOLS_CHECK_ORACLE_RUN_H_
#define GEMTB_TOOLS_CHECK_ORACLE_RUN_H_

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "reference/attention/attention.h"
#include "tools/check/attention_cases.h"

namespace gemtb::check {

struct OracleRun {
  reference::AttentionForwardResult fwd;
  reference::AttentionBackwardResult bwd;
  bool has_backward = false;
};

// Forward, then backward with cotangent `d_o` (O's shape; empty when O is).
absl::StatusOr<OracleRun> RunOracle(const AttentionCase& c, absl::Span<const double> d_o,
                                    const reference::ExecutionOptions& exec = {});
// Forward only.
absl::StatusOr<OracleRun> RunOracleForward(const AttentionCase& c,
                                           const reference::ExecutionOptions& exec = {});

}  // namespace gemtb::check

#endif  // GEMTB_TOOLS_CHECK_ORACLE_RUN_H_
