// Entry-point validation (attention.h): every malformed input is rejected with
// InvalidArgument whose message names the offending field and its value, by ValidateAttention and
// by AttentionForward alike (and by AttentionBackward for dO).
#include <cmath>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/attention_cases.h"
#include "tests/testing/oracle_harness.h"
#include "tests/testing/status_matchers.h"

namespace gemtb {
namespace {

using check::AttentionCase;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using testing::StatusIs;
using StringMatcher = ::testing::Matcher<const std::string&>;

// Self-attention with everything attached: lengths {13, 17}, H = 4, Hkv = 2, Dqk = 4, Dv = 2,
// dense bias Hb = 2, rel bias Hr = 4, time bias Ht = 1, RoPE on q, k and v.
AttentionCase SelfBase() {
  check::CaseShape s;
  s.q_lengths = {13, 17};
  s.kv_lengths = {13, 17};
  s.heads = 4;
  s.kv_heads = 2;
  s.dqk = 4;
  s.dv = 2;
  s.dense_bias_heads = 2;
  s.rel_bias_heads = 4;
  s.time_bias_heads = 1;
  s.rope_qk = true;
  s.rope_v = true;
  s.value_seed = 1;
  return check::BuildCase(s);
}

// Cross-attention: q lengths {13, 17, 0} (TQ = 30), K/V lengths {11, 12, 7} (TK = 30), kv_index
// {0, 2, 1}, no bias, no RoPE.
AttentionCase CrossBase() {
  check::CaseShape s;
  s.q_lengths = {13, 17, 0};
  s.kv_lengths = {11, 12, 7};
  s.kv_index = {0, 2, 1};
  s.heads = 4;
  s.kv_heads = 2;
  s.dqk = 4;
  s.dv = 2;
  s.value_seed = 2;
  return check::BuildCase(s);
}

template <typename T>
void Reshape(check::OwnedTensor<T>& t, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  t.shape = std::move(shape);
  t.data.resize(n, T{1});
}

struct InvalidInput {
  std::string name;
  std::function<AttentionCase()> base;
  std::function<void(AttentionCase&)> mutate;
  std::vector<StringMatcher> message;  // every matcher must match the error message
  bool backward_only = false;          // the bad input is dO: only AttentionBackward sees it
};

void PrintTo(const InvalidInput& x, std::ostream* os) { *os << x.name; }

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<InvalidInput> InvalidInputs() {
  return {
      {"QOffsetsNotStartingAtZero",
       CrossBase,
       [](AttentionCase& c) {
         c.q_offsets.data = {7, 13, 30, 30};
       },
       {HasSubstr("q_offsets"), HasSubstr("7")}},
      {"KvOffsetsDecreasing",
       CrossBase,
       [](AttentionCase& c) {
         c.kv_offsets.data = {0, 17, 9, 30};
       },
       {HasSubstr("kv_offsets"), HasSubstr("9")}},
      {"QOffsetsEndingBeforeTheTensorEnds",
       CrossBase,
       [](AttentionCase& c) {
         c.q_offsets.data = {0, 13, 29, 29};
       },
       {HasSubstr("q_offsets"), HasSubstr("29")}},
      {"KvOffsetsPastTheTensor",
       CrossBase,
       [](AttentionCase& c) {
         c.kv_offsets.data = {0, 11, 23, 31};
       },
       {HasSubstr("kv_offsets"), HasSubstr("31")}},
      {"KeyHeadDimDiffersFromQuery",
       CrossBase,
       [](AttentionCase& c) {
         Reshape(c.k, {30, 2, 5});
       },
       {HasSubstr("k"), HasSubstr("Dqk"), HasSubstr("5")}},
      {"ValueRowsDifferFromKeyRows",
       CrossBase,
       [](AttentionCase& c) {
         Reshape(c.v, {29, 2, 2});
       },
       {HasSubstr("v"), HasSubstr("29")}},
      {"HeadsNotDivisibleByKvHeads",
       CrossBase,
       [](AttentionCase& c) {
         Reshape(c.k, {30, 3, 4});
         Reshape(c.v, {30, 3, 2});
       },
       {HasSubstr("Hkv"), HasSubstr("3"), HasSubstr("4")}},
      {"NanPreScale",
       CrossBase,
       [](AttentionCase& c) { c.options.pre_scale = kNaN; },
       {HasSubstr("pre_scale"), ContainsRegex("[Nn]a[Nn]")}},
      {"NanPostScale",
       CrossBase,
       [](AttentionCase& c) { c.options.post_scale = kNaN; },
       {HasSubstr("post_scale"), ContainsRegex("[Nn]a[Nn]")}},
      {"WindowLeftBelowMinusOne",
       CrossBase,
       [](AttentionCase& c) {
         c.options.mask = MaskKind::kWindow;
         c.options.window_left = -2;
       },
       {HasSubstr("window_left"), HasSubstr("-2")}},
      {"WindowRightBelowMinusOne",
       CrossBase,
       [](AttentionCase& c) {
         c.options.mask = MaskKind::kWindow;
         c.options.window_right = -7;
       },
       {HasSubstr("window_right"), HasSubstr("-7")}},
      {"BlockZero",
       CrossBase,
       [](AttentionCase& c) {
         c.options.mask = MaskKind::kBlock;
         c.options.block = 0;
       },
       {HasSubstr("block"), HasSubstr("0")}},
      {"BlockNegative",
       CrossBase,
       [](AttentionCase& c) {
         c.options.mask = MaskKind::kBlock;
         c.options.block = -5;
       },
       {HasSubstr("block"), HasSubstr("-5")}},
      {"MaxLqSmallerThanALength",
       CrossBase,
       [](AttentionCase& c) { c.max_lq = 12; },
       {HasSubstr("max_lq"), HasSubstr("12")}},
      {"MaxLkSmallerThanALength",
       CrossBase,
       [](AttentionCase& c) { c.max_lk = 10; },
       {HasSubstr("max_lk"), HasSubstr("10")}},
      {"KvIndexPastTheLastKvSequence",
       CrossBase,
       [](AttentionCase& c) {
         c.kv_index.data = {0, 3, 1};
       },
       {HasSubstr("kv_index"), HasSubstr("3")}},
      {"KvIndexNegative",
       CrossBase,
       [](AttentionCase& c) {
         c.kv_index.data = {0, -1, 1};
       },
       {HasSubstr("kv_index"), HasSubstr("-1")}},
      {"KvIndexWithWrongLength",
       CrossBase,
       [](AttentionCase& c) {
         c.kv_index.data = {0, 1};
         c.kv_index.shape = {2};
       },
       {HasSubstr("kv_index"), HasSubstr("2")}},
      {"DenseBiasWithWrongShape",
       SelfBase,
       [](AttentionCase& c) {
         Reshape(c.bias_dense, {2, 2, 17, 18});
       },
       {HasSubstr("bias_dense"), HasSubstr("18")}},
      {"DenseBiasHeadsNotDividingHeads",
       SelfBase,
       [](AttentionCase& c) {
         Reshape(c.bias_dense, {2, 3, 17, 17});
       },
       {HasSubstr("bias_dense"), HasSubstr("3")}},
      {"RelBiasHeadsNotOneOrH",
       SelfBase,
       [](AttentionCase& c) {
         Reshape(c.bias_rel, {2, 33});
       },
       {HasSubstr("bias_rel"), HasSubstr("2")}},
      {"RelBiasWithWrongWidth",
       SelfBase,
       [](AttentionCase& c) {
         Reshape(c.bias_rel, {4, 32});
       },
       {HasSubstr("bias_rel"), HasSubstr("32")}},
      {"TimeBiasOnCrossAttention",
       CrossBase,
       [](AttentionCase& c) {
         c.kv_index = {};
         Reshape(c.ts, {30});
         Reshape(c.bias_ts, {1, 129});
       },
       {HasSubstr("ts")}},
      {"TimestampsWithWrongLength",
       SelfBase,
       [](AttentionCase& c) { Reshape(c.ts, {29}); },
       {HasSubstr("ts"), HasSubstr("29")}},
      {"TimeTableWithWrongWidth",
       SelfBase,
       [](AttentionCase& c) {
         Reshape(c.bias_ts, {1, 128});
       },
       {HasSubstr("bias_ts"), HasSubstr("128")}},
      {"RopeQueryTableWithWrongWidth",
       SelfBase,
       [](AttentionCase& c) {
         Reshape(c.rope_q, {30, 6});
       },
       {HasSubstr("rope_q"), HasSubstr("6")}},
      {"RopeKeyTableWithWrongRows",
       SelfBase,
       [](AttentionCase& c) {
         Reshape(c.rope_k, {29, 4});
       },
       {HasSubstr("rope_k"), HasSubstr("29")}},
      {"RopeValueTableWithWrongWidth",
       SelfBase,
       [](AttentionCase& c) {
         Reshape(c.rope_v, {30, 4});
       },
       {HasSubstr("rope_v"), HasSubstr("4")}},
      {"RopeValueTableWithoutQueryAndKeyTables",
       SelfBase,
       [](AttentionCase& c) {
         c.rope_q = {};
         c.rope_k = {};
       },
       {HasSubstr("rope_v")}},
      {"QueryAndKvSequenceCountsDiffer",
       CrossBase,
       [](AttentionCase& c) {
         c.kv_index = {};
         c.kv_offsets.data = {0, 11, 30};
         c.kv_offsets.shape = {3};
         c.max_lk = 19;
       },
       {HasSubstr("offsets"), HasSubstr("2"), HasSubstr("3")}},
      {"BroadcastWithSeveralQuerySequences",
       CrossBase,
       [](AttentionCase& c) { c.options.broadcast_q = true; },
       {HasSubstr("broadcast_q")}},
      {"TimestampsWithoutTimeTable",
       SelfBase,
       [](AttentionCase& c) { c.bias_ts = {}; },
       {HasSubstr("bias_ts")}},
      {"RopeOnOddHeadDim",
       CrossBase,
       [](AttentionCase& c) {
         Reshape(c.q, {30, 4, 3});
         Reshape(c.k, {30, 2, 3});
         Reshape(c.rope_q, {30, 3});
         Reshape(c.rope_k, {30, 3});
       },
       {HasSubstr("rope"), HasSubstr("3")}},
      {"QueryDataShorterThanItsShape", CrossBase, [](AttentionCase& c) { c.q.data.pop_back(); },
       {HasSubstr("q")}},
      {"QueryOfWrongRank", CrossBase, [](AttentionCase& c) { Reshape(c.q, {30, 16}); },
       {HasSubstr("q")}},
      {"EmptyQueryOffsets", CrossBase,
       [](AttentionCase& c) {
         c.q_offsets.data.clear();
         c.q_offsets.shape = {0};
       },
       {HasSubstr("q_offsets")}},
      {"DenseBiasDataShorterThanItsShape", SelfBase,
       [](AttentionCase& c) { c.bias_dense.data.resize(c.bias_dense.data.size() / 2); },
       {HasSubstr("bias_dense")}},
      {"GradientOfOutputWithWrongShape",
       SelfBase,
       [](AttentionCase&) {},
       {HasSubstr("d_o"), HasSubstr("3")},
       /*backward_only=*/true},
  };
}

class AttentionValidation : public ::testing::TestWithParam<InvalidInput> {};

TEST(AttentionValidationBase, BaseCasesAreValid) {
  for (const AttentionCase& c : {SelfBase(), CrossBase()}) {
    EXPECT_TRUE(reference::ValidateAttention(c.View(), c.options).ok()) << "case: " << c;
    const std::vector<double> d_o = check::RandomCotangent(c, 1);
    EXPECT_TRUE(check::RunOracle(c, d_o).ok()) << "case: " << c;
  }
}

TEST_P(AttentionValidation, RejectsWithInvalidArgumentNamingFieldAndValue) {
  const InvalidInput& bad = GetParam();
  AttentionCase c = bad.base();
  bad.mutate(c);
  if (bad.backward_only) {
    const auto fwd = reference::AttentionForward(c.View(), c.options);
    ASSERT_TRUE(fwd.ok()) << fwd.status();
    std::vector<int64_t> shape = fwd->o_shape;
    shape.back() += 1;  // [TO, H, Dv + 1] = [30, 4, 3]
    std::vector<double> d_o(shape[0] * shape[1] * shape[2], 1.0);
    const auto bwd = reference::AttentionBackward(c.View(), c.options,
                                                  reference::TensorView<double>{d_o, shape}, *fwd);
    for (const StringMatcher& m : bad.message) {
      EXPECT_THAT(bwd.status(), StatusIs(absl::StatusCode::kInvalidArgument, m));
    }
    return;
  }
  const absl::Status validated = reference::ValidateAttention(c.View(), c.options);
  const auto forward = reference::AttentionForward(c.View(), c.options);
  for (const StringMatcher& m : bad.message) {
    EXPECT_THAT(validated, StatusIs(absl::StatusCode::kInvalidArgument, m));
    EXPECT_THAT(forward.status(), StatusIs(absl::StatusCode::kInvalidArgument, m));
  }
}

INSTANTIATE_TEST_SUITE_P(InvalidInputs, AttentionValidation, ::testing::ValuesIn(InvalidInputs()),
                         [](const ::testing::TestParamInfo<InvalidInput>& param_info) {
                           return param_info.param.name;
                         });

}  // namespace
}  // namespace gemtb
