// An independent padded-and-masked fp64 attention, written again from the definitions of masks,
// activations and backward.
//
// The oracle walks jagged rows and key ranges; this pads every output sequence to
// [B, H, maxLq, maxLk] (shared K/V heads, kv_index and broadcast_q materialised per output
// sequence and query head), builds an explicit boolean mask matrix from the mask formulas, and runs
// plain loops over the padded blocks. It shares no code with reference/ beyond the option enums, so
// "jagged == padded" compares two derivations of the definition, not one code path with itself.
// Slow (O(B·H·maxLq·maxLk·D)) and meant for small cases.
#ifndef GEMTB_TESTS_TESTING_PADDED_ATTENTION_H_
#define GEMTB_TESTS_TESTING_PADDED_ATTENTION_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/types/span.h"
#include "model/attention/attention_options.h"
#include "tools/check/attention_cases.h"
#include "tools/check/spec_mask.h"

namespace gemtb::testing {

// activations and their (left) derivatives, for the pointwise acts.
double ActValue(Activation act, double x);
double ActDerivative(Activation act, double x);

// Results in the oracle's jagged layouts (O [TO,H,Dv], LSE [H,TO], gradients in input shapes).
struct PaddedResult {
  std::vector<double> o, lse;
  std::vector<double> dq, dk, dv;
  std::vector<double> d_bias_dense, d_bias_rel, d_bias_ts;
};

// Overrides the mask: valid(b, i, j) for output sequence b, local query i, local key j.
using MaskOverride = std::function<bool(int64_t b, int64_t i, int64_t j)>;

// Forward and backward with cotangent `d_o` ([TO,H,Dv]; empty when O is).
PaddedResult PaddedAttention(const check::AttentionCase& c, absl::Span<const double> d_o,
                             const MaskOverride& mask = nullptr);
// Forward only (the gradient fields stay empty).
PaddedResult PaddedAttentionForward(const check::AttentionCase& c, const MaskOverride& mask = nullptr);

// Every scaled score S_ij on a valid pair (for staying away from activation kinks).
std::vector<double> ValidScores(const check::AttentionCase& c);

// Number of valid (b, h, i, j) pairs per query head, i.e. the `pairs` of the FLOP count.
int64_t CountValidPairs(const check::AttentionCase& c);

}  // namespace gemtb::testing

#endif  // GEMTB_TESTS_TESTING_PADDED_ATTENTION_H_
