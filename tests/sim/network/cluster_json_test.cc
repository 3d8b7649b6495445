// Cluster and calibration JSON: the checks with named errors, references, the default cluster.
#include "sim/network/cluster_json.h"

#include <string>

#include "gmock/gmock.h"
#include "sim/network/collective_cost.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace gemtb::sim {
namespace {

using ::gemtb::testing::StatusIs;
using ::testing::HasSubstr;
using nlohmann::json;

json ThreeTierCluster() {
  return json::parse(R"({
    "world_size": 64, "gpus_per_host": 8, "zone_size": 32, "nics_per_gpu": 1,
    "tiers": [
      {"name": "nvlink", "bw_GBps": 450, "eff_busbw_GBps": 370, "alpha_us": 1.87},
      {"name": "zone", "bw_GBps": 50, "eff_busbw_GBps": 48.5, "alpha_us": 5},
      {"name": "cross", "bw_GBps": 50, "eff_busbw_GBps": 48.5, "alpha_us": 8, "oversubscription": 7}
    ]})");
}

absl::Status ParseError(const json& j) { return ParseCluster(j, "cluster", ".").status(); }

TEST(ClusterJson, ParsesUnitsIntoSecondsAndBytes) {
  absl::StatusOr<Cluster> c = ParseCluster(ThreeTierCluster(), "cluster", ".");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->tiers.size(), 3u);
  EXPECT_DOUBLE_EQ(c->tiers[0].bw_Bps, 450e9);
  EXPECT_DOUBLE_EQ(c->tiers[1].eff_busbw_Bps, 48.5e9);
  EXPECT_DOUBLE_EQ(c->tiers[2].alpha_s, 8e-6);
  EXPECT_DOUBLE_EQ(c->tiers[2].oversubscription, 7);
  EXPECT_EQ(c->zone_size, 32);
  EXPECT_EQ(c->gpu.sm_count, 132);  // tier default
}

TEST(ClusterJson, NegativeBandwidthIsNamed) {
  json j = ThreeTierCluster();
  j["tiers"][1]["bw_GBps"] = -3;
  EXPECT_THAT(ParseError(j), StatusIs(absl::StatusCode::kInvalidArgument, "cluster.tiers[1].bw_GBps: -3 must be > 0"));
}

