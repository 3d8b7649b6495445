#include "tools/check/oracle_run.h"

#include <utility>

namespace gemtb::check {

absl::StatusOr<OracleRun> RunOracleForward(const AttentionCase& c,
                                           const reference::ExecutionOptions& exec) {
  OracleRun run;
  absl::StatusOr<reference::AttentionForwardResult> fwd =
      reference::AttentionForward(c.View(), c.options, exec);
  if (!fwd.ok()) return fwd.status();
  run.fwd = *std::move(fwd);
  return run;
}

absl::StatusOr<OracleRun> RunOracle(const AttentionCase& c, absl::Span<const double> d_o,
                                    const reference::ExecutionOptions& exec) {
  absl::StatusOr<OracleRun> run = RunOracleForward(c, exec);
  if (!run.ok()) return run;
  reference::TensorView<double> d_o_view{d_o, run->fwd.o_shape};
  absl::StatusOr<reference::AttentionBackwardResult> bwd =
      reference::AttentionBackward(c.View(), c.options, d_o_view, run->fwd, exec);
  if (!bwd.ok()) return bwd.status();
  run->bwd = *std::move(bwd);
  run->has_backward = true;
  return run;
}

}  // namespace gemtb::check
