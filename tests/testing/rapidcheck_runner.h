// Runs a rapidcheck property inside a GoogleTest TEST with a per-property case count.
//
// RC_GTEST_PROP always runs rapidcheck's global max_success (100) cases; the attention properties
// differ in cost by orders of magnitude (finite differences vs a forward call), so each says how
// many cases it needs. RC_PARAMS still wins: with `RC_PARAMS="max_success=1000"` every property
// runs 1000 cases, and RC_PARAMS="seed=..." reproduces a run (the seed is printed with every
// failure).
#ifndef GEMTB_TESTS_TESTING_RAPIDCHECK_RUNNER_H_
#define GEMTB_TESTS_TESTING_RAPIDCHECK_RUNNER_H_

#include <sstream>
#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "rapidcheck.h"

namespace gemtb::testing {

// rapidcheck parameters for a property that should run `cases` successful cases by default.
rc::detail::TestParams PropertyParams(int cases);

// Checks `property` (a callable taking rapidcheck-generated arguments, using RC_ASSERT or *gen);
// a counterexample fails the current test with rapidcheck's report.
template <typename Testable>
void CheckProperty(int cases, Testable&& property) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  rc::detail::TestMetadata metadata;
  metadata.id = std::string(info->test_suite_name()) + "/" + info->name();
  metadata.description = info->name();
  const rc::detail::TestParams params = PropertyParams(cases);
  const auto result = rc::detail::checkTestable(std::forward<Testable>(property), metadata, params);
  if (!result.template is<rc::detail::SuccessResult>()) {
    std::ostringstream report;
    rc::detail::printResultMessage(result, report);
    ADD_FAILURE() << report.str() << "\n(rapidcheck seed " << params.seed << ")";
  }
}

}  // namespace gemtb::testing

#endif  // GEMTB_TESTS_TESTING_RAPIDCHECK_RUNNER_H_
