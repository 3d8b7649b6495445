// The dense parameters' FSDP units (ParamUnits, gem_geometry.h): they cover the flat layout once in
// order, one per checkpoint region of the model description that holds parameters, and each holds
// exactly the parameters the op graph counts for its region (with one Wukong expert or two).
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "model/description/gem_geometry.h"
#include "model/description/model_graph.h"

namespace gemtb::model {
namespace {

void ExpectUnitsAreTheGraphsRegions(const std::string& name, int64_t experts = 1) {
  absl::StatusOr<ModelConfig> config = LoadModelConfig(name);
  ASSERT_TRUE(config.ok()) << config.status();
  config->arch.wukong.experts.count = experts;
  absl::StatusOr<GemGeometry> g = MakeGemGeometry(*config);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<ModelGraph> graph = ExpandModel(*config);
  ASSERT_TRUE(graph.ok()) << graph.status();
  std::map<std::string, int64_t> graph_params;
  std::vector<std::string> graph_order;  // regions with parameters, in the graph's (forward) order
  for (const Op& op : graph->ops) {
    if (op.params == 0) continue;
    if (graph_params.find(op.region) == graph_params.end()) graph_order.push_back(op.region);
    graph_params[op.region] += op.params;
  }
  const std::vector<ParamUnit> units = ParamUnits(*g);
  ASSERT_EQ(units.size(), graph_order.size()) << name;
  int64_t at = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    EXPECT_EQ(units[u].region, graph_order[u]) << name << " unit " << u;
    EXPECT_EQ(units[u].first, at) << name << " " << units[u].region;
    EXPECT_EQ(units[u].count, graph_params[units[u].region]) << name << " " << units[u].region;
    at += units[u].count;
  }
  EXPECT_EQ(at, static_cast<int64_t>(g->layout.total())) << name;
}

TEST(ParamUnits, AreTheGraphsRegionsInForwardOrderOnTiny) { ExpectUnitsAreTheGraphsRegions("tiny"); }
TEST(ParamUnits, AreTheGraphsRegionsInForwardOrderOnSmall) { ExpectUnitsAreTheGraphsRegions("small"); }
// Two Wukong experts: their layers and the shared output bias are the graph's fmb_mlp*.e<e> and
// fmb_expert_sum parameters.
TEST(ParamUnits, AreTheGraphsRegionsWithTwoWukongExperts) { ExpectUnitsAreTheGraphsRegions("tiny", 2); }

}  // namespace
}  // namespace gemtb::model
