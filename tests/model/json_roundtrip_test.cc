// model.json: emission and parsing round-trip exactly; the parser rejects malformed graphs with
// errors naming the JSON path.
#include <string>

#include "gtest/gtest.h"
#include "model/description/model_graph.h"

namespace gemtb::model {
namespace {

using nlohmann::json;

ModelGraph Expand(const std::string& name) {
  auto config = LoadModelConfig(name);
  EXPECT_TRUE(config.ok()) << config.status();
  auto graph = ExpandModel(*config);
  EXPECT_TRUE(graph.ok()) << graph.status();
  return graph.ok() ? *graph : ModelGraph{};
}

TEST(ModelJson, RoundTripsEveryConfig) {
  for (const std::string name : {"tiny", "small", "gem-scale"}) {
    const ModelGraph g = Expand(name);
    const std::string text = ToJsonText(g);
    auto back = ParseModelJsonText(text);
    ASSERT_TRUE(back.ok()) << name << ": " << back.status();
    EXPECT_TRUE(*back == g) << name;
    EXPECT_EQ(ToJsonText(*back), text) << name;  // same bytes again
  }
}

TEST(ModelJson, WritesSchemaKeys) {
  const json j = ToJson(Expand("tiny"));
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["config"], "tiny");
  EXPECT_EQ(j["d"], 32);
  EXPECT_EQ(j["sequences"][1], (json{{"j", 1}, {"Lmax", 128}, {"n_s", 2}}));
  EXPECT_EQ(j["experts"], (json{{"count", 1}, {"shard_group", 1}}));
  const json* swa = nullptr;
  for (const json& op : j["ops"]) {
    if (op["name"] == "L1.seq0.swa") swa = &op;
  }
  ASSERT_NE(swa, nullptr);
  EXPECT_EQ((*swa)["region"], "L1.seq0");
  EXPECT_EQ((*swa)["kind"], "attention");
  EXPECT_EQ((*swa)["seq"], 0);
  EXPECT_EQ((*swa)["attn"]["mask"], (json{{"window", {16, 16}}}));
  EXPECT_EQ((*swa)["flops"], (json{{"fwd", {{"P", 128}}}, {"bwd", {{"P", 320}}}}));
  EXPECT_EQ((*swa)["shapes"]["out"], (json::array({json{{"N", 1}}, 32})));
  EXPECT_EQ((*swa)["saved"]["recompute"], "attention");
  EXPECT_TRUE((*swa)["expert"].is_null());
  EXPECT_EQ((*swa)["local_mfu"], true);
}

std::string ErrorOf(const json& j) {
  auto g = ParseModelJson(j);
  return g.ok() ? std::string("OK") : std::string(g.status().message());
}

TEST(ModelJson, ErrorsNamePath) {
  const json good = ToJson(Expand("tiny"));
  ASSERT_EQ(ErrorOf(good), "OK");
  size_t swa = 0;
  for (size_t i = 0; i < good["ops"].size(); ++i) {
    if (good["ops"][i]["name"] == "L1.seq0.swa") swa = i;
  }
  const std::string op = "model.ops[" + std::to_string(swa) + "]";

  json bad = good;
  bad["extra"] = 1;
  EXPECT_EQ(ErrorOf(bad), "model.extra: unknown key (known: version, config, d, sequences, tables, experts, ops)");

  bad = good;
  bad["ops"][swa]["flops"]["fwd"]["Q"] = 1;
  EXPECT_EQ(ErrorOf(bad), op + ".flops.fwd.Q: unknown key (known: c, B, N, P)");

  bad = good;
  bad["ops"][swa]["kind"] = "conv";
  EXPECT_EQ(ErrorOf(bad), op + ".kind: \"conv\" is not one of linear, attention, norm, pointwise, "
                               "embedding, interaction, loss");

  bad = good;
  bad["ops"][swa]["seq"] = 2;
  EXPECT_EQ(ErrorOf(bad), op + ".seq: 2 is out of range [0, 2)");

  bad = good;
  bad["ops"][swa]["seq"] = nullptr;
  EXPECT_EQ(ErrorOf(bad), op + ".flops.fwd: has N or P terms but the op has no sequence (seq is null)");

  bad = good;
  bad["ops"][swa].erase("attn");
  EXPECT_EQ(ErrorOf(bad), op + ".attn: required for kind attention");

  bad = good;
  bad["ops"][swa]["attn"]["mask"] = json{{"window", {16}}};
  EXPECT_EQ(ErrorOf(bad), op + ".attn.mask.window: [16] is not [left, right] (>= -1)");

  bad = good;
  bad["ops"][swa]["saved"]["recompute"] = "never";
  EXPECT_EQ(ErrorOf(bad), op + ".saved.recompute: \"never\" is not one of none, pointwise, norm, linear, attention");

  bad = good;
  bad["ops"][swa]["expert"] = 0;
  EXPECT_EQ(ErrorOf(bad), op + ".expert: 0 but experts.count is 1: must be null");

  bad = good;
  bad["ops"][swa]["name"] = good["ops"][0]["name"];
  EXPECT_NE(ErrorOf(bad).find("is used twice"), std::string::npos);

  bad = good;
  bad["tables"][0]["rows"] = -5;
  EXPECT_EQ(ErrorOf(bad), "model.tables[0].rows: -5 must be >= 1");

  bad = good;
  bad["ops"][swa]["shapes"]["out"][1] = "x";
  EXPECT_NE(ErrorOf(bad).find(op + ".shapes.out[1]"), std::string::npos);

  EXPECT_FALSE(ParseModelJsonText("[1,").ok());
  auto scenario = ParseModelJson(json{{"version", 2}}, "scenario.model");
  ASSERT_FALSE(scenario.ok());
  EXPECT_NE(std::string(scenario.status().message()).find("scenario.model."), std::string::npos);
}

}  // namespace
}  // namespace gemtb::model
