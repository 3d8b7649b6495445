#include "tests/testing/attention_cases.h"

#include "tools/check/draw_case_shape.h"

namespace gemtb::testing {
namespace {

// Draws each structural choice through rapidcheck, which can then shrink it.
struct RapidcheckPicker {
  int64_t Int(int64_t lo, int64_t hi) { return *rc::gen::inRange<int64_t>(lo, hi + 1); }
  bool Bool() { return *rc::gen::arbitrary<bool>(); }
  uint64_t Seed() { return *rc::gen::arbitrary<uint64_t>(); }
};

}  // namespace

rc::Gen<check::CaseShape> GenCaseShape(const check::CaseConfig& config) {
  return rc::gen::exec([config] {
    RapidcheckPicker pick;
    return check::DrawCaseShape(pick, config);
  });
}

rc::Gen<check::AttentionCase> GenAttentionCase(const check::CaseConfig& config) {
  return rc::gen::map(GenCaseShape(config), [](const check::CaseShape& s) { return check::BuildCase(s); });
}

}  // namespace gemtb::testing
