// The random attention cases of tools/check/attention_cases.h, plus rapidcheck generators of the
// same distribution for the property suite; they shrink towards fewer and shorter sequences.
#ifndef GEMTB_TESTS_TESTING_ATTENTION_CASES_H_
#define GEMTB_TESTS_TESTING_ATTENTION_CASES_H_

#include "rapidcheck.h"
#include "tools/check/attention_cases.h"

namespace gemtb::testing {

rc::Gen<check::CaseShape> GenCaseShape(const check::CaseConfig& config);
rc::Gen<check::AttentionCase> GenAttentionCase(const check::CaseConfig& config);

}  // namespace gemtb::testing

#endif  // GEMTB_TESTS_TESTING_ATTENTION_CASES_H_
