// Config loader: the committed configs parse to the values of model/description/README.md's table;
// bad configs give errors naming the JSON path and value.
#include <string>

#include "gtest/gtest.h"
#include "model/description/model_config.h"

namespace gemtb::model {
namespace {

using nlohmann::json;

TEST(ModelConfig, TinyMatchesReadmeTable) {
  auto config = LoadModelConfig("tiny");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->d, 32);
  EXPECT_EQ(config->heads, 2);
  EXPECT_EQ(config->features.size(), 9u);
  EXPECT_EQ(config->sequences.size(), 2u);
  EXPECT_EQ(config->sequences[0].lmax, 64);
  EXPECT_EQ(config->sequences[1].lmax, 128);
  EXPECT_EQ(config->sequences[0].attention, SeqAttentionKind::kWindow);
  EXPECT_EQ(config->sequences[0].window, 16);
  EXPECT_EQ(config->dense.m, 8);
  EXPECT_EQ(config->dense.n_d, 1);
  EXPECT_EQ(config->arch.n_x, 8);
  EXPECT_EQ(config->InteractionTokens(), 20);
  EXPECT_EQ(config->HeadInputWidth(), 448);
  EXPECT_EQ(config->NumTasks(), 2);
  // 9 non-sequence tables (4096 + 2048 + 512 + 2048 + 16 + 64 + 32 + 16 + 1024) and the sequence
  // tables (8192 + 16 + 64), 32 wide: 18128 * 32.
  EXPECT_EQ(SparseParamCount(*config), 580096);
}

TEST(ModelConfig, SmallMatchesReadmeTable) {
  auto config = LoadModelConfig("small");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->d, 128);
  EXPECT_EQ(config->features.size(), 32u);
  EXPECT_EQ(config->sequences.size(), 4u);
  EXPECT_EQ(config->HeadInputWidth(), 6656);
  // Items are the ad table: the sequences read it.
  EXPECT_EQ(config->tables[config->sequences[2].item_table_index].name, "ad");
  // 2.69 B (10.8 GB fp32).
  const double sparse = static_cast<double>(SparseParamCount(*config));
  EXPECT_NEAR(sparse / 1e9, 2.69, 0.005);
  EXPECT_NEAR(sparse * 4 / 1e9, 10.8, 0.05);
}

TEST(ModelConfig, GemScaleMatchesReadmeTable) {
  auto config = LoadModelConfig("gem-scale");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->d, 256);
  EXPECT_EQ(config->features.size(), 700u);  // "~700 features"
  EXPECT_EQ(config->sequences.size(), 10u);
  EXPECT_EQ(config->sequences[7].lmax, 1024);
  EXPECT_EQ(config->sequences[8].lmax, 16384);
  EXPECT_EQ(config->sequences[8].attention, SeqAttentionKind::kBlock);
  EXPECT_EQ(config->arch.wukong.experts.count, 2);
  EXPECT_EQ(config->HeadInputWidth(), 126976);
  int64_t rows = 0;
  for (const TableSpec& t : config->tables) rows += t.rows;
  EXPECT_NEAR(static_cast<double>(rows) / 1e9, 8.0, 0.05);  // "~8e9 rows"
  const double sparse = static_cast<double>(SparseParamCount(*config));
  EXPECT_NEAR(sparse / 1e12, 2.05, 0.005);       // ≈2.05 T
  EXPECT_NEAR(sparse * 2 / 1e12, 4.1, 0.05);     // 4.1 TB fp16
  EXPECT_EQ(config->features[2].name, "user_feat_0");
  EXPECT_EQ(config->features[2].table, "user_feat_0");
}

json TinyJson() {
  std::string path = BuiltinConfigPath("tiny");
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return json();
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  std::fclose(f);
  return json::parse(text);
}

std::string ErrorOf(const json& j) {
  auto config = ParseModelConfig(j);
  return config.ok() ? std::string("OK") : std::string(config.status().message());
}