TEST(ClusterJson, UnknownKeyIsAnError) {
  json j = ThreeTierCluster();
  j["tiers"][0]["bandwidth"] = 1;
  EXPECT_THAT(ParseError(j), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cluster.tiers[0].bandwidth: unknown key")));
  json k = ThreeTierCluster();
  k["gpus"] = 8;
  EXPECT_THAT(ParseError(k), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cluster.gpus: unknown key")));
}

TEST(ClusterJson, MissingOrEmptyTiers) {
  json j = ThreeTierCluster();
  j.erase("tiers");
  EXPECT_THAT(ParseError(j), StatusIs(absl::StatusCode::kInvalidArgument, "cluster.tiers: missing"));
  j["tiers"] = json::array();
  EXPECT_THAT(ParseError(j), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cluster.tiers: [] must be a non-empty array")));
  json k = ThreeTierCluster();
  k["tiers"][2].erase("alpha_us");
  EXPECT_THAT(ParseError(k), StatusIs(absl::StatusCode::kInvalidArgument, "cluster.tiers[2].alpha_us: missing"));
}

TEST(ClusterJson, WorldNeedsATierPerLevelItSpans) {
  json j = ThreeTierCluster();
  j["tiers"].erase(2);
  j.erase("zone_size");
  j["world_size"] = 64;
  EXPECT_TRUE(ParseCluster(j, "cluster", ".").ok());  // two tiers, no zones: one zone
  j["zone_size"] = 32;
  EXPECT_THAT(ParseError(j), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cluster.world_size: 64 spans several zones")));
  j["tiers"].erase(1);
  j.erase("zone_size");
  EXPECT_THAT(ParseError(j), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cluster.world_size: 64 spans several hosts")));
}

TEST(ClusterJson, DivisibilityRules) {
  json j = ThreeTierCluster();
  j["zone_size"] = 12;
  EXPECT_THAT(ParseError(j), StatusIs(absl::StatusCode::kInvalidArgument, "cluster.zone_size: 12 is not a multiple of gpus_per_host 8"));
  json k = ThreeTierCluster();
  k["world_size"] = 72;
  EXPECT_THAT(ParseError(k), StatusIs(absl::StatusCode::kInvalidArgument, "cluster.world_size: 72 is not a multiple of zone_size 32"));
  json small = ThreeTierCluster();
  small["world_size"] = 16;  // smaller than a zone: one zone
  absl::StatusOr<Cluster> c = ParseCluster(small, "cluster", ".");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(EffectiveZoneSize(*c), 16);
  json odd = ThreeTierCluster();
  odd["world_size"] = 4;  // smaller than a host
  EXPECT_TRUE(ParseCluster(odd, "cluster", ".").ok());
}

TEST(ClusterJson, OversubscriptionAndEta) {
  json j = ThreeTierCluster();
  j["tiers"][2]["oversubscription"] = 0.5;
  EXPECT_THAT(ParseError(j), StatusIs(absl::StatusCode::kInvalidArgument, "cluster.tiers[2].oversubscription: 0.5 must be >= 1"));
  json k = ThreeTierCluster();
  k["calibration"] = json::parse(R"({"eta_tables": [{"op": "all_reduce", "hosts": 2, "points": [[1024, 0.3], [2048, 1.5]]}]})");
  EXPECT_THAT(ParseError(k), StatusIs(absl::StatusCode::kInvalidArgument,
                                      "cluster.calibration.eta_tables[0].points[1]: [2048,1.5] eta must be in (0, 1]"));
  json f = ThreeTierCluster();
  f["calibration"] = json::parse(R"({"fitted": [{"op": "all_gather", "tier": "nvl", "alpha_us": 1, "busbw_GBps": 300}]})");
  EXPECT_THAT(ParseError(f), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("cluster.calibration.fitted[0].tier: \"nvl\" is not the name of a tier")));
}

// Mode nccl's fitted segments (sim/network/nccl_fit.h): named errors, and a good entry reaches the
// cost model as t = launch + t_NCCL / η for the group size, protocol and sizes it was fitted on.
TEST(ClusterJson, NcclFittedSegments) {
  json bad = ThreeTierCluster();
  bad["calibration"] = json::parse(R"({"nccl_fitted": [{"op": "all_reduce", "tier": "nvlink", "nccl_algo": "ring",
                                       "proto": "LL64", "launch_us": 3, "eta": 0.5}]})");
  EXPECT_THAT(ParseError(bad), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("cluster.calibration.nccl_fitted[0].proto: \"LL64\" is not one of")));
  bad["calibration"]["nccl_fitted"][0]["proto"] = "Simple";
  bad["calibration"]["nccl_fitted"][0]["eta"] = 0;
  EXPECT_THAT(ParseError(bad), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("cluster.calibration.nccl_fitted[0].eta")));
  bad["calibration"]["nccl_fitted"][0]["eta"] = 0.5;
  bad["calibration"]["nccl_fitted"][0]["algo"] = "direct";
  EXPECT_THAT(ParseError(bad), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("cluster.calibration.nccl_fitted[0].algo")));
  bad["calibration"]["nccl_fitted"][0]["algo"] = "tree";
  bad["calibration"]["nccl_fitted"][0]["tier"] = "nvl";
  EXPECT_THAT(ParseError(bad), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("cluster.calibration.nccl_fitted[0].tier: \"nvl\" is not the name of a tier")));

  json j = ThreeTierCluster();
  j["calibration"] = json::parse(R"({"nccl_fitted": [{"op": "all_reduce", "tier": "nvlink", "nccl_algo": "ring",
                                     "proto": "Simple", "gpus": 8, "min_bytes": 1048576, "launch_us": 3, "eta": 0.5}]})");
  absl::StatusOr<Cluster> fitted = ParseCluster(j, "cluster", ".");
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  // Parsed into the typed list, not into the α–β entries.
  EXPECT_TRUE(fitted->calibration.fitted.empty());
  ASSERT_EQ(fitted->calibration.nccl_fitted.size(), 1u);
  const NcclFitSegment& seg = fitted->calibration.nccl_fitted[0];
  EXPECT_EQ(seg.op, CollectiveOp::kAllReduce);
  EXPECT_EQ(seg.tier, "nvlink");
  EXPECT_FALSE(seg.pinned.has_value());  // "algo" omitted: the auto measurement
  EXPECT_EQ(seg.algo, CollAlgo::kRing);
  EXPECT_EQ(seg.proto, CollProto::kSimple);
  EXPECT_EQ(seg.gpus, 8);
  EXPECT_EQ(seg.min_bytes, 1048576);
  EXPECT_EQ(seg.max_bytes, 0);
  EXPECT_DOUBLE_EQ(seg.launch_s, 3e-6);
  EXPECT_EQ(seg.eta, 0.5);
  j.erase("calibration");
  absl::StatusOr<Cluster> plain = ParseCluster(j, "cluster", ".");
  ASSERT_TRUE(plain.ok()) << plain.status();
  CollectivesPlan plan;
  plan.cost_mode = "nccl";
  absl::StatusOr<CollectiveCostModel> a = CollectiveCostModel::Create(*fitted, plan);
  absl::StatusOr<CollectiveCostModel> b = CollectiveCostModel::Create(*plain, plan);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  const GroupShape host{8, 8, 1, 8, 1};
  const double S = 64.0 * 1024 * 1024;  // ring/Simple on one host (nccl_tuning_test)
  const CollectiveCost raw = b->Estimate(CollectiveOp::kAllReduce, host, S);
  ASSERT_EQ(AlgoLabel(raw.algo, raw.proto), "ring/Simple");
  EXPECT_NEAR(a->Estimate(CollectiveOp::kAllReduce, host, S).duration_s, 3e-6 + raw.duration_s / 0.5, 1e-15);
  // Another group size, another op, a size below the segment: NCCL's own time.
  const GroupShape four{4, 4, 1, 4, 1};
  EXPECT_EQ(a->Estimate(CollectiveOp::kAllReduce, four, S).duration_s, b->Estimate(CollectiveOp::kAllReduce, four, S).duration_s);
  EXPECT_EQ(a->Estimate(CollectiveOp::kAllGather, host, S).duration_s, b->Estimate(CollectiveOp::kAllGather, host, S).duration_s);
  EXPECT_EQ(a->Estimate(CollectiveOp::kAllReduce, host, 4096).duration_s, b->Estimate(CollectiveOp::kAllReduce, host, 4096).duration_s);
  // Mode alpha_beta ignores them.
  absl::StatusOr<CollectiveCostModel> ab = CollectiveCostModel::Create(*fitted, CollectivesPlan{});
  absl::StatusOr<CollectiveCostModel> ab_plain = CollectiveCostModel::Create(*plain, CollectivesPlan{});
  ASSERT_TRUE(ab.ok() && ab_plain.ok());
  EXPECT_EQ(ab->Estimate(CollectiveOp::kAllReduce, host, S).duration_s, ab_plain->Estimate(CollectiveOp::kAllReduce, host, S).duration_s);

  // A segment of a Ring-pinned measurement corrects only a Ring-pinned plan; auto keeps NCCL's time.
  Cluster pinned = *fitted;
  pinned.calibration.nccl_fitted[0].pinned = CollAlgo::kRing;
  CollectivesPlan ring_plan = plan;
  ring_plan.algo["all_reduce"] = "ring";
  absl::StatusOr<CollectiveCostModel> pa = CollectiveCostModel::Create(pinned, plan);
  absl::StatusOr<CollectiveCostModel> pr = CollectiveCostModel::Create(pinned, ring_plan);
  ASSERT_TRUE(pa.ok() && pr.ok()) << pa.status() << pr.status();
  EXPECT_EQ(pa->Estimate(CollectiveOp::kAllReduce, host, S).duration_s, raw.duration_s);
  EXPECT_NEAR(pr->Estimate(CollectiveOp::kAllReduce, host, S).duration_s, 3e-6 + raw.duration_s / 0.5, 1e-15);

  // Segments built in code are checked where the model is built, by index.
  Cluster hand = *plain;
  hand.calibration.nccl_fitted.push_back(seg);
  hand.calibration.nccl_fitted.push_back(seg);
  hand.calibration.nccl_fitted[1].eta = 0;
  EXPECT_THAT(CollectiveCostModel::Create(hand, plan).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cluster.calibration.nccl_fitted[1].eta")));
  hand.calibration.nccl_fitted[1].eta = 0.5;
  hand.calibration.nccl_fitted[1].tier = "nvl";
  EXPECT_THAT(CollectiveCostModel::Create(hand, plan).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cluster.calibration.nccl_fitted[1].tier: \"nvl\"")));
}

