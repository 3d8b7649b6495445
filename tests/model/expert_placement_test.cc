// Expert parallelism's placement (ExpertsOfMember, CheckExpertDegree in gem_geometry.h;
// expert_params.h): the members of an EP group run disjoint sets of experts that together are the
// model's, and a degree that does not divide the expert count is refused by name; each member holds
// the parameters that are no expert's and its own experts', which together cover the layout once; a
// member's layout binds them where its packed arrays put them; the experts' shard and replica groups
// partition the ranks that run each expert.
#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "model/description/expert_params.h"
#include "model/description/gem_geometry.h"
#include "tests/testing/builtin_graph.h"

namespace gemtb::model {
namespace {

// The tiny config's geometry with `experts` Wukong experts.
GemGeometry TinyWith(int experts) {
  ModelConfig config = gemtb::testing::BuiltinConfig("tiny");
  config.arch.wukong.experts.count = experts;
  absl::StatusOr<GemGeometry> g = MakeGemGeometry(config);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *std::move(g) : GemGeometry{};
}

TEST(ExpertPlacement, MembersRunEveryExpertOnce) {
  for (int experts : {1, 2, 4, 6, 8}) {
    for (int degree = 1; degree <= experts; ++degree) {
      if (experts % degree != 0) continue;
      std::vector<int> seen(static_cast<size_t>(experts), 0);
      for (int member = 0; member < degree; ++member) {
        const std::vector<int> mine = ExpertsOfMember(experts, degree, member);
        EXPECT_EQ(static_cast<int>(mine.size()), experts / degree) << experts << "/" << degree;
        for (int e : mine) {
          EXPECT_EQ(e % degree, member);
          ++seen[static_cast<size_t>(e)];
        }
      }
      for (int e = 0; e < experts; ++e) EXPECT_EQ(seen[static_cast<size_t>(e)], 1) << "expert " << e;
    }
  }
  EXPECT_EQ(ExpertsOfMember(4, 2, 1), (std::vector<int>{1, 3}));
  EXPECT_EQ(ExpertsOfMember(2, 1, 0), (std::vector<int>{0, 1}));
}

TEST(ExpertPlacement, RefusesADegreeThatDoesNotDivideTheExperts) {
  const GemGeometry g = TinyWith(2);
  EXPECT_TRUE(CheckExpertDegree(g, 1, "--ep-degree").ok());
  EXPECT_TRUE(CheckExpertDegree(g, 2, "--ep-degree").ok());
  const absl::Status three = CheckExpertDegree(g, 3, "--ep-degree");
  EXPECT_EQ(three.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(three.message().find("--ep-degree: 3 does not divide the model's 2 Wukong experts"), std::string::npos)
      << three;
  const absl::Status zero = CheckExpertDegree(g, 0, "--ep-degree");
  EXPECT_NE(zero.message().find("--ep-degree: 0 does not divide"), std::string::npos) << zero;
}

TEST(ExpertPlacement, NamesTheExpertOfAParameter) {
  EXPECT_EQ(ExpertOfParam("L1.wukong.mlp1.e0.w"), 0);
  EXPECT_EQ(ExpertOfParam("L1.wukong.mlp1.e1.b"), 1);
  EXPECT_EQ(ExpertOfParam("L3.wukong.mlp2.e12.w"), 12);
  EXPECT_EQ(ExpertOfParam("L1.wukong.mlp2.b"), std::nullopt);
  EXPECT_EQ(ExpertOfParam("L1.wukong.mlp1.w"), std::nullopt);
  EXPECT_EQ(ExpertOfParam("L1.wukong.mlp1.e.w"), std::nullopt);
  EXPECT_EQ(ExpertOfParam("L1.seq0.ffn1.w"), std::nullopt);
}

TEST(ExpertPlacement, MembersHoldTheDenseParametersAndTheirExpertsOnce) {
  for (const auto& [experts, degree] : {std::pair{2, 1}, std::pair{2, 2}, std::pair{4, 2}, std::pair{4, 4}}) {
    const GemGeometry g = TinyWith(experts);
    const int64_t P = static_cast<int64_t>(g.layout.total());
    std::vector<float> whole(static_cast<size_t>(P));
    std::iota(whole.begin(), whole.end(), 0.0f);  // exact: P < 2^24
    std::vector<int> held(static_cast<size_t>(P), 0);
    std::vector<float> rebuilt(static_cast<size_t>(P), -1.0f);
    const MemberParams first = MemberParamsOf(g, degree, 0);
    for (int member = 0; member < degree; ++member) {
      const MemberParams m = MemberParamsOf(g, degree, member);
      ASSERT_EQ(m.dense.size(), first.dense.size());
      for (size_t k = 0; k < m.dense.size(); ++k) {
        EXPECT_EQ(m.dense[k].first, first.dense[k].first);
        EXPECT_EQ(m.dense[k].count, first.dense[k].count);
      }
      for (const ParamRange& r : m.experts)
        for (int64_t x = r.first; x < r.first + r.count; ++x) ++held[static_cast<size_t>(x)];
      EXPECT_EQ(m.expert_count() * degree, P - m.dense_count()) << experts << "/" << degree;
      UnpackRanges(PackRanges(whole, m.experts), m.experts, rebuilt);
      UnpackRanges(PackRanges(whole, m.dense), m.dense, rebuilt);

      // The member's layout: dense parameters at their packed place, its experts' after experts_at.
      const int64_t experts_at = m.dense_count() + 5;
      const ParamLayout L = MemberLayout(g, degree, member, experts_at);
      EXPECT_EQ(static_cast<int64_t>(L.total()), experts_at + m.expert_count());
      const std::vector<float> dense = PackRanges(whole, m.dense), mine = PackRanges(whole, m.experts);
      std::map<std::string, ParamRef> in_member;
      for (const ParamInfo& p : L.params()) in_member[p.name] = p.ref;
      for (const ParamInfo& p : g.layout.params()) {
        const std::optional<int> e = ExpertOfParam(p.name);
        const auto it = in_member.find(p.name);
        if (e && *e % degree != member) {
          EXPECT_EQ(it, in_member.end()) << p.name << " on member " << member;
          continue;
        }
        ASSERT_NE(it, in_member.end()) << p.name;
        EXPECT_EQ(it->second.size, p.ref.size) << p.name;
        // Its first value's place in the packed array is its place in the member's array.
        const float want = static_cast<float>(p.ref.offset);
        if (e) {
          ASSERT_GE(static_cast<int64_t>(it->second.offset), experts_at) << p.name;
          EXPECT_EQ(mine[it->second.offset - static_cast<size_t>(experts_at)], want) << p.name;
        } else {
          EXPECT_EQ(dense[it->second.offset], want) << p.name;
        }
      }
    }
    for (const ParamRange& r : first.dense)
      for (int64_t x = r.first; x < r.first + r.count; ++x) ++held[static_cast<size_t>(x)];
    for (int64_t x = 0; x < P; ++x) ASSERT_EQ(held[static_cast<size_t>(x)], 1) << "value " << x;
    EXPECT_EQ(rebuilt, whole) << experts << "/" << degree;
  }
}

// A member's dense array, unit by unit: the units tile it in order, each holding its parameters
// that are no expert's.
TEST(ExpertPlacement, PackedUnitsTileTheDenseArray) {
  for (const auto& [experts, degree] : {std::pair{2, 2}, std::pair{4, 2}, std::pair{2, 1}}) {
    const GemGeometry g = TinyWith(experts);
    std::vector<float> whole(g.layout.total());
    std::iota(whole.begin(), whole.end(), 0.0f);
    const MemberParams m = MemberParamsOf(g, degree, degree - 1);
    const std::vector<float> packed = PackRanges(whole, m.dense);
    const std::vector<ParamUnit> units = ParamUnits(g), mine = PackedUnits(units, m.dense);
    ASSERT_EQ(mine.size(), units.size());
    int64_t at = 0;
    for (size_t u = 0; u < units.size(); ++u) {
      EXPECT_EQ(mine[u].region, units[u].region);
      EXPECT_EQ(mine[u].first, at) << units[u].region;
      std::vector<float> want;  // the unit's values that are no expert's, in layout order
      for (const ParamInfo& p : g.layout.params()) {
        const int64_t o = static_cast<int64_t>(p.ref.offset);
        if (o < units[u].first || o >= units[u].first + units[u].count || ExpertOfParam(p.name)) continue;
        for (size_t k = 0; k < p.ref.size; ++k) want.push_back(whole[p.ref.offset + k]);
      }
      EXPECT_EQ(std::vector<float>(packed.begin() + mine[u].first, packed.begin() + mine[u].first + mine[u].count),
                want)
          << units[u].region;
      at += mine[u].count;
    }
    EXPECT_EQ(at, m.dense_count());
  }
}

TEST(ExpertPlacement, ExpertGroupsPartitionTheRanksOfEachMember) {
  for (const auto& [R, D, S] :
       {std::tuple{8, 2, 2}, std::tuple{8, 2, 4}, std::tuple{8, 4, 1}, std::tuple{4, 2, 2}, std::tuple{2, 2, 1}}) {
    ASSERT_TRUE(CheckExpertShardGroup(R, D, S, "expert shard group").ok());
    std::set<std::vector<int>> shards, replicas;
    for (int r = 0; r < R; ++r) {
      const ExpertGroups groups = ExpertGroupsOf(r, R, D, S);
      ASSERT_EQ(static_cast<int>(groups.shard.size()), S);
      ASSERT_EQ(static_cast<int>(groups.replica.size()), R / D / S);
      EXPECT_EQ(groups.shard[static_cast<size_t>(groups.shard_member)], r);
      EXPECT_NE(std::find(groups.replica.begin(), groups.replica.end(), r), groups.replica.end());
      for (int k : groups.shard) EXPECT_EQ(k % D, r % D);
      for (int k : groups.replica) EXPECT_EQ(k % D, r % D);
      EXPECT_TRUE(std::is_sorted(groups.shard.begin(), groups.shard.end()));
      // A rank's replicas hold the same piece: the same place in their shard groups.
      for (int k : groups.replica) EXPECT_EQ(ExpertGroupsOf(k, R, D, S).shard_member, groups.shard_member);
      shards.insert(groups.shard);
      replicas.insert(groups.replica);
    }
    EXPECT_EQ(static_cast<int>(shards.size()), R / S);
    EXPECT_EQ(static_cast<int>(replicas.size()), D * S);
  }
  EXPECT_EQ(ExpertGroupsOf(5, 8, 2, 2).shard, (std::vector<int>{5, 7}));
  EXPECT_EQ(ExpertGroupsOf(5, 8, 2, 2).replica, (std::vector<int>{1, 5}));
  const absl::Status bad = CheckExpertShardGroup(8, 2, 3, "expert shard group");
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("expert shard group: 3 does not divide the 4 ranks"), std::string::npos) << bad;
  EXPECT_FALSE(CheckExpertShardGroup(6, 4, 1, "expert shard group").ok());
}

}  // namespace
}  // namespace gemtb::model
