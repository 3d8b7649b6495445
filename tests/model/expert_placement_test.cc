// Expert parallelism's placement (ExpertsOfMember, CheckExpertDegree in gem_geometry.h): the members
// of an EP group run disjoint sets of experts that together are the model's, and a degree that does
// not divide the expert count is refused by name.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/description/gem_geometry.h"

namespace gemtb::model {
namespace {

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
  absl::StatusOr<ModelConfig> config = LoadModelConfig("tiny");
  ASSERT_TRUE(config.ok()) << config.status();
  config->arch.wukong.experts.count = 2;
  absl::StatusOr<GemGeometry> g = MakeGemGeometry(*config);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(CheckExpertDegree(*g, 1, "--ep-degree").ok());
  EXPECT_TRUE(CheckExpertDegree(*g, 2, "--ep-degree").ok());
  const absl::Status three = CheckExpertDegree(*g, 3, "--ep-degree");
  EXPECT_EQ(three.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(three.message().find("--ep-degree: 3 does not divide the model's 2 Wukong experts"), std::string::npos)
      << three;
  const absl::Status zero = CheckExpertDegree(*g, 0, "--ep-degree");
  EXPECT_NE(zero.message().find("--ep-degree: 0 does not divide"), std::string::npos) << zero;
}

}  // namespace
}  // namespace gemtb::model
