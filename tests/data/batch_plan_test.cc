// Batch formation policies: every plan is a
// permutation; BBS lowers the heaviest step on heavy-tailed loads; global balancing fills every rank.
#include "model/data/batch_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace gemtb::data {
namespace {

// Sub-batch loads: total sequence length of 128 samples whose lengths are heavy-tailed (log-normal,
// sigma 1.2), as the data readers emit them.
std::vector<int64_t> HeavyTailedLoads(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> len(4.0, 1.2);
  std::vector<int64_t> loads(n);
  for (auto& l : loads) {
    l = 0;
    for (int s = 0; s < 128; ++s) l += static_cast<int64_t>(len(rng));
  }
  return loads;
}

bool IsPermutation(const std::vector<int32_t>& plan) {
  std::vector<int32_t> sorted = plan;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] != static_cast<int32_t>(i)) return false;
  }
  return true;
}

TEST(BatchPlan, RandomPlanIsReaderOrder) {
  const std::vector<int64_t> loads = {5, 1, 4, 2, 3, 6};
  const auto plan = RandomPlan(loads, 3);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(*plan, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
}

TEST(BatchPlan, BbsDealsSortedLoadsInSnakeOrder) {
  // Loads sorted descending: q6(9) q0(8) q3(8) q1(5) q4(3) q7(2) q2(1) q5(0); G = 2, k = 4.
  // Snake: round 0 -> steps 0, 1; round 1 -> steps 1, 0; ... Ties (q0, q3 at 8) by index.
  const std::vector<int64_t> loads = {8, 5, 1, 8, 3, 0, 9, 2};
  const auto plan = BbsPlan(loads, 2);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(*plan, (std::vector<int32_t>{6, 1, 4, 5, 0, 3, 7, 2}));
}

TEST(BatchPlan, BbsIsAPermutationAndLowersTheHeaviestStep) {
  const int64_t G = 8, k = 8;
  double sum_ratio_without = 0.0, sum_ratio_with = 0.0;
  int wins = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    const std::vector<int64_t> loads = HeavyTailedLoads(G * k, seed);
    const auto bbs = BbsPlan(loads, G);
    const auto none = RandomPlan(loads, G);
    ASSERT_TRUE(bbs.ok() && none.ok());
    ASSERT_TRUE(IsPermutation(*bbs)) << seed;
    const auto with = GroupLoads(loads, *bbs, G), without = GroupLoads(loads, *none, G);
    const double mean = static_cast<double>(std::accumulate(loads.begin(), loads.end(), int64_t{0})) / G;
    const int64_t max_with = *std::max_element(with.begin(), with.end());
    const int64_t max_without = *std::max_element(without.begin(), without.end());
    wins += max_with <= max_without;
    sum_ratio_with += static_cast<double>(max_with) / mean;
    sum_ratio_without += static_cast<double>(max_without) / mean;
  }
  // The heaviest step is (nearly always) lighter, and on average it moves much closer to the mean.
  EXPECT_GE(wins, 190);
  EXPECT_LT(sum_ratio_with / 200.0 - 1.0, 0.5 * (sum_ratio_without / 200.0 - 1.0));
}

TEST(BatchPlan, GlobalBalanceIsAPermutationWithKPerRankAndGreedyBalance) {
  const int64_t R = 64, k = 8;
  const std::vector<int64_t> loads = HeavyTailedLoads(R * k, 5);
  const auto plan = GlobalBalancePlan(loads, R, k);
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(IsPermutation(*plan));
  const auto per_rank = GroupLoads(loads, *plan, R);
  const auto none = GroupLoads(loads, *RandomPlan(loads, R), R);
  EXPECT_LT(*std::max_element(per_rank.begin(), per_rank.end()), *std::max_element(none.begin(), none.end()));
}

TEST(BatchPlan, GlobalBalanceHandWorked) {
  // R = 2, k = 2; loads 10, 1, 7, 3 -> order q0(10) q2(7) q3(3) q1(1): q0 -> r0 (tie, lowest),
  // q2 -> r1, q3 -> r1 (7 < 10), r1 full, q1 -> r0.
  const std::vector<int64_t> loads = {10, 1, 7, 3};
  const auto plan = GlobalBalancePlan(loads, 2, 2);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(*plan, (std::vector<int32_t>{0, 1, 2, 3}));
  const std::vector<int64_t> loads2 = {1, 10, 3, 7};
  EXPECT_EQ(*GlobalBalancePlan(loads2, 2, 2), (std::vector<int32_t>{1, 0, 3, 2}));
}

TEST(BatchPlan, ScratchIsReusedAcrossCalls) {
  PlanScratch scratch;
  std::vector<int32_t> plan(4096 * 8);
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    const std::vector<int64_t> loads = HeavyTailedLoads(plan.size(), seed);
    ASSERT_TRUE(GlobalBalancePlanInto(loads, 4096, 8, absl::MakeSpan(plan), scratch).ok());
    EXPECT_TRUE(IsPermutation(plan));
  }
}

TEST(BatchPlan, BadSizesAreErrorsThatNameTheProblem) {
  const std::vector<int64_t> loads = {1, 2, 3};
  EXPECT_EQ(BbsPlan(loads, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(BbsPlan(loads, 2).status().message().find("do not split into 2"), std::string::npos);
  EXPECT_FALSE(GlobalBalancePlan(loads, 2, 2).ok());
  EXPECT_FALSE(BbsPlan(std::vector<int64_t>{1, -1}, 1).ok());
  EXPECT_FALSE(RandomPlan(loads, 0).ok());
}

}  // namespace
}  // namespace gemtb::data
