// The scenario parser: gem-default reads as documented, groups are
// capped at the world size, and every invalid input gives an InvalidArgument naming the JSON path,
// the value and the rule.
#include <cmath>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/description/model_graph.h"
#include "sim/scenario/scenario_json.h"
#include "tests/testing/status_matchers.h"

namespace gemtb::sim {
namespace {

using ::gemtb::testing::StatusIs;
using ::testing::HasSubstr;

const std::string kGemDefault = std::string(GEMTB_SOURCE_DIR) + "/sim/scenarios/gem-default.json";

// gem-default loaded once (the gem-scale expansion is the slow part); each test edits a copy.
const ScenarioDocument& GemDefault() {
  static const ScenarioDocument* doc = [] {
    absl::StatusOr<ScenarioDocument> d = LoadScenarioDocument(kGemDefault);
    EXPECT_TRUE(d.ok()) << d.status();
    return new ScenarioDocument(d.ok() ? *d : ScenarioDocument{});
  }();
  return *doc;
}

// An assumption's value and the low and high the sensitivity analysis sweeps it to.
void ExpectSwept(const Assumption& a, double value, double low, double high) {
  SCOPED_TRACE(a.path);
  EXPECT_DOUBLE_EQ(a.value, value);
  EXPECT_DOUBLE_EQ(a.low, low);
  EXPECT_DOUBLE_EQ(a.high, high);
}

absl::Status BuildWith(const std::string& path, const std::string& value) {
  ScenarioDocument doc = GemDefault();
  if (absl::Status s = SetField(doc, path, value); !s.ok()) return s;
  return BuildScenario(doc).status();
}

TEST(GemDefault, ParsesAsDocumented) {
  absl::StatusOr<Scenario> s = BuildScenario(GemDefault());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->name, "gem-default");
  EXPECT_EQ(s->cluster.world_size, 4096);
  EXPECT_EQ(s->cluster.gpus_per_host, 8);
  EXPECT_EQ(s->cluster.zone_size, 2048);
  ASSERT_EQ(s->cluster.tiers.size(), 3u);
  EXPECT_EQ(s->cluster.tiers[2].oversubscription, 7);
  EXPECT_DOUBLE_EQ(s->cluster.tiers[1].alpha_s, 5e-6);
  EXPECT_DOUBLE_EQ(s->cluster.tiers[2].alpha_s, 8e-6);
  EXPECT_EQ(s->cluster.calibration.efficiency.e_mem, 0.6);
  EXPECT_EQ(s->plan.dense.fsdp_shard_group, 256);
  EXPECT_EQ(s->plan.dense.ep_degree, 2);
  EXPECT_EQ(s->plan.dense.expert_shard_group, 16);
  EXPECT_EQ(s->plan.sparse.mp_group, 256);
  EXPECT_TRUE(s->plan.sparse.fully_sharded);
  // plan.sparse resolved per model table by the one sharding plan parser: gem-default.json's default
  // TW, user and ad RW, actions and dt DP.
  ASSERT_NE(s->model, nullptr);
  ASSERT_EQ(s->plan.sparse.tables.size(), s->model->tables.size());
  for (size_t t = 0; t < s->model->tables.size(); ++t) {
    const std::string& name = s->model->tables[t].name;
    const ShardingType want = name == "user" || name == "ad"      ? ShardingType::kRowWise
                              : name == "actions" || name == "dt" ? ShardingType::kDataParallel
                                                                  : ShardingType::kTableWise;
    EXPECT_EQ(s->plan.sparse.tables[t].type, want) << name;
  }
  EXPECT_EQ(s->plan.sparse.gather, GatherMode::kTouched);  // V3 stores less than V2
  EXPECT_EQ(s->batches.id_zipf_default, 0);
  EXPECT_TRUE(s->batches.id_zipf.empty());
  EXPECT_FALSE(s->plan.sparse.state_sync);
  EXPECT_EQ(s->plan.collectives.library, "sm_free");
  EXPECT_EQ(s->batches.local_batch, 1024);
  EXPECT_EQ(s->batches.assignment.policy, "bbs");
  EXPECT_EQ(s->batches.warmup_steps, 1);
  EXPECT_EQ(s->batches.measured_steps, 4);
  ASSERT_EQ(s->batches.features.size(), 10u);
  for (size_t j = 0; j < 10; ++j) {
    const LengthLaw& law = s->batches.features[j];
    EXPECT_EQ(law.kind, LengthLaw::Kind::kLognormal);
    EXPECT_DOUBLE_EQ(law.mu, std::log(j < 8 ? 64.0 : 512.0));
    EXPECT_EQ(law.sigma, 1.5);
    EXPECT_EQ(law.corr, 1);
    EXPECT_EQ(law.max, j < 8 ? 1024 : 16384);
  }
  EXPECT_EQ(s->noise.step_sigma, 0.03);
  EXPECT_EQ(s->noise.collective_jitter_sigma, 0.05);
  ASSERT_NE(s->model, nullptr);
  EXPECT_EQ(s->model->sequences.size(), 10u);
}

TEST(GemDefault, ListsEveryUnpublishedValueWithLowAndHigh) {
  absl::StatusOr<Scenario> s = BuildScenario(GemDefault());
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->assumptions.size(), 12u);
  const Assumption& zone = s->assumptions[0];
  EXPECT_EQ(zone.path, "cluster.zone_size");
  ExpectSwept(zone, 2048, 1024, 4096);
  const Assumption& oversub = s->assumptions[1];
  ExpectSwept(oversub, 7, 2, 14);
  const Assumption& alpha = s->assumptions[2];
  EXPECT_EQ(alpha.paths.size(), 2u);
  ExpectSwept(alpha, 5, 2.5, 10);
  const Assumption& eff = s->assumptions[3];
  EXPECT_EQ(eff.value, 0.45);
  EXPECT_EQ(eff.low_factor, 0.8);
  EXPECT_EQ(eff.high_factor, 1.2);
  const Assumption& rows = s->assumptions[4];
  EXPECT_EQ(rows.path, "model.tables[*].rows");
  EXPECT_GT(rows.value, 7e9);  // ~8e9 rows
  EXPECT_LT(rows.value, 9e9);
  const Assumption& pipeline = s->assumptions[5];
  EXPECT_EQ(pipeline.path, "plan.pipeline.sparse_ahead");
  ExpectSwept(pipeline, 1, 0, 1);  // TorchRec's semi-synchronous pipeline; low: the in-step order
  EXPECT_EQ(s->plan.pipeline.sparse_ahead, 1);
  const Assumption& zipf = s->assumptions[6];
  EXPECT_EQ(zipf.path, "batches.id_zipf.default");
  ExpectSwept(zipf, 0, 0, 1.05);
  const Assumption& spread = s->assumptions[7];
  EXPECT_EQ(spread.paths.size(), 2u);
  ExpectSwept(spread, 1.5, 1.0, 2.0);
  const Assumption& links = s->assumptions[8];
  EXPECT_EQ(links.paths.size(), 4u);
  ExpectSwept(links, 50, 25, 100);
  const Assumption& kappa = s->assumptions[9];
  EXPECT_EQ(kappa.path, "cluster.calibration.kappa");
  EXPECT_GT(kappa.value, 0.2);  // measured on the H200 hosts (calibration file)
  EXPECT_LT(kappa.value, 0.25);
  const Assumption& layout = s->assumptions[10];
  EXPECT_EQ(layout.path, "plan.layout.sparse_shard_group");
  EXPECT_EQ(layout.value, 8);
  EXPECT_EQ(layout.low, 4);
  EXPECT_EQ(layout.high, 16);
  const Assumption& noise = s->assumptions[11];
  EXPECT_EQ(noise.low, 0);
  EXPECT_EQ(noise.high, 0.06);
}

