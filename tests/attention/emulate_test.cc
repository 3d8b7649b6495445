// spec §7 "Emulate mode": the kernel-cast mirror. Its results are values of the storage types
// (O, dQ, dK, dV in the input type; LSE and bias gradients in fp32), and its error against the fp64
// oracle on the same (already rounded) inputs is that of a plain same-precision kernel: small, but
// not zero for bf16.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/attention_cases.h"
#include "tests/testing/criteria.h"
#include "tests/testing/oracle_harness.h"
#include "tests/testing/rapidcheck_runner.h"

namespace gemtb {
namespace {

using testing::AttentionCase;
using testing::CaseConfig;

constexpr reference::ExecutionOptions kEmulate{.precision = reference::Precision::kEmulate};

// Index of the first value of `v` that is not a value of `type` (or -1).
int64_t FirstUnrepresentable(const std::vector<double>& v, ElementType type) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (!testing::IsRepresentable(type, v[i])) return static_cast<int64_t>(i);
  }
  return -1;
}

::testing::AssertionResult StorageTypesHold(const testing::OracleRun& run, ElementType input) {
  const struct {
    const char* name;
    const std::vector<double>* values;
    ElementType type;
  } checks[] = {
      {"O", &run.fwd.o, input},
      {"LSE", &run.fwd.lse, ElementType::kFloat32},
      {"dQ", &run.bwd.dq, input},
      {"dK", &run.bwd.dk, input},
      {"dV", &run.bwd.dv, input},
      {"dBiasDense", &run.bwd.d_bias_dense, ElementType::kFloat32},
      {"dBiasRel", &run.bwd.d_bias_rel, ElementType::kFloat32},
      {"dBiasTs", &run.bwd.d_bias_ts, ElementType::kFloat32},
  };
  for (const auto& check : checks) {
    const int64_t i = FirstUnrepresentable(*check.values, check.type);
    if (i >= 0) {
      return ::testing::AssertionFailure()
             << check.name << "[" << i << "] = " << (*check.values)[i] << " is not a "
             << testing::ElementTypeName(check.type) << " value";
    }
  }
  return ::testing::AssertionSuccess();
}

void CheckStorageTypes(ElementType input) {
  CaseConfig config;
  config.input_type = input;
  testing::CheckProperty(80, [config, input] {
    const AttentionCase c = *testing::GenAttentionCase(config);
    const std::vector<double> d_o = testing::RandomCotangent(c, c.shape.value_seed + 1);
    const auto run = testing::RunOracle(c, d_o, kEmulate);
    testing::RcRequireOk(run.status(), c);
    testing::RcRequire(StorageTypesHold(*run, input), c);
    testing::RcRequire(testing::HasNoNaN(*run), c);
  });
}

TEST(Emulate, ResultsAreValuesOfTheStorageTypesForBfloat16) {
  CheckStorageTypes(ElementType::kBFloat16);
}

TEST(Emulate, ResultsAreValuesOfTheStorageTypesForFloat16) {
  CheckStorageTypes(ElementType::kFloat16);
}

struct ErrorStats {
  int cases = 0;
  int nonzero = 0;
};

// Cases with every length >= 4, so that rounding P and the sums really happens.
ErrorStats CheckErrorAgainstOracle(ElementType input, double forward_bound, double gradient_bound) {
  ErrorStats stats;
  std::mt19937_64 rng(input == ElementType::kBFloat16 ? 616 : 717);
  CaseConfig config;
  config.input_type = input;
  config.max_length = 24;
  config.max_dim = 16;
  config.custom_scales = false;
  for (int rep = 0; rep < 40; ++rep) {
    testing::CaseShape shape = testing::RandomCaseShape(rng, config);
    for (auto& l : shape.q_lengths) l = std::max<int64_t>(l, 4);
    for (auto& l : shape.kv_lengths) l = std::max<int64_t>(l, 4);
    shape.time_bias_heads = shape.q_lengths == shape.kv_lengths ? shape.time_bias_heads : 0;
    const AttentionCase c = testing::BuildCase(shape);
    const std::vector<double> d_o = testing::RandomCotangent(c, rng());
    const auto ref = testing::RunOracle(c, d_o);
    const auto emu = testing::RunOracle(c, d_o, kEmulate);
    EXPECT_TRUE(ref.ok() && emu.ok()) << ref.status() << " " << emu.status();
    if (!ref.ok() || !emu.ok()) continue;
    ++stats.cases;
    const double o_err = testing::RelL2(emu->fwd.o, ref->fwd.o);
    stats.nonzero += o_err > 0 ? 1 : 0;
    EXPECT_LT(o_err, forward_bound) << "O rel-L2; case: " << c;
    EXPECT_TRUE(testing::LseMatches("LSE", emu->fwd.lse, ref->fwd.lse).pass) << "case: " << c;
    for (const auto& [name, got, want] :
         {std::tuple{"dQ", &emu->bwd.dq, &ref->bwd.dq}, std::tuple{"dK", &emu->bwd.dk, &ref->bwd.dk},
          std::tuple{"dV", &emu->bwd.dv, &ref->bwd.dv}}) {
      EXPECT_LT(testing::RelL2(*got, *want), gradient_bound) << name << " rel-L2; case: " << c;
    }
  }
  return stats;
}

TEST(Emulate, ErrorAgainstOracleIsSmallButNonzeroForBfloat16) {
  const ErrorStats stats = CheckErrorAgainstOracle(ElementType::kBFloat16, 1e-2, 3e-2);
  EXPECT_GE(stats.nonzero, stats.cases * 9 / 10)
      << "emulate mode should round P and O to bf16: " << stats.nonzero << " of " << stats.cases
      << " cases differ from the oracle";
}

TEST(Emulate, ErrorAgainstOracleIsSmallForFloat16) {
  const ErrorStats stats = CheckErrorAgainstOracle(ElementType::kFloat16, 2e-3, 5e-3);
  EXPECT_GE(stats.nonzero, stats.cases * 9 / 10);
}

// The emulated kernel error is what GPU tolerances build on; it must pass the §9 secondary criterion
// against the oracle itself (a naive same-precision kernel passes it).
TEST(Emulate, PassesTheGpuSecondaryCriterionAgainstTheOracle) {
  std::mt19937_64 rng(818);
  CaseConfig config;
  config.input_type = ElementType::kBFloat16;
  config.max_length = 40;
  config.max_dim = 16;
  config.custom_scales = false;
  config.acts = {Activation::kSoftmax, Activation::kSilu, Activation::kGeluTanh};
  for (int rep = 0; rep < 12; ++rep) {
    const AttentionCase c = testing::RandomAttentionCase(rng, config);
    const std::vector<double> d_o = testing::RandomCotangent(c, rng());
    const auto ref = testing::RunOracle(c, d_o);
    const auto emu = testing::RunOracle(c, d_o, kEmulate);
    ASSERT_TRUE(ref.ok() && emu.ok());
    const testing::Verdict o = testing::GpuSecondaryRelL2("O", emu->fwd.o, ref->fwd.o,
                                                          testing::kForwardRelL2Tolerance);
    EXPECT_TRUE(o.pass) << o.message << "; case: " << c;
  }
}

}  // namespace
}  // namespace gemtb
