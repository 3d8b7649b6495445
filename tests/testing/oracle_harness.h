// Calls into the oracle and GoogleTest-style comparisons of its results, shared by the attention
// property tests (tests/attention/).
#ifndef GEMTB_TESTS_TESTING_ORACLE_HARNESS_H_
#define GEMTB_TESTS_TESTING_ORACLE_HARNESS_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "reference/attention/attention.h"
#include "tests/testing/attention_cases.h"
#include "tests/testing/padded_attention.h"

namespace gemtb::testing {

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

// max|got-want| <= tolerance * max(max|want|, 1) (sizes must match). The floor of 1 keeps tensors
// whose exact value is 0 (a softmax row with one key has dS = P̂(post·dP - D) = 0 up to rounding
// of terms of size ~1) from failing on rounding noise, like numpy's allclose with atol = rtol.
::testing::AssertionResult AllClose(std::string_view what, absl::Span<const double> got,
                                    absl::Span<const double> want, double tolerance);

// LSE: -inf in the same places; finite entries within tolerance * max(1, max|finite want|).
::testing::AssertionResult LseClose(std::string_view what, absl::Span<const double> got,
                                    absl::Span<const double> want, double tolerance);

// O, LSE and (when the run has them) every gradient of `run` against the padded reference.
::testing::AssertionResult MatchesPadded(const OracleRun& run, const PaddedResult& want,
                                         double tolerance);

// Every output and gradient of `a` has the same bytes as in `b` (and the same shapes).
::testing::AssertionResult BitIdentical(const OracleRun& a, const OracleRun& b);

// No NaN in any output or gradient (LSE may be -inf, nothing may be +inf).
::testing::AssertionResult HasNoNaN(const OracleRun& run);

// Inside a rapidcheck property: fails the property with the assertion's message and the case.
void RcRequire(const ::testing::AssertionResult& result, const AttentionCase& c);
void RcRequireOk(const absl::Status& status, const AttentionCase& c);

}  // namespace gemtb::testing

#endif  // GEMTB_TESTS_TESTING_ORACLE_HARNESS_H_
