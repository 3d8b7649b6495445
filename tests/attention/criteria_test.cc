// The attention criteria and dtype helpers of tools/check/criteria.h, on hand-made inputs.
#include "tools/check/criteria.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace gemtb {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(Criteria, UlpIsTheSpacingOfTheDtypeAtTheValue) {
  EXPECT_EQ(check::UlpOf(ElementType::kBFloat16, 1.0), std::ldexp(1.0, -7));
  EXPECT_EQ(check::UlpOf(ElementType::kBFloat16, 1.99), std::ldexp(1.0, -7));
  EXPECT_EQ(check::UlpOf(ElementType::kBFloat16, -3.0), std::ldexp(1.0, -6));
  EXPECT_EQ(check::UlpOf(ElementType::kFloat16, 1.0), std::ldexp(1.0, -10));
  EXPECT_EQ(check::UlpOf(ElementType::kFloat16, 1000.0), std::ldexp(1.0, -1));
  EXPECT_EQ(check::UlpOf(ElementType::kFloat16, 1e-6), std::ldexp(1.0, -24));  // subnormal
  EXPECT_EQ(check::UlpOf(ElementType::kFloat16, 0.0), std::ldexp(1.0, -24));
  EXPECT_EQ(check::UlpOf(ElementType::kFloat32, 1.0), std::ldexp(1.0, -23));
  EXPECT_EQ(check::UlpOf(ElementType::kFloat32, 0.5), std::ldexp(1.0, -24));
  EXPECT_EQ(check::UlpOf(ElementType::kFloat64, 1.0), std::ldexp(1.0, -52));
}

TEST(Criteria, RoundToIsRoundNearestEvenInOneStep) {
  // bf16 ties: 1 + 2^-8 -> 1, 1 + 3·2^-8 -> 1 + 2^-6.
  EXPECT_EQ(check::RoundTo(ElementType::kBFloat16, 1 + std::ldexp(1.0, -8)), 1.0);
  EXPECT_EQ(check::RoundTo(ElementType::kBFloat16, 1 + 3 * std::ldexp(1.0, -8)),
            1 + std::ldexp(1.0, -6));
  // One rounding: just above a bf16 tie rounds up (an fp32 detour would land on the tie).
  EXPECT_EQ(
      check::RoundTo(ElementType::kBFloat16, 1 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)),
      1 + std::ldexp(1.0, -7));
  // fp16 ties and edges.
  EXPECT_EQ(check::RoundTo(ElementType::kFloat16, 1 + std::ldexp(1.0, -11)), 1.0);
  EXPECT_EQ(check::RoundTo(ElementType::kFloat16, 1 + 3 * std::ldexp(1.0, -11)),
            1 + std::ldexp(1.0, -9));
  EXPECT_EQ(check::RoundTo(ElementType::kFloat16, std::ldexp(1.0, -25)), 0.0);
  EXPECT_EQ(check::RoundTo(ElementType::kFloat16, 3 * std::ldexp(1.0, -25)),
            std::ldexp(1.0, -23));
  EXPECT_EQ(check::RoundTo(ElementType::kFloat16, 65520.0), kInf);
  EXPECT_EQ(check::RoundTo(ElementType::kFloat16, 65519.0), 65504.0);
  EXPECT_EQ(check::RoundTo(ElementType::kFloat32, 1 + std::ldexp(1.0, -24)), 1.0);
  EXPECT_TRUE(std::signbit(check::RoundTo(ElementType::kBFloat16, -1e-300)));
}

TEST(Criteria, RepresentabilityFollowsTheSignificandWidth) {
  EXPECT_TRUE(check::IsRepresentable(ElementType::kBFloat16, 1 + std::ldexp(1.0, -7)));
  EXPECT_FALSE(check::IsRepresentable(ElementType::kBFloat16, 1 + std::ldexp(1.0, -8)));
  EXPECT_TRUE(check::IsRepresentable(ElementType::kFloat16, std::ldexp(1.0, -24)));
  EXPECT_FALSE(check::IsRepresentable(ElementType::kFloat16, std::ldexp(1.0, -25)));
  EXPECT_FALSE(check::IsRepresentable(ElementType::kFloat32, 0.1));
  EXPECT_TRUE(check::IsRepresentable(ElementType::kFloat32, -kInf));
}