TEST(ClusterJson, CalibrationByReference) {
  json j = ThreeTierCluster();
  j["calibration"] = "cal/h.json";
  std::string asked;
  FileReader reader = [&](const std::string& path) -> absl::StatusOr<std::string> {
    asked = path;
    return std::string(R"({"nccl_version": "2.28.9", "nvls": false, "kappa": 0.2,
                           "fitted": [{"op": "all_reduce", "tier": "nvlink", "algo": "ring", "gpus": 2,
                                       "alpha_us": 4, "busbw_GBps": 350}]})");
  };
  absl::StatusOr<Cluster> c = ParseCluster(j, "cluster", "base/dir", reader);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(asked, "base/dir/cal/h.json");
  EXPECT_EQ(c->calibration.nccl_version, "2.28.9");
  ASSERT_EQ(c->calibration.fitted.size(), 1u);
  EXPECT_EQ(c->calibration.fitted[0].gpus, 2);
  EXPECT_DOUBLE_EQ(c->calibration.fitted[0].alpha_s, 4e-6);
  EXPECT_DOUBLE_EQ(*c->calibration.kappa, 0.2);
  FileReader missing = [](const std::string&) -> absl::StatusOr<std::string> { return absl::NotFoundError("gone"); };
  EXPECT_THAT(ParseCluster(j, "cluster", "base", missing).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cluster.calibration: cannot read \"cal/h.json\"")));
}

TEST(ClusterJson, DefaultClusterIsTheThreeTierH200) {
  absl::StatusOr<Cluster> c = DefaultCluster();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->gpus_per_host, 8);
  ASSERT_EQ(c->tiers.size(), 3u);
  EXPECT_DOUBLE_EQ(c->tiers[0].eff_busbw_Bps, 370e9);  // tier default
  EXPECT_DOUBLE_EQ(c->tiers[0].alpha_s, 1.87e-6);
  EXPECT_DOUBLE_EQ(c->tiers[1].eff_busbw_Bps, 48.5e9);
  EXPECT_FALSE(c->calibration.nvls);
  EXPECT_FALSE(c->calibration.nccl_version.empty());
}

}  // namespace
}  // namespace gemtb::sim
