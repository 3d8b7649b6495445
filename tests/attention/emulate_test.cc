// Emulate mode: the kernel-cast mirror. Its results are values of the storage types
// (O, dQ, dK, dV in the input type; LSE and bias gradients in fp32), and its error against the fp64
// oracle on the same (already rounded) inputs is that of a plain same-precision kernel: small, but
// not zero for bf16.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/attention_cases.h"
#include "tools/check/criteria.h"
#include "tests/testing/oracle_harness.h"
#include "tests/testing/rapidcheck_runner.h"

namespace gemtb {
namespace {

using check::AttentionCase;
using check::CaseConfig;

constexpr reference::ExecutionOptions kEmulate{.precision = reference::Precision::kEmulate};

// Index of the first value of `v` that is not a value of `type` (or -1).
int64_t FirstUnrepresentable(const std::vector<double>& v, ElementType type) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (!check::IsRepresentable(type, v[i])) return static_cast<int64_t>(i);
  }
  return -1;
}

::testing::AssertionResult StorageTypesHold(const check::OracleRun& run, ElementType input) {
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
             << check::ElementTypeName(check.type) << " value";
    }
  }
  return ::testing::AssertionSuccess();
}

void CheckStorageTypes(ElementType input) {
  CaseConfig config;
  config.input_type = input;
  testing::CheckProperty(300, [config, input] {
    const AttentionCase c = *testing::GenAttentionCase(config);
    const std::vector<double> d_o = check::RandomCotangent(c, c.shape.value_seed + 1);
    const auto run = check::RunOracle(c, d_o, kEmulate);
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

bool HasKink(Activation act) {
  return act == Activation::kRelu || act == Activation::kLeakyRelu || act == Activation::kHardswish;
}

struct ErrorStats {
  int cases = 0;
  int nonzero = 0;
};

// Emulate vs oracle on the same rounded inputs, cases with every length >= 4 so that P and the
// sums really get rounded. Bounds:
//  * O: rel-L2 < forward_bound for every act.
//  * dQ, dK: rel-L2 < gradient_bound for acts whose derivative is continuous. For relu, leaky_relu
//    and hardswish a score that rounding moves across a kink flips act' (1 -> 0 or 0.01, 1.5 -> 1),
//    which is the kernel's true error, not a rounding-sized one; their dV (no act') is still
//    bounded.
//  * LSE: the 1e-3 bound only without RoPE: emulate mode rounds the rotated q and k to the input
//    type, which moves bf16 scores, and with them LSE, by up to ~1e-2.
ErrorStats CheckErrorAgainstOracle(ElementType input, double forward_bound, double gradient_bound) {
  ErrorStats stats;
  std::mt19937_64 rng(input == ElementType::kBFloat16 ? 616 : 717);
  CaseConfig config;
  config.input_type = input;
  config.max_length = 24;
  config.max_dim = 16;
  config.custom_scales = false;
  for (int rep = 0; rep < 60; ++rep) {
    check::CaseShape shape = check::RandomCaseShape(rng, config);
    for (auto& l : shape.q_lengths) l = std::max<int64_t>(l, 4);
    for (auto& l : shape.kv_lengths) l = std::max<int64_t>(l, 4);
    shape.time_bias_heads = shape.q_lengths == shape.kv_lengths ? shape.time_bias_heads : 0;
    const AttentionCase c = check::BuildCase(shape);
    const std::vector<double> d_o = check::RandomCotangent(c, rng());
    const auto ref = check::RunOracle(c, d_o);
    const auto emu = check::RunOracle(c, d_o, kEmulate);
    EXPECT_TRUE(ref.ok() && emu.ok()) << ref.status() << " " << emu.status();
    if (!ref.ok() || !emu.ok()) continue;
    ++stats.cases;
    const double o_err = check::RelL2(emu->fwd.o, ref->fwd.o);
    stats.nonzero += o_err > 0 ? 1 : 0;
    EXPECT_LT(o_err, forward_bound) << "O rel-L2; case: " << c;
    if (!c.rope_q.present()) {
      const check::Verdict lse = check::LseMatches("LSE", emu->fwd.lse, ref->fwd.lse);
      EXPECT_TRUE(lse.pass) << lse.message << "; case: " << c;
    }
    EXPECT_LT(check::RelL2(emu->bwd.dv, ref->bwd.dv), gradient_bound) << "dV; case: " << c;
    if (HasKink(c.options.act)) continue;
    EXPECT_LT(check::RelL2(emu->bwd.dq, ref->bwd.dq), gradient_bound) << "dQ; case: " << c;
    EXPECT_LT(check::RelL2(emu->bwd.dk, ref->bwd.dk), gradient_bound) << "dK; case: " << c;
  }
  return stats;
}

TEST(Emulate, ErrorAgainstOracleIsSmallButNonzeroForBfloat16) {
  const ErrorStats stats = CheckErrorAgainstOracle(ElementType::kBFloat16, 1e-2, 1e-2);
  EXPECT_GE(stats.nonzero, stats.cases * 9 / 10)
      << "emulate mode should round P and O to bf16: " << stats.nonzero << " of " << stats.cases
      << " cases differ from the oracle";
}

// fp16 has 3 more significand bits than bf16 (errors ~8x smaller), but a narrow exponent range:
// relu_square of U(-0.1, 0.1) scores gives P ~ 1e-5, fp16 subnormals, hence the looser 5e-3.
TEST(Emulate, ErrorAgainstOracleIsSmallButNonzeroForFloat16) {
  const ErrorStats stats = CheckErrorAgainstOracle(ElementType::kFloat16, 5e-3, 2.5e-3);
  EXPECT_GE(stats.nonzero, stats.cases * 9 / 10);
}

// Emulate-mode casts on the smallest case that shows them: identity, one key with v = 1, pre = post = 1.
// The dot product is exact, rounded once to fp32 (S), P = act(S) is rounded to the input type
// before PV, and O = fp32(P·1) is stored in the input type: O = round_in(round_fp32(q·k)). (With
// four products of short significands the fp32 step is mostly exact; the rounding to the input type
// is what this pins down.)
TEST(Emulate, ScoresRoundToFp32AndPointwisePRoundsToTheInputType) {
  for (ElementType input : {ElementType::kBFloat16, ElementType::kFloat16}) {
    std::mt19937_64 rng(input == ElementType::kBFloat16 ? 1 : 2);
    std::normal_distribution<double> normal;
    int inexact = 0;
    for (int rep = 0; rep < 200; ++rep) {
      check::CaseShape shape;
      shape.q_lengths = {1};
      shape.kv_lengths = {1};
      shape.dqk = 4;
      shape.dv = 1;
      shape.input_type = input;
      shape.options.act = Activation::kIdentity;
      AttentionCase c = check::BuildCase(shape);
      double exact = 0;  // 4 products of 11-bit significands: exact in fp64
      for (int d = 0; d < 4; ++d) {
        c.q.data[d] = check::RoundTo(input, normal(rng));
        c.k.data[d] = check::RoundTo(input, normal(rng));
        exact += c.q.data[d] * c.k.data[d];
      }
      c.v.data = {1.0};
      const auto run = check::RunOracleForward(c, kEmulate);
      ASSERT_TRUE(run.ok()) << run.status();
      const double want = check::RoundTo(input, check::RoundTo(ElementType::kFloat32, exact));
      EXPECT_EQ(run->fwd.o[0], want) << check::ElementTypeName(input) << " q.k = " << exact;
      inexact += want != exact ? 1 : 0;
    }
    EXPECT_GT(inexact, 100) << "the check must exercise rounding";
  }
}

// The FlashAttention softmax order on one query and two keys with one-hot values (O_j = P_j): the fp32
// unnormalised p_j = exp(S_j - M) are rounded to the input type for PV, their fp32 sum l divides at
// the end: O_j = round_in(round_fp32(round_in(p_j) / l)).
TEST(Emulate, SoftmaxRoundsUnnormalisedProbabilitiesAndDividesByTheFp32Sum) {
  const auto f32 = [](double x) { return check::RoundTo(ElementType::kFloat32, x); };
  for (ElementType input : {ElementType::kBFloat16, ElementType::kFloat16}) {
    std::mt19937_64 rng(input == ElementType::kBFloat16 ? 3 : 4);
    std::normal_distribution<double> normal;
    for (int rep = 0; rep < 200; ++rep) {
      check::CaseShape shape;
      shape.q_lengths = {1};
      shape.kv_lengths = {2};
      shape.dqk = 4;
      shape.dv = 2;
      shape.input_type = input;
      AttentionCase c = check::BuildCase(shape);  // softmax, pre = 1/sqrt(4) = 0.5 (exact)
      double s[2] = {0, 0};
      for (int d = 0; d < 4; ++d) c.q.data[d] = check::RoundTo(input, normal(rng));
      for (int j = 0; j < 2; ++j) {
        double dot = 0;
        for (int d = 0; d < 4; ++d) {
          c.k.data[j * 4 + d] = check::RoundTo(input, normal(rng));
          dot += c.q.data[d] * c.k.data[j * 4 + d];
        }
        s[j] = f32(0.5 * f32(dot));
      }
      c.v.data = {1.0, 0.0, 0.0, 1.0};
      const auto run = check::RunOracleForward(c, kEmulate);
      ASSERT_TRUE(run.ok()) << run.status();
      const double m = std::max(s[0], s[1]);
      const double p[2] = {f32(std::exp(f32(s[0] - m))), f32(std::exp(f32(s[1] - m)))};
      const double l = f32(p[0] + p[1]);
      for (int j = 0; j < 2; ++j) {
        const double want = check::RoundTo(input, f32(check::RoundTo(input, p[j]) / l));
        EXPECT_EQ(run->fwd.o[j], want)
            << check::ElementTypeName(input) << " S = (" << s[0] << ", " << s[1] << ")";
      }
      EXPECT_EQ(run->fwd.lse[0], f32(m + f32(std::log(l))));
    }
  }
}

// The emulated kernel error is what GPU tolerances build on; it must pass the secondary
// criterion against the oracle itself (a naive same-precision kernel passes it).
TEST(Emulate, PassesTheGpuSecondaryCriterionAgainstTheOracle) {
  std::mt19937_64 rng(818);
  CaseConfig config;
  config.input_type = ElementType::kBFloat16;
  config.max_length = 40;
  config.max_dim = 16;
  config.custom_scales = false;
  config.acts = {Activation::kSoftmax, Activation::kSilu, Activation::kGeluTanh};
  for (int rep = 0; rep < 12; ++rep) {
    const AttentionCase c = check::RandomAttentionCase(rng, config);
    const std::vector<double> d_o = check::RandomCotangent(c, rng());
    const auto ref = check::RunOracle(c, d_o);
    const auto emu = check::RunOracle(c, d_o, kEmulate);
    ASSERT_TRUE(ref.ok() && emu.ok());
    const check::Verdict o =
        check::GpuSecondaryRelL2("O", emu->fwd.o, ref->fwd.o, check::kForwardRelL2Tolerance);
    EXPECT_TRUE(o.pass) << o.message << "; case: " << c;
  }
}

}  // namespace
}  // namespace gemtb