TEST(ModelConfig, ErrorsNamePathAndValue) {
  json j = TinyJson();
  ASSERT_TRUE(ParseModelConfig(j).ok());

  json bad = j;
  bad["arch"]["wukong"]["bogus"] = 1;
  EXPECT_EQ(ErrorOf(bad), "arch.wukong.bogus: unknown key (known: k, n_F, n_L, H, experts)");

  bad = j;
  bad["arch"]["wukong"]["n_F"] = 5;
  EXPECT_EQ(ErrorOf(bad), "arch.wukong.n_F: 5 + n_L 4 != n_x 8");

  bad = j;
  bad["tables"][3]["rows"] = 0;
  EXPECT_EQ(ErrorOf(bad), "tables[3].rows: 0 must be >= 1");

  bad = j;
  bad["features"][1]["table"] = "nope";
  EXPECT_EQ(ErrorOf(bad), "features[1].table: 'nope' is not a table");

  bad = j;
  bad["sequences"][0]["attention"] = json{{"window", 4}, {"block", 64}};
  EXPECT_NE(ErrorOf(bad).find("sequences[0].attention: "), std::string::npos);

  bad = j;
  bad["head"]["widths"][0] = 447;
  EXPECT_EQ(ErrorOf(bad), "head.widths[0]: 447 != n_s*d + J*(n_s+k_p+K_r)*d = 448");

  bad = j;
  bad["tasks"][0]["surfaces"][1] = 2;
  EXPECT_EQ(ErrorOf(bad), "tasks[0].surfaces[1]: 2 is not a surface in [0, 2)");

  bad = j;
  bad["d"] = "32";
  EXPECT_EQ(ErrorOf(bad), "d: \"32\" is not an integer");

  bad = j;
  bad["sequences"][1]["act"] = "tanh";
  EXPECT_EQ(ErrorOf(bad), "sequences[1].act: \"tanh\" is not one of silu, softmax");

  bad = j;
  bad["tables"][0]["dim"] = 16;
  EXPECT_EQ(ErrorOf(bad), "tables[0].dim: 16 != d 32 (every table feeds d-wide tokens)");

  bad = j;
  bad["d"] = 1 << 20;
  EXPECT_EQ(ErrorOf(bad), "d: 1048576 must be <= 65536");

  bad = j;
  bad["arch"]["wukong"]["H"] = 1 << 24;
  bad["arch"]["wukong"]["k"] = 1 << 24;
  EXPECT_NE(ErrorOf(bad).find("arch.wukong: n_z * k * H: "), std::string::npos) << ErrorOf(bad);

  EXPECT_FALSE(ParseModelConfigText("{").ok());
  EXPECT_FALSE(LoadModelConfig("no-such-config").ok());
}

TEST(ModelConfig, CompactGroupsExpand) {
  json j = TinyJson();
  j["tables"].push_back(json{{"name", "grp"}, {"count", 3}, {"rows", 10}});
  j["features"].push_back(json{{"name", "g"}, {"count", 3}, {"table", "grp"}, {"max_len", 2}});
  j["features"].push_back(json{{"name", "shared"}, {"count", 2}, {"table", "user"}, {"max_len", 2}});
  auto config = ParseModelConfig(j);
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->features.size(), 14u);
  EXPECT_EQ(config->features[9].name, "g_0");
  EXPECT_EQ(config->features[11].table, "grp_2");
  EXPECT_EQ(config->features[12].name, "shared_0");
  EXPECT_EQ(config->features[13].table, "user");
  EXPECT_EQ(config->tables[config->features[11].table_index].name, "grp_2");

  j["features"].push_back(json{{"name", "h"}, {"count", 2}, {"table", "grp"}, {"max_len", 2}});
  EXPECT_EQ(ErrorOf(j), "features[11].count: 2 features over table group 'grp' of 3 tables (must be "
                        "equal, or the table single)");
}

}  // namespace
}  // namespace gemtb::model
