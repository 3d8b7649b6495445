// The per-layer calibration file: a well-formed file parses (also as cluster.calibration.layers),
// every bad value is an error naming its JSON path.
#include "sim/network/layer_calibration_json.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/network/cluster_json.h"
#include "tests/testing/status_matchers.h"

namespace gemtb::sim {
namespace {

using ::gemtb::testing::StatusIs;
using ::testing::HasSubstr;
using nlohmann::json;

json Good() {
  return json::parse(R"({
    "format": "gemtb-layer-calibration", "version": 1, "hardware": "NVIDIA H200", "commit": "abc",
    "command": "gemtb bench layers --config small", "config": "small",
    "ops": {"L1.cross.seq0.pma_q": {"fwd": 0.52, "bwd": 0.47}, "L1.norm": {"bwd": 0.3}},
    "layers": {"L1.seq0": {"fwd": 0.012, "bwd": 0.009}, "head": {"fwd": 0.3}},
    "kinds": {"linear": {"fwd": 0.5, "bwd": 0.45}},
    "note": "free text"})");
}

absl::Status Error(const json& j) { return ParseLayerCalibration(j, "layers").status(); }

TEST(LayerCalibrationJson, ParsesProvenanceAndBothDirections) {
  absl::StatusOr<LayerCalibration> l = ParseLayerCalibration(Good(), "layers");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->hardware, "NVIDIA H200");
  EXPECT_EQ(l->config, "small");
  EXPECT_EQ(l->ops.at("L1.cross.seq0.pma_q").fwd, 0.52);
  EXPECT_EQ(l->ops.at("L1.cross.seq0.pma_q").bwd, 0.47);
  EXPECT_FALSE(l->ops.at("L1.norm").fwd.has_value());
  EXPECT_EQ(l->kinds.at("linear").bwd, 0.45);
  ASSERT_EQ(l->layers.size(), 2u);
  EXPECT_EQ(l->layers.at("L1.seq0").fwd, 0.012);
  EXPECT_EQ(l->layers.at("L1.seq0").bwd, 0.009);
  EXPECT_EQ(l->layers.at("head").fwd, 0.3);
  EXPECT_FALSE(l->layers.at("head").bwd.has_value());
}

TEST(LayerCalibrationJson, AnyOneTableIsEnough) {
  for (const char* table : {"ops", "layers", "kinds"}) {
    json j = Good();
    for (const char* other : {"ops", "layers", "kinds"}) {
      if (std::string(other) != table) j.erase(other);
    }
    absl::StatusOr<LayerCalibration> l = ParseLayerCalibration(j, "layers");
    ASSERT_TRUE(l.ok()) << table << ": " << l.status();
    EXPECT_EQ(l->layers.empty(), std::string(table) != "layers") << table;
  }
}

TEST(LayerCalibrationJson, IsReadAsTheCalibrationsLayersField) {
  json cal = {{"layers", Good()}};
  absl::StatusOr<Calibration> c = ParseCalibration(cal, "cluster.calibration", ".");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->layers.has_value());
  EXPECT_EQ(c->layers->kinds.at("linear").fwd, 0.5);
  EXPECT_FALSE(ParseCalibration(json::object(), "cluster.calibration", ".")->layers.has_value());
  cal["layers"]["kinds"]["linear"]["fwd"] = 0;
  EXPECT_THAT(ParseCalibration(cal, "cluster.calibration", ".").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cluster.calibration.layers.kinds.linear.fwd: 0")));
  cal = {{"layers", Good()}};
  cal["layers"]["layers"]["L1.seq0"]["fwd"] = 1.5;
  EXPECT_THAT(ParseCalibration(cal, "cluster.calibration", ".").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cluster.calibration.layers.layers.L1.seq0.fwd: 1.5 must be in (0, 1]")));
}

TEST(LayerCalibrationJson, BadValuesNameTheField) {
  struct Case {
    const char* what;
    json patch;  // merged into Good()
    const char* message;
  };
  const Case cases[] = {
      {"efficiency above 1", {{"ops", {{"L1.norm", {{"bwd", 1.5}}}}}}, "layers.ops.L1.norm.bwd: 1.5"},
      {"efficiency not a number", {{"kinds", {{"linear", {{"fwd", "fast"}}}}}}, "layers.kinds.linear.fwd"},
      {"unknown kind", {{"kinds", {{"gemm", {{"fwd", 0.5}}}}}}, "layers.kinds.gemm: is not an op kind"},
      {"entry without a direction", {{"ops", {{"L2.mlp", json::object()}}}}, "layers.ops.L2.mlp: needs fwd, bwd or both"},
      {"unknown direction", {{"ops", {{"L1.norm", {{"forward", 0.5}}}}}}, "layers.ops.L1.norm.forward"},
      {"other version", {{"version", 2}}, "layers.version: 2"},
      {"other format", {{"format", "calibration"}}, "layers.format"},
      {"empty hardware", {{"hardware", ""}}, "layers.hardware: \"\" must not be empty"},
      {"unknown key", {{"efficiencies", 1}}, "layers.efficiencies"},
      {"ops not an object", {{"ops", json::array()}}, "layers.ops: [] must be an object"},
      {"layer efficiency above 1", {{"layers", {{"L1.seq0", {{"fwd", 1.5}}}}}}, "layers.layers.L1.seq0.fwd: 1.5 must be in (0, 1]"},
      {"layer efficiency 0", {{"layers", {{"head", {{"bwd", 0}}}}}}, "layers.layers.head.bwd: 0 must be in (0, 1]"},
      {"layer efficiency not a number", {{"layers", {{"head", {{"fwd", "fast"}}}}}}, "layers.layers.head.fwd"},
      {"unknown layer direction", {{"layers", {{"head", {{"forward", 0.5}}}}}}, "layers.layers.head.forward"},
      {"layer entry without a direction", {{"layers", {{"F.cross", json::object()}}}}, "layers.layers.F.cross: needs fwd, bwd or both"},
      {"empty region name", {{"layers", {{"", {{"fwd", 0.5}}}}}}, "a region name must not be empty"},
      {"layers not an object", {{"layers", 0.5}}, "layers.layers: 0.5 must be an object"},
  };
  for (const Case& c : cases) {
    json j = Good();
    j.merge_patch(c.patch);
    EXPECT_THAT(Error(j), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message))) << c.what;
  }
  for (const char* key : {"format", "version", "hardware", "commit", "command", "config"}) {
    json j = Good();
    j.erase(key);
    EXPECT_THAT(Error(j), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(std::string("layers.") + key + ": missing")))
        << key;
  }
  json empty = Good();
  empty.erase("ops");
  empty.erase("layers");
  empty.erase("kinds");
  EXPECT_THAT(Error(empty), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("layers: has no efficiency")));
}

}  // namespace
}  // namespace gemtb::sim
