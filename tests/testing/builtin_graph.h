// A built-in config (tiny, small, ...) and its model graph, for tests: a load or expansion error is a
// test failure (and an empty config or graph is returned).
#ifndef GEMTB_TESTS_TESTING_BUILTIN_GRAPH_H_
#define GEMTB_TESTS_TESTING_BUILTIN_GRAPH_H_

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "model/description/model_graph.h"
#include "model/description/model_config.h"

namespace gemtb::testing {

inline gemtb::model::ModelConfig BuiltinConfig(const std::string& name) {
  absl::StatusOr<gemtb::model::ModelConfig> config = gemtb::model::LoadModelConfig(name);
  EXPECT_TRUE(config.ok()) << name << ": " << config.status();
  return config.ok() ? *std::move(config) : gemtb::model::ModelConfig{};
}

inline gemtb::model::ModelGraph BuiltinGraph(const std::string& name) {
  absl::StatusOr<gemtb::model::ModelConfig> config = gemtb::model::LoadModelConfig(name);
  EXPECT_TRUE(config.ok()) << name << ": " << config.status();
  if (!config.ok()) return {};
  absl::StatusOr<gemtb::model::ModelGraph> graph = gemtb::model::ExpandModel(*config);
  EXPECT_TRUE(graph.ok()) << name << ": " << graph.status();
  return graph.ok() ? *std::move(graph) : gemtb::model::ModelGraph{};
}

}  // namespace gemtb::testing

#endif  // GEMTB_TESTS_TESTING_BUILTIN_GRAPH_H_