TEST(NamedErrors, PoolingFactor) {
  auto with_pooling = [](const nlohmann::json& p) {
    ScenarioDocument doc = GemDefault();
    doc.json["batches"]["pooling"] = p;
    return BuildScenario(doc);
  };
  // Tables by their expanded names (a config's "count" tables are name_0, name_1, ...).
  absl::StatusOr<Scenario> ok = with_pooling({{"default", 2}, {"tables", {{"user_feat_3", 8}}}});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->batches.PoolingOf("user_feat_3"), 8);
  EXPECT_EQ(ok->batches.PoolingOf("ad_feat_0"), 2);
  EXPECT_EQ(BuildScenario(GemDefault())->batches.PoolingOf("ad_feat_0"), 1);  // one id per pooled feature
  EXPECT_THAT(with_pooling(0).status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                                 HasSubstr("batches.pooling: 0 must be in (0, 10000]")));
  EXPECT_THAT(with_pooling({{"tables", {{"user_feat_0", -3}}}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batches.pooling.tables.user_feat_0: -3 must be in")));
  EXPECT_THAT(with_pooling({{"tables", {{"users", 2}}}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batches.pooling.tables.users: is not a table")));
}

TEST(NamedErrors, HotIdSkew) {
  auto with_zipf = [](const nlohmann::json& z) {
    ScenarioDocument doc = GemDefault();
    doc.json["batches"]["id_zipf"] = z;
    // Without the hot-id assumption, which names batches.id_zipf.default: the parser alone decides.
    nlohmann::json& assumptions = doc.json["assumptions"];
    for (size_t a = 0; a < assumptions.size(); ++a) {
      if (assumptions[a].value("path", "") == "batches.id_zipf.default") {
        assumptions.erase(a);
        break;
      }
    }
    return BuildScenario(doc);
  };
  absl::StatusOr<Scenario> ok = with_zipf({{"default", 0.5}, {"tables", {{"user", 1.1}}}});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->batches.id_zipf_default, 0.5);
  EXPECT_EQ(ok->batches.id_zipf.at("user"), 1.1);
  EXPECT_THAT(with_zipf(-1).status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                               HasSubstr("batches.id_zipf: -1 must be in [0, 4]")));
  EXPECT_THAT(with_zipf({{"tables", {{"nope", 1}}}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batches.id_zipf.tables.nope: is not a table")));
  EXPECT_THAT(with_zipf({{"default", 9}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batches.id_zipf.default")));
  EXPECT_THAT(with_zipf("high").status(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batches.id_zipf")));
}

// The article's layout: V3's full sharding on one NVLink host, each MP group inside one AI zone,
// the zones data parallel; nothing to warn about. With sparse_shard_group 0 (F = N = 16: rank =
// m*N + rho) the same plan's MP groups span both zones and its full-sharding groups two hosts, and
// the parser says so.
TEST(GemDefault, UsesTheArticlesLayout) {
  absl::StatusOr<Scenario> s = BuildScenario(GemDefault());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->plan.layout.shard, 8);
  EXPECT_EQ(s->plan.layout.mp, 256);
  EXPECT_EQ(s->plan.layout.dp, 2);
  EXPECT_TRUE(s->warnings.empty()) << s->warnings.front();

  ScenarioDocument doc = GemDefault();
  ASSERT_TRUE(SetField(doc, "plan.layout.sparse_shard_group", "0").ok());  // 0 = all N replicas
  s = BuildScenario(doc);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->plan.layout.shard, 16);
  EXPECT_EQ(s->plan.layout.dp, 1);
  ASSERT_EQ(s->warnings.size(), 2u);
  EXPECT_THAT(s->warnings[0], HasSubstr("spans 2 hosts of 8: sparse-intra traffic leaves NVLink"));
  EXPECT_THAT(s->warnings[1], HasSubstr("an MP group of 256 positions 16 ranks apart spans 2 zones"));

  // Every sweep size keeps the MP groups inside a zone: F shrinks to N below 4,096 GPUs.
  for (int g = 64; g <= 16384; g *= 2) {
    doc = GemDefault();
    ASSERT_TRUE(SetWorldSize(doc, g).ok());
    s = BuildScenario(doc);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_TRUE(s->warnings.empty()) << g << " GPUs: " << s->warnings.front();
    EXPECT_EQ(s->plan.layout.shard, std::min(8, g / 256 > 0 ? g / 256 : 1)) << g;
  }
}

TEST(NamedErrors, LayoutRules) {
  EXPECT_THAT(BuildWith("plan.layout.sparse_shard_group", "3"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("plan.layout.sparse_shard_group: 3 does not divide the 16 replicas")));
  EXPECT_THAT(BuildWith("plan.layout.sparse_shard_group", "-1"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plan.layout.sparse_shard_group: -1")));
  EXPECT_THAT(BuildWith("plan.sparse.fully_sharded", "false"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("plan.layout.sparse_shard_group: 8 splits the 16 replicas, which only a fully "
                                 "sharded plan")));
  EXPECT_THAT(BuildWith("plan.layout.sparse_order", "[\"shard\", \"zone\", \"dp\"]"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("plan.layout.sparse_order[1]: \"zone\" is not one of shard, mp, dp")));
  EXPECT_THAT(BuildWith("plan.layout.sparse_order", "[\"shard\", \"mp\", \"mp\"]"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plan.layout.sparse_order[2]: \"mp\" appears twice")));
  EXPECT_THAT(BuildWith("plan.layout.sparse_order", "[\"shard\", \"mp\"]"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plan.layout.sparse_order: [\"shard\",\"mp\"] must name")));
  EXPECT_THAT(BuildWith("plan.layout.rank_order", "1"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plan.layout.rank_order")));
}

// plan.torchrec_plan: TorchRec's ParameterSharding names and ranks (positions of the MP group of 256)
// override plan.sparse per table; the ranks place the table's traffic.
TEST(TorchRecPlan, SetsTypesAndRanksPerTable) {
  ScenarioDocument doc = GemDefault();
  doc.json["plan"]["torchrec_plan"] = nlohmann::json::parse(R"({"tables": {
      "user_feat_0": {"sharding_type": "table_wise", "ranks": [17]},
      "user_feat_1": {"sharding_type": "column_wise", "ranks": [5, 9]},
      "ad_feat_0": {"sharding_type": "table_row_wise", "ranks": [0]}}})");
  absl::StatusOr<Scenario> s = BuildScenario(doc);
  ASSERT_TRUE(s.ok()) << s.status();
  auto sharding_of = [&](const std::string& name) {
    for (size_t t = 0; t < s->model->tables.size(); ++t) {
      if (s->model->tables[t].name == name) return s->plan.sparse.tables[t];
    }
    return TableSharding{};
  };
  EXPECT_EQ(sharding_of("user_feat_0").type, ShardingType::kTableWise);
  EXPECT_EQ(sharding_of("user_feat_0").owner, 17);
  EXPECT_EQ(sharding_of("user_feat_1").type, ShardingType::kColumnWise);
  EXPECT_EQ(sharding_of("user_feat_1").shards, 2);
  EXPECT_EQ(sharding_of("user_feat_1").ranks, (std::vector<int>{5, 9}));
  // One MP position per host in the article's layout (positions 8 ranks apart): a host's ranks are one.
  EXPECT_EQ(sharding_of("ad_feat_0").type, ShardingType::kTableRowWise);
  EXPECT_EQ(sharding_of("user").type, ShardingType::kRowWise);  // not named: plan.sparse's
}

TEST(NamedErrors, TorchRecPlan) {
  auto with_plan = [](const std::string& text) {
    ScenarioDocument doc = GemDefault();
    doc.json["plan"]["torchrec_plan"] = nlohmann::json::parse(text);
    return BuildScenario(doc).status();
  };
  EXPECT_THAT(with_plan(R"({"tables": {"nope": {"sharding_type": "table_wise", "ranks": [0]}}})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("plan.torchrec_plan.tables.nope: is not a table of the model")));
  EXPECT_THAT(with_plan(R"({"tables": {"user_feat_0": {"sharding_type": "TW", "ranks": [0]}}})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("plan.torchrec_plan.tables.user_feat_0.sharding_type: \"TW\" is not one of "
                                 "data_parallel, table_wise, row_wise, column_wise, table_row_wise")));
  EXPECT_THAT(with_plan(R"({"tables": {"user_feat_0": {"sharding_type": "table_wise", "ranks": [256]}}})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("plan.torchrec_plan.tables.user_feat_0.ranks[0]: 256 is not a rank of the sharding "
                                 "group of 256")));
  EXPECT_THAT(with_plan(R"({"tables": {"user_feat_0": {"sharding_type": "table_wise", "ranks": [1, 2]}}})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must name one rank")));
  EXPECT_THAT(with_plan(R"({"tables": {"user_feat_0": {"sharding_type": "column_wise", "ranks": [1, 1]}}})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ranks[1]: 1 appears twice")));
  EXPECT_THAT(with_plan(R"({"tables": {"user_feat_0": {"sharding_type": "row_wise", "ranks": [0, 1]}}})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("row_wise uses every rank of the group of 256")));
  EXPECT_THAT(with_plan(R"({"tables": {"user_feat_0": {"sharding_type": "table_wise"}}})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plan.torchrec_plan.tables.user_feat_0.ranks: missing")));
  EXPECT_THAT(with_plan(R"({"tables": {"user_feat_0": {"sharding_type": "table_wise", "ranks": [0], "kernel": 1}}})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plan.torchrec_plan.tables.user_feat_0.kernel")));
  EXPECT_THAT(with_plan(R"({"plan": {}})"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plan.torchrec_plan.plan")));
}

TEST(GemDefault, GroupsAreCappedAtTheWorldSize) {
  ScenarioDocument doc = GemDefault();
  ASSERT_TRUE(SetWorldSize(doc, 64).ok());
  absl::StatusOr<Scenario> s = BuildScenario(doc);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->cluster.world_size, 64);
  EXPECT_EQ(s->plan.dense.fsdp_shard_group, 64);
  EXPECT_EQ(s->plan.sparse.mp_group, 64);
  EXPECT_EQ(s->plan.dense.ep_degree, 2);
  EXPECT_EQ(s->plan.dense.expert_shard_group, 16);
}

TEST(GemDefault, EverySweepSizeFrom64To16384IsValid) {
  for (int g = 64; g <= 16384; g *= 2) {
    ScenarioDocument doc = GemDefault();
    ASSERT_TRUE(SetWorldSize(doc, g).ok());
    absl::StatusOr<Scenario> s = BuildScenario(doc);
    EXPECT_TRUE(s.ok()) << g << " GPUs: " << s.status();
  }
}

// ---- named errors ------------------------------------------------------------------------------

TEST(NamedErrors, GroupSizeNotDividingTheWorld) {
  EXPECT_THAT(BuildWith("plan.dense.fsdp_shard_group", "96"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("plan.dense.fsdp_shard_group: 96 does not divide world_size 4096")));
  EXPECT_THAT(BuildWith("plan.sparse.mp_group", "48"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plan.sparse.mp_group: 48 does not divide world_size 4096")));
  EXPECT_THAT(BuildWith("plan.dense.expert_shard_group", "3"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plan.dense.expert_shard_group: 3")));
  EXPECT_THAT(BuildWith("plan.dense.ep_degree", "4"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plan.dense.ep_degree: 4 does not divide the model's 2 experts")));
}

TEST(NamedErrors, NegativeBandwidth) {
  EXPECT_THAT(BuildWith("cluster.tiers[1].bw_GBps", "-3"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cluster.tiers[1].bw_GBps: -3")));
}

TEST(NamedErrors, UnknownField) {
  EXPECT_THAT(BuildWith("plan.dense.fsdp_shard_groups", "128"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plan.dense.fsdp_shard_groups: unknown key")));
  EXPECT_THAT(BuildWith("batches.assignment.polcy", "\"bbs\""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batches.assignment.polcy: unknown key")));
  ScenarioDocument doc = GemDefault();
  doc.json["sedd"] = 1;
  EXPECT_THAT(BuildScenario(doc), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sedd: unknown key")));
}

TEST(NamedErrors, MissingTier) {
  ScenarioDocument doc = GemDefault();
  doc.json["cluster"]["tiers"] = nlohmann::json::array();
  EXPECT_THAT(BuildScenario(doc), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cluster.tiers")));
  // Two tiers for a world spanning two zones: the cross-zone tier is missing.
  doc = GemDefault();
  doc.json["cluster"]["tiers"].erase(2);
  EXPECT_THAT(BuildScenario(doc), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cluster.tiers")));
}

TEST(NamedErrors, MinAboveMax) {
  EXPECT_THAT(BuildWith("batches.features[0].lognormal.min", "2000"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batches.features[0].lognormal.min: 2000")));
  EXPECT_THAT(BuildWith("batches.features[1].lognormal.max", "20000"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("batches.features[1].lognormal.max: 20000 exceeds the model sequence's Lmax 16384")));
  ScenarioDocument doc = GemDefault();
  ASSERT_TRUE(SetField(doc, "batches.features[0].lognormal.max", "100").ok());
  ASSERT_TRUE(SetField(doc, "batches.features[0].lognormal.min", "200").ok());
  EXPECT_THAT(BuildScenario(doc), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("batches.features[0].lognormal.min: 200 must be <= max 100")));
}

TEST(NamedErrors, BadHistogram) {
  auto with_first_law = [](const nlohmann::json& law) {
    ScenarioDocument doc = GemDefault();
    doc.json["batches"]["features"] = {{{"count", 8}, {"histogram", law}},
                                       {{"count", 2}, {"lognormal", {{"median", 512}, {"sigma", 1.5}}}}};
    // The sequence-length spread assumption names the lognormal sigmas this variant no longer has.
    nlohmann::json& assumptions = doc.json["assumptions"];
    for (size_t a = 0; a < assumptions.size(); ++a) {
      if (assumptions[a].contains("paths") && assumptions[a]["paths"][0] == "batches.features[0].lognormal.sigma") {
        assumptions.erase(a);
        break;
      }
    }
    return BuildScenario(doc).status();
  };
  EXPECT_TRUE(with_first_law({{"bins", {{1, 0.5}, {64, 1.0}, {1024, 0.1}}}}).ok());
  EXPECT_THAT(with_first_law({{"bins", {{1, 0}, {64, 0}}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batches.features[0].histogram.bins: weights sum to 0")));
  EXPECT_THAT(with_first_law({{"bins", {{1, 1}, {64, -2}}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batches.features[0].histogram.bins[1][1]: -2 must be >= 0")));
  EXPECT_THAT(with_first_law({{"bins", {{64, 1}, {8, 1}}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batches.features[0].histogram.bins[1][0]: 8")));
  EXPECT_THAT(with_first_law({{"bins", {{4096, 1}}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batches.features[0].histogram.bins[0][0]: 4096")));
  EXPECT_THAT(with_first_law({{"bins", nlohmann::json::array()}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batches.features[0].histogram.bins")));
}

TEST(NamedErrors, LawsMustMatchTheModelSequences) {
  ScenarioDocument doc = GemDefault();
  doc.json["batches"]["features"][1]["count"] = 1;
  EXPECT_THAT(BuildScenario(doc), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("batches.features: 9 length laws for the model's 10 sequences")));
  doc.json["batches"]["features"][1]["count"] = 3;
  EXPECT_THAT(BuildScenario(doc), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("batches.features: more length laws than the model's 10 sequences")));
  // A law's bounds are checked against its own sequence: a short sequence cannot take the long law.
  doc.json["batches"]["features"][0]["count"] = 7;
  EXPECT_THAT(BuildScenario(doc), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("exceeds the model sequence's Lmax 1024 (sequence 7)")));
}

// plan.collectives.flow: "none" and "maxmin" are modelled; "fifo" (store-and-forward per link) is not,
// so it is rejected by name rather than accepted and ignored.
TEST(NamedErrors, FlowFifoIsRejected) {
  EXPECT_THAT(BuildWith("plan.collectives.flow", "\"fifo\""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("plan.collectives.flow: \"fifo\" is not one of none, maxmin")));
  EXPECT_TRUE(BuildWith("plan.collectives.flow", "\"none\"").ok());
  EXPECT_TRUE(BuildWith("plan.collectives.flow", "\"maxmin\"").ok());
}

TEST(NamedErrors, OtherPlanAndBatchRules) {
  EXPECT_THAT(BuildWith("batches.assignment.sub_batch", "100"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batches.assignment.sub_batch: 100 does not divide local_batch 1024")));
  EXPECT_THAT(BuildWith("batches.assignment.policy", "\"fifo\""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batches.assignment.policy: \"fifo\" is not one of")));
  EXPECT_THAT(BuildWith("plan.collectives.library", "\"nvshmem\""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plan.collectives.library")));
  EXPECT_THAT(BuildWith("plan.sparse.default.type", "\"ROW\""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plan.sparse.default.type: \"ROW\" is not one of")));
  EXPECT_THAT(BuildWith("plan.sparse.tables.nosuch", "{\"type\": \"TW\"}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plan.sparse.tables.nosuch")));
  EXPECT_THAT(BuildWith("plan.sparse.default", "{\"type\": \"GRID\"}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plan.sparse.default.shards: missing: GRID table")));
  EXPECT_THAT(BuildWith("plan.sparse.gather", "\"some\""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plan.sparse.gather: \"some\" is not one of all, touched")));
  EXPECT_THAT(BuildWith("plan.sparse.tables.user", "{\"type\": \"RW\", \"owner\": 3}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plan.sparse.tables.user.owner: 3: only TW tables have an owner")));
  EXPECT_THAT(BuildWith("plan.memory.act_quant", "\"int4\""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plan.memory.act_quant")));
  EXPECT_THAT(BuildWith("plan.pipeline.sparse_ahead", "2"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plan.pipeline.sparse_ahead: 2")));
  EXPECT_THAT(BuildWith("plan.pipeline.depth", "1"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plan.pipeline.depth")));
  EXPECT_THAT(BuildWith("noise.step_sigma", "-0.1"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("noise.step_sigma: -0.1")));
  EXPECT_THAT(BuildWith("noise.slow_ranks", "{\"ranks\": [5000], \"factor\": 1.5}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("noise.slow_ranks.ranks[0]: 5000 is not a rank")));
  EXPECT_THAT(BuildWith("seed", "-1"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("seed: -1")));
}

TEST(NamedErrors, SectionFilesAndModels) {
  nlohmann::json json = GemDefault().json;
  json["cluster"] = "no_such_cluster.json";
  EXPECT_THAT(LoadScenarioDocument(json, GEMTB_SOURCE_DIR "/sim/scenarios").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cluster: cannot read")));
  json = GemDefault().json;
  json["model"] = "gem-scale-xl";
  EXPECT_THAT(LoadScenarioDocument(json, GEMTB_SOURCE_DIR "/sim/scenarios").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model: cannot read")));
  json = GemDefault().json;
  json.erase("batches");
  EXPECT_THAT(LoadScenarioDocument(json, GEMTB_SOURCE_DIR "/sim/scenarios").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batches: missing")));
  ScenarioDocument doc = GemDefault();
  doc.json["assumptions"][0]["path"] = "cluster.zone_sise";
  EXPECT_THAT(BuildScenario(doc), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("assumptions[0].path: cluster.zone_sise")));
}

// ---- edits for sweeps --------------------------------------------------------------------------

TEST(FieldEdits, SetFieldChangesOnePlanField) {
  ScenarioDocument doc = GemDefault();
  ASSERT_TRUE(SetField(doc, "plan.dense.fsdp_shard_group", "128").ok());
  ASSERT_TRUE(SetField(doc, "plan.collectives.library", "sm_based").ok());  // bare text is a string
  absl::StatusOr<Scenario> s = BuildScenario(doc);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->plan.dense.fsdp_shard_group, 128);
  EXPECT_EQ(s->plan.collectives.library, "sm_based");
}

TEST(FieldEdits, BadPathsAreNamed) {
  ScenarioDocument doc = GemDefault();
  EXPECT_THAT(SetField(doc, "cluster.tiers[7].alpha_us", "1"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("has no element [7]")));
  EXPECT_THAT(SetField(doc, "plan..dense", "1"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dotted JSON path")));
  EXPECT_THAT(SetField(doc, "model.d", "128"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model.d")));
}

TEST(FieldEdits, TableRowsScaleEveryTable) {
  ScenarioDocument doc = GemDefault();
  absl::StatusOr<double> rows = GetNumber(doc, "model.tables[*].rows");
  ASSERT_TRUE(rows.ok());
  ASSERT_TRUE(SetFieldJson(doc, "model.tables[*].rows", 2 * *rows).ok());
  absl::StatusOr<Scenario> s = BuildScenario(doc);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->model->tables.size(), GemDefault().model->tables.size());
  for (size_t t = 0; t < s->model->tables.size(); ++t) {
    EXPECT_EQ(s->model->tables[t].rows, 2 * GemDefault().model->tables[t].rows) << s->model->tables[t].name;
  }
}

TEST(FieldEdits, AssumptionCasesMoveEveryPath) {
  absl::StatusOr<Scenario> base = BuildScenario(GemDefault());
  ASSERT_TRUE(base.ok());
  ScenarioDocument low = GemDefault();
  ASSERT_TRUE(ApplyAssumption(low, base->assumptions[0], AssumptionCase::kLow).ok());  // zone 1024
  ASSERT_TRUE(ApplyAssumption(low, base->assumptions[2], AssumptionCase::kHigh).ok());  // alphas x2
  ASSERT_TRUE(ApplyAssumption(low, base->assumptions[3], AssumptionCase::kLow).ok());  // efficiencies x0.8
  absl::StatusOr<Scenario> s = BuildScenario(low);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->cluster.zone_size, 1024);
  EXPECT_DOUBLE_EQ(s->cluster.tiers[1].alpha_s, 10e-6);
  EXPECT_DOUBLE_EQ(s->cluster.tiers[2].alpha_s, 16e-6);
  EXPECT_DOUBLE_EQ(s->cluster.calibration.efficiency.e_mem, 0.48);
  EXPECT_TRUE(low.json["cluster"]["zone_size"].is_number_integer());
}

}  // namespace
}  // namespace gemtb::sim
