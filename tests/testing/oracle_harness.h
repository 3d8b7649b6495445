// GoogleTest-style comparisons of oracle results (tools/check/oracle_run.h runs the oracle), shared
// by the attention property tests (tests/attention/).
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
#include "tools/check/oracle_run.h"

namespace gemtb::testing {

// max|got-want| <= tolerance * max(max|want|, 1) (sizes must match). The floor of 1 keeps tensors
// whose exact value is 0 (a softmax row with one key has dS = P̂(post·dP - D) = 0 up to rounding
// of terms of size ~1) from failing on rounding noise, like numpy's allclose with atol = rtol.
::testing::AssertionResult AllClose(std::string_view what, absl::Span<const double> got,
                                    absl::Span<const double> want, double tolerance);

// LSE: -inf in the same places; finite entries within tolerance * max(1, max|finite want|).
::testing::AssertionResult LseClose(std::string_view what, absl::Span<const double> got,
                                    absl::Span<const double> want, double tolerance);

// O, LSE and (when the run has them) every gradient of `run` against the padded reference.
::testing::AssertionResult MatchesPadded(const check::OracleRun& run, const PaddedResult& want,
                                         double tolerance);

// Every output and gradient of `a` has the same bytes as in `b` (and the same shapes).
::testing::AssertionResult BitIdentical(const check::OracleRun& a, const check::OracleRun& b);

// No NaN in any output or gradient (LSE may be -inf, nothing may be +inf).
::testing::AssertionResult HasNoNaN(const check::OracleRun& run);

// Inside a rapidcheck property: fails the property with the assertion's message and the case.
void RcRequire(const ::testing::AssertionResult& result, const check::AttentionCase& c);
void RcRequireOk(const absl::Status& status, const check::AttentionCase& c);

}  // namespace gemtb::testing

#endif  // GEMTB_TESTS_TESTING_ORACLE_HARNESS_H_
