// Inputs after validation and RoPE: what the forward and backward loops read.
#ifndef GEMTB_REFERENCE_ATTENTION_PREPARED_H_
#define GEMTB_REFERENCE_ATTENTION_PREPARED_H_

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "reference/attention/attention.h"
#include "reference/attention/plan.h"

namespace gemtb::reference {

struct PreparedAttention {
  AttentionPlan plan;
  // Rotated copies when RoPE is on; otherwise empty and q()/k()/v() point at the inputs.
  std::vector<double> q_rot, k_rot, v_rot;
  const double* q = nullptr;
  const double* k = nullptr;
  const double* v = nullptr;
};

absl::StatusOr<PreparedAttention> Prepare(const AttentionInputs& in, const AttentionOptions& options,
                                          Precision precision);

// Runs `body` in a oneTBB arena of `threads` threads (0 = all). Results never depend on it.
void RunWithThreads(int threads, const std::function<void()>& body);

}  // namespace gemtb::reference

#endif  // GEMTB_REFERENCE_ATTENTION_PREPARED_H_