TEST(Criteria, GpuPrimaryAllowsTwiceTheEmulatedErrorPlusTwoUlps) {
  const std::vector<double> ref = {1.0, -0.5, 0.25};
  const std::vector<double> emu = {1.0, -0.5, 0.25 + 0.01};
  const double ulp = std::ldexp(1.0, -7);  // bf16 at max|ref| = 1
  const std::vector<double> at_bound = {1.0, -0.5 + 0.02 + 2 * ulp, 0.25};
  const std::vector<double> past_bound = {1.0, -0.5 + 0.021 + 2 * ulp, 0.25};
  EXPECT_TRUE(check::GpuPrimary("O", at_bound, emu, ref, ElementType::kBFloat16).pass);
  const check::Verdict v = check::GpuPrimary("O", past_bound, emu, ref, ElementType::kBFloat16);
  EXPECT_FALSE(v.pass);
  EXPECT_NEAR(v.bound, 0.02 + 2 * ulp, 1e-15);
  EXPECT_NE(v.message.find("FAIL"), std::string::npos) << v.message;
  const std::vector<double> with_nan = {1.0, kNaN, 0.25};
  EXPECT_FALSE(check::GpuPrimary("O", with_nan, emu, ref, ElementType::kBFloat16).pass);
  EXPECT_FALSE(check::GpuPrimary("O", {1.0}, emu, ref, ElementType::kBFloat16).pass);
}

TEST(Criteria, SecondaryRelL2UsesTheReferenceNorm) {
  const std::vector<double> ref = {3.0, 4.0};                                  // norm 5
  EXPECT_TRUE(check::GpuSecondaryRelL2("O", {3.0, 4.02}, ref, 5e-3).pass);   // 0.004
  EXPECT_FALSE(check::GpuSecondaryRelL2("O", {3.0, 4.03}, ref, 5e-3).pass);  // 0.006
  EXPECT_EQ(check::RelL2({0.0, 0.0}, {0.0, 0.0}), 0.0);
  EXPECT_EQ(check::RelL2({1e-30, 0.0}, {0.0, 0.0}), kInf);
}

TEST(Criteria, LseNeedsMinusInfinityInTheSamePlaces) {
  const std::vector<double> ref = {1.0, -kInf, 2.0};
  EXPECT_TRUE(check::LseMatches("LSE", {1.0005, -kInf, 2.0}, ref).pass);
  EXPECT_FALSE(check::LseMatches("LSE", {1.002, -kInf, 2.0}, ref).pass);
  EXPECT_FALSE(check::LseMatches("LSE", {1.0, -80.0, 2.0}, ref).pass);
  EXPECT_FALSE(check::LseMatches("LSE", {-kInf, -kInf, 2.0}, ref).pass);
  EXPECT_FALSE(check::LseMatches("LSE", {1.0, -kInf, kNaN}, ref).pass);
}

TEST(Criteria, BitwiseEqualityDistinguishesSignedZeros) {
  EXPECT_TRUE(check::BitwiseEqual({1.0, 0.0}, {1.0, 0.0}));
  EXPECT_FALSE(check::BitwiseEqual({1.0, 0.0}, {1.0, -0.0}));
  EXPECT_FALSE(check::BitwiseEqual({1.0}, {1.0, 0.0}));
  EXPECT_EQ(check::MaxAbsDiff({1.0, 2.0}, {1.5, 1.0}), 1.0);
  EXPECT_TRUE(std::isnan(check::MaxAbsDiff({kNaN}, {1.0})));
  EXPECT_NEAR(check::ScaledMaxDiff({2.0, 4.1}, {2.0, 4.0}), 0.025, 1e-15);
}

}  // namespace
}  // namespace gemtb
