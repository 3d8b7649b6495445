// Mode alpha_beta: each algorithm against its closed form written out here from the
// textbook table, auto = the cheapest, busbw independent of p at large S (rapidcheck), group shapes.
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "sim/network/cluster_json.h"
#include "sim/network/collective_cost.h"
#include "tests/testing/rapidcheck_runner.h"
#include "tests/testing/status_matchers.h"

namespace gemtb::sim {
namespace {

using ::gemtb::testing::StatusIs;
using ::testing::HasSubstr;

constexpr double kAlpha0 = 2e-6, kB0 = 400e9;    // NVLink level
constexpr double kAlpha1 = 5e-6, kNic = 50e9;     // in-zone RoCE
constexpr double kAlpha2 = 8e-6, kOver = 4;       // cross-zone
constexpr double kPost = 1e-6;  // NCCL's per-post network overhead (default nccl_net_overhead_us)

Cluster TestCluster() {
  Cluster c;
  c.world_size = 1024;
  c.gpus_per_host = 8;
  c.zone_size = 256;
  c.tiers = {{"nvlink", 450e9, kB0, kAlpha0, 1}, {"zone", 50e9, kNic, kAlpha1, 1}, {"cross", 50e9, kNic, kAlpha2, kOver}};
  return c;
}

CollectiveCostModel Model(const std::string& op = "", const std::string& algo = "", const Cluster& c = TestCluster()) {
  CollectivesPlan plan;
  if (!op.empty()) plan.algo[op] = algo;
  absl::StatusOr<CollectiveCostModel> m = CollectiveCostModel::Create(c, plan);
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

GroupShape OneHost(int p) { return {p, p, 1, p, 1}; }

void ExpectRel(double got, double want) { EXPECT_NEAR(got, want, 1e-9 * want) << "got " << got << " want " << want; }

TEST(AlphaBeta, RingClosedFormsOnOneHost) {
  const double S = 96e6;
  for (int p : {2, 3, 8}) {
    const GroupShape g = OneHost(p);
    ExpectRel(Model("all_gather", "ring").Estimate(CollectiveOp::kAllGather, g, S).duration_s,
              (p - 1) * kAlpha0 + (p - 1.0) / p * S / kB0);
    ExpectRel(Model("reduce_scatter", "ring").Estimate(CollectiveOp::kReduceScatter, g, S).duration_s,
              (p - 1) * kAlpha0 + (p - 1.0) / p * S / kB0);
    ExpectRel(Model("all_reduce", "ring").Estimate(CollectiveOp::kAllReduce, g, S).duration_s,
              2 * (p - 1) * kAlpha0 + 2 * (p - 1.0) / p * S / kB0);
  }
}

TEST(AlphaBeta, TreeHalvingDoublingDirectOnOneHost) {
  const double S = 10e6;
  // Double binary tree: 2⌈log2 p⌉α + 2S/B; p = 6 -> ⌈log2 6⌉ = 3.
  ExpectRel(Model("all_reduce", "tree").Estimate(CollectiveOp::kAllReduce, OneHost(6), S).duration_s,
            2 * 3 * kAlpha0 + 2 * S / kB0);
  // Halving-doubling, p = 8: 2·3·α + 2(7/8)S/B.
  ExpectRel(Model("all_reduce", "halving_doubling").Estimate(CollectiveOp::kAllReduce, OneHost(8), S).duration_s,
            6 * kAlpha0 + 2 * 7.0 / 8 * S / kB0);
  // p = 6 (not 2^k): body on p' = 4 (2·2α + 2(3/4)S/B) plus pre (α + S/2B) and post (α + S/B).
  ExpectRel(Model("all_reduce", "halving_doubling").Estimate(CollectiveOp::kAllReduce, OneHost(6), S).duration_s,
            4 * kAlpha0 + 1.5 * S / kB0 + 2 * kAlpha0 + 1.5 * S / kB0);
  // Recursive halving RS, p = 4: 2α + (3/4)S/B.
  ExpectRel(Model("reduce_scatter", "halving_doubling").Estimate(CollectiveOp::kReduceScatter, OneHost(4), S).duration_s,
            2 * kAlpha0 + 0.75 * S / kB0);
  // Direct all-to-all, window 1: (p−1)α + ((p−1)/p)S/B.
  ExpectRel(Model().Estimate(CollectiveOp::kAllToAll, OneHost(8), S).duration_s, 7 * kAlpha0 + 7.0 / 8 * S / kB0);
}

TEST(AlphaBeta, MultiTierAllToAllMatchesSimAiBusbw) {
  // 4 hosts of 8 in one zone: T = max(S·7/(32·B0), S·24/(32·Bnic)) + α1 + 31 posts (the peers'
  // network latencies overlap; their posts are serial); with the NIC binding,
  // busbw = Bnic (p−1)/(p−g) ([SimAI-BW]) as S grows.
  const GroupShape g{32, 8, 4, 32, 1};
  const double S = 1e12;
  const CollectiveCost c = Model().Estimate(CollectiveOp::kAllToAll, g, S);
  ExpectRel(c.duration_s, kAlpha1 + 31 * kPost + S * 24 / (32 * kNic));
  EXPECT_NEAR(c.busbw_Bps, kNic * 31 / 24, 1e-4 * kNic);  // α terms: ~1e-5 relative at 1 TB
  // Across two zones of 256 (512 ranks): the oversubscribed term o·S(p−Z)/(p·Bnic) binds.
  const GroupShape z{512, 8, 64, 256, 2};
  ExpectRel(Model().Estimate(CollectiveOp::kAllToAll, z, S).duration_s,
            kAlpha2 + 511 * kPost + kOver * S * 256 / (512 * kNic));
}

TEST(AlphaBeta, AllToAllLatencyIsNotOneNetworkAlphaPerPeer) {
  // 4,096 ranks over 2 zones, 64 MiB: one cross-zone α and 4,095 posts of 1 µs, not 4,095 × 8 µs.
  Cluster c = TestCluster();
  c.world_size = 4096;
  c.zone_size = 2048;
  const GroupShape g{4096, 8, 512, 2048, 2};
  const double S = 64.0 * 1024 * 1024;
  const double bw = std::max({S * 7 / (4096 * kB0), S * 4088 / (4096 * kNic), S * 2048 / (4096 * (kNic / kOver))});
  ExpectRel(Model("", "", c).Estimate(CollectiveOp::kAllToAll, g, S).duration_s, kAlpha2 + 4095 * kPost + bw);
}

TEST(AlphaBeta, HierarchicalAllReduce) {
  // 2 zones × 4 hosts × 8: m = (8, 4, 2); B = (B0, Bnic, Bnic/o).
  const GroupShape g{64, 8, 8, 32, 2};
  const double S = 1e9;
  const double want = 2 * (7.0 / 8) * S / kB0 + 2 * (3.0 / 4) * (S / 8) / kNic + 2 * (1.0 / 2) * (S / 32) / (kNic / kOver) +
                      2 * 7 * kAlpha0 + 2 * 3 * kAlpha1 + 2 * 1 * kAlpha2;
  ExpectRel(Model("all_reduce", "hierarchical").Estimate(CollectiveOp::kAllReduce, g, S).duration_s, want);
}

TEST(AlphaBeta, FlatRingAcrossHostsSeesTheHostsNics) {
  // 4 full hosts: busbw = min(B0, 8·Bnic) = 400 GB/s; latency 2·(28α0 + 3α1).
  const GroupShape g{32, 8, 4, 32, 1};
  const double S = 4e9;
  ExpectRel(Model("all_reduce", "ring").Estimate(CollectiveOp::kAllReduce, g, S).duration_s,
            2 * (28 * kAlpha0 + 3 * kAlpha1) + 2 * (31.0 / 32) * S / std::min(kB0, 8 * kNic));
  // One GPU per host: the NIC alone.
  const GroupShape strided{4, 1, 4, 4, 1};
  ExpectRel(Model("all_gather", "ring").Estimate(CollectiveOp::kAllGather, strided, S).duration_s,
            3 * kAlpha1 + 0.75 * S / kNic);
}

TEST(AlphaBeta, AutoIsTheCheapestOfNcclsAlgorithms) {
  const CollectiveCostModel m = Model();
  for (double S : {1e3, 1e5, 1e7, 1e9}) {
    for (int p : {2, 4, 8}) {
      const CollectiveCost c = m.Estimate(CollectiveOp::kAllReduce, OneHost(p), S);
      for (CollAlgo a : {CollAlgo::kRing, CollAlgo::kTree}) {
        EXPECT_LE(c.duration_s, m.EstimateWith(CollectiveOp::kAllReduce, a, OneHost(p), S).duration_s);
      }
      EXPECT_TRUE(c.algo == CollAlgo::kRing || c.algo == CollAlgo::kTree) << CollAlgoName(c.algo);
    }
  }
  // Tiny S on 8: tree (2·3α) beats ring (2·7α); halving-doubling would tie the tree's α with the
  // ring's bandwidth, but NCCL does not run it. Large S: ring (2(p−1)/p·S/B) beats tree (2S/B).
  EXPECT_EQ(m.Estimate(CollectiveOp::kAllReduce, OneHost(8), 1e3).algo, CollAlgo::kTree);
  EXPECT_EQ(m.Estimate(CollectiveOp::kAllReduce, OneHost(8), 1e10).algo, CollAlgo::kRing);
  // All-gather across hosts and zones: NCCL's ring (PAT needs one GPU per host), never the
  // hierarchical or recursive-doubling forms, however much cheaper their α terms would be.
  const GroupShape wide{1024, 8, 128, 256, 4};
  const CollectiveCost ag = m.Estimate(CollectiveOp::kAllGather, wide, 64e6);
  EXPECT_EQ(ag.algo, CollAlgo::kRing);
  EXPECT_GT(ag.duration_s, m.EstimateWith(CollectiveOp::kAllGather, CollAlgo::kHierarchical, wide, 64e6).duration_s);
  // One GPU per host: PAT (log2 p steps) where it is cheaper than the ring.
  const GroupShape strided{64, 1, 64, 64, 1};
  EXPECT_EQ(m.Estimate(CollectiveOp::kAllGather, strided, 1e5).algo, CollAlgo::kPat);
}

TEST(AlphaBeta, BusbwIndependentOfGroupSizeAtLargeS) {
  gemtb::testing::CheckProperty(200, [] {
    const int hosts = *rc::gen::inRange(1, 33);
    const int per_host = hosts == 1 ? *rc::gen::inRange(2, 9) : 8;
    const int op_index = *rc::gen::inRange(0, 3);
    const CollectiveOp op = op_index == 0   ? CollectiveOp::kAllReduce
                            : op_index == 1 ? CollectiveOp::kAllGather
                                            : CollectiveOp::kReduceScatter;
    const int p = hosts * per_host;
    const GroupShape g{p, per_host, hosts, std::min(p, 256), (p + 255) / 256};
    const CollectiveCost c = Model(std::string(CollectiveOpName(op)), "ring").Estimate(op, g, 1e15);
    // One zone (p <= 256): the flat ring's busbw is min(B0, 8·Bnic) = B0 whatever p is.
    RC_ASSERT(std::fabs(c.busbw_Bps - kB0) <= 1e-6 * kB0);
  });
}

TEST(AlphaBeta, AllToAllvUsesTheBusiestTier) {
  const GroupShape g{32, 8, 4, 32, 1};
  AllToAllvLoad load;
  load.bytes_per_tier = {7e6, 24e6, 0};
  ExpectRel(Model().EstimateAllToAllv(g, load).duration_s, kAlpha1 + 31 * kPost + std::max(7e6 / kB0, 24e6 / kNic));
}

TEST(AlphaBeta, AllToAllvMatrixIsPricedByItsSlowestMember) {
  // 4 members, 2 per host (one zone): member 0 and 1 share host 0, 2 and 3 host 1. Member 3 receives
  // 30 MB from member 0 across hosts (the hot receiver); everything else sends 1 MB to each peer.
  const GroupShape g{4, 2, 2, 4, 1};
  std::vector<double> m(16, 1e6);
  for (int i = 0; i < 4; ++i) m[i * 4 + i] = 5e9;  // self-traffic: ignored
  m[0 * 4 + 3] = 30e6;
  absl::StatusOr<std::vector<AllToAllvLoad>> loads = AllToAllvLoads(g, m);
  ASSERT_TRUE(loads.ok()) << loads.status();
  // Member 3 receives 30 + 1 MB across hosts (from members 0 and 1) and sends 2 MB across; NVLink:
  // 1 MB each way with member 2.
  EXPECT_EQ((*loads)[3].bytes_per_tier, (std::array<double, 3>{1e6, 31e6, 0}));
  // Member 0 sends 31 MB across hosts, receives 2 MB.
  EXPECT_EQ((*loads)[0].bytes_per_tier, (std::array<double, 3>{1e6, 31e6, 0}));
  EXPECT_EQ((*loads)[1].bytes_per_tier, (std::array<double, 3>{1e6, 2e6, 0}));
  absl::StatusOr<CollectiveCostModel::AllToAllvResult> r = Model().EstimateAllToAllvMatrix(g, m);
  ASSERT_TRUE(r.ok());
  const double want = kAlpha1 + 3 * kPost + std::max(1e6 / kB0, 31e6 / kNic);
  ExpectRel(r->slowest.duration_s, want);
  EXPECT_EQ(r->slowest_member, 0);
  ExpectRel(r->member_duration_s[1], kAlpha1 + 3 * kPost + std::max(1e6 / kB0, 2e6 / kNic));
  EXPECT_THAT(AllToAllvLoads(g, std::vector<double>(15, 1.0)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("all-to-allv matrix: 15 entries for a group of 4")));
}

TEST(AlphaBeta, FittedCalibrationReplacesTheTier) {
  Cluster c = TestCluster();
  FittedLink link;
  link.op = CollectiveOp::kAllGather;
  link.tier = "nvlink";
  link.algo = "auto";
  link.gpus = 2;
  link.alpha_s = 10e-6;
  link.busbw_Bps = 300e9;
  c.calibration.fitted.push_back(link);
  // A segment for other sizes only does not apply at S.
  FittedLink other = link;
  other.min_bytes = 1e9;
  other.alpha_s = 1;
  c.calibration.fitted.push_back(other);
  const double S = 1e8;
  ExpectRel(Model("all_gather", "ring", c).Estimate(CollectiveOp::kAllGather, OneHost(2), S).duration_s,
            10e-6 + 0.5 * S / 300e9);
  // Other ops keep the tier defaults.
  ExpectRel(Model("all_reduce", "ring", c).Estimate(CollectiveOp::kAllReduce, OneHost(2), S).duration_s,
            2 * kAlpha0 + S / kB0);
}

TEST(AlphaBeta, UnmeasuredGroupSizesExtrapolateFromTheLargestMeasuredOne) {
  // Measured (NCCL auto) on 2 and 4 GPUs; an 8-GPU host keeps the 4-GPU segment's bandwidth and
  // latency steps, each of its 4 further ring steps at the tier's α: never faster than 4 GPUs.
  Cluster c = TestCluster();
  FittedLink two{CollectiveOp::kAllGather, "nvlink", "auto", 2, 0, 0, 9e-6, 300e9};
  FittedLink four{CollectiveOp::kAllGather, "nvlink", "auto", 4, 0, 0, 10e-6, 350e9};
  c.calibration.fitted = {two, four};
  const CollectiveCostModel m = Model("", "", c);
  const double S = 1 << 20;
  const CollectiveCost c4 = m.Estimate(CollectiveOp::kAllGather, OneHost(4), S);
  const CollectiveCost c8 = m.Estimate(CollectiveOp::kAllGather, OneHost(8), S);
  ExpectRel(c4.duration_s, 3 * 10e-6 + 0.75 * S / 350e9);
  ExpectRel(c8.duration_s, 3 * 10e-6 + 4 * kAlpha0 + 7.0 / 8 * S / 350e9);
  EXPECT_EQ(c4.anchor_gpus, 0);
  EXPECT_EQ(c8.anchor_gpus, 4);
  EXPECT_GT(c8.duration_s, c4.duration_s);
  // 3 GPUs lie between: anchored on 2.
  ExpectRel(m.Estimate(CollectiveOp::kAllGather, OneHost(3), S).duration_s, 9e-6 + kAlpha0 + 2.0 / 3 * S / 300e9);
  // Groups across hosts are not extrapolated from one host's measurement.
  EXPECT_EQ(m.Estimate(CollectiveOp::kAllGather, GroupShape{16, 8, 2, 16, 1}, S).anchor_gpus, 0);
}

TEST(AlphaBeta, CommittedCalibrationEightGpusNotFasterThanFour) {
  absl::StatusOr<Cluster> c = DefaultCluster();
  ASSERT_TRUE(c.ok()) << c.status();
  c->world_size = 4096;
  const CollectiveCostModel m = Model("", "", *c);
  for (CollectiveOp op : {CollectiveOp::kAllReduce, CollectiveOp::kAllGather, CollectiveOp::kReduceScatter,
                          CollectiveOp::kAllToAll, CollectiveOp::kBroadcast}) {
    for (double S : {1024.0, 1048576.0, 67108864.0, 1073741824.0}) {
      const CollectiveCost c4 = m.Estimate(op, OneHost(4), S), c8 = m.Estimate(op, OneHost(8), S);
      EXPECT_GE(c8.duration_s, c4.duration_s) << CollectiveOpName(op) << " S " << S;
      EXPECT_EQ(c8.anchor_gpus, 4) << CollectiveOpName(op);
    }
  }
}

TEST(AlphaBeta, NetworkEtaTablesApplyAcrossHostsOnly) {
  Cluster c = TestCluster();
  c.calibration.eta_tables.push_back({CollectiveOp::kAllReduce, 2, {{1e6, 0.25}, {1e8, 0.5}}});
  c.calibration.eta_tables.push_back({CollectiveOp::kAllReduce, 4, {{1e6, 0.5}, {1e8, 1.0}}});
  CollectivesPlan on;
  on.algo["all_reduce"] = "ring";
  on.eta_tables = true;
  CollectivesPlan off = on;
  off.eta_tables = false;
  const CollectiveCostModel with = *CollectiveCostModel::Create(c, on), without = *CollectiveCostModel::Create(c, off);
  const double S = 1e8;
  // One host: no table applies.
  ExpectRel(with.Estimate(CollectiveOp::kAllReduce, OneHost(8), S).duration_s,
            without.Estimate(CollectiveOp::kAllReduce, OneHost(8), S).duration_s);
  // 2 hosts take the 2-host table (η 0.5 at 1e8), 3 hosts too (the most hosts not above), 8 the 4-host
  // one. η scales the ring's bandwidth term, not its latency steps.
  for (auto [hosts, eta] : {std::pair{2, 0.5}, std::pair{3, 0.5}, std::pair{8, 1.0}}) {
    const int p = 8 * hosts;
    const GroupShape g{p, 8, hosts, p, 1};
    const double latency = 2 * ((p - hosts) * kAlpha0 + (hosts - 1) * kAlpha1);
    const double bandwidth = 2 * (p - 1.0) / p * S / std::min(kB0, 8 * kNic);
    ExpectRel(without.Estimate(CollectiveOp::kAllReduce, g, S).duration_s, latency + bandwidth);
    ExpectRel(with.Estimate(CollectiveOp::kAllReduce, g, S).duration_s, latency + bandwidth / eta);
  }
}

TEST(AlphaBeta, EtaTablesScaleBusbw) {
  Cluster c = TestCluster();
  c.calibration.eta_tables.push_back({CollectiveOp::kAllGather, 1, {{1e6, 0.5}, {1e8, 1.0}}});
  CollectivesPlan plan;
  plan.algo["all_gather"] = "ring";
  plan.eta_tables = true;
  absl::StatusOr<CollectiveCostModel> m = CollectiveCostModel::Create(c, plan);
  ASSERT_TRUE(m.ok());
  const double S = 1e7;  // halfway in log: eta 0.75
  ExpectRel(m->Estimate(CollectiveOp::kAllGather, OneHost(4), S).duration_s, 3 * kAlpha0 + 0.75 * S / kB0 / 0.75);
}

TEST(AlphaBeta, ZeroBytesOrOneMemberCostNothing) {
  EXPECT_EQ(Model().Estimate(CollectiveOp::kAllReduce, OneHost(8), 0).duration_s, 0);
  EXPECT_EQ(Model().Estimate(CollectiveOp::kAllReduce, OneHost(1), 1e6).duration_s, 0);
}

TEST(AlphaBeta, PlanErrorsAreNamed) {
  CollectivesPlan plan;
  plan.algo["all_to_all"] = "tree";
  EXPECT_THAT(CollectiveCostModel::Create(TestCluster(), plan).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plan.collectives.algo.all_to_all: \"tree\" is not one of")));
  CollectivesPlan mode;
  mode.cost_mode = "fast";
  EXPECT_THAT(CollectiveCostModel::Create(TestCluster(), mode).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plan.collectives.cost_mode")));
}

TEST(GroupShape, StridedGroups) {
  const Cluster c = TestCluster();  // 8 per host, 256 per zone, 1024 ranks
  absl::StatusOr<GroupShape> inner = StridedGroupShape(c, 0, 1, 8);
  ASSERT_TRUE(inner.ok());
  EXPECT_EQ(inner->members_per_host, 8);
  EXPECT_EQ(inner->hosts, 1);
  absl::StatusOr<GroupShape> outer = StridedGroupShape(c, 3, 8, 128);  // one per host, 4 zones' worth / 2
  ASSERT_TRUE(outer.ok());
  EXPECT_EQ(outer->members_per_host, 1);
  EXPECT_EQ(outer->hosts, 128);
  EXPECT_EQ(outer->members_per_zone, 32);
  EXPECT_EQ(outer->zones, 4);
  absl::StatusOr<GroupShape> pairs = StridedGroupShape(c, 0, 4, 64);  // 2 per host
  ASSERT_TRUE(pairs.ok());
  EXPECT_EQ(pairs->members_per_host, 2);
  EXPECT_EQ(pairs->hosts, 32);
  EXPECT_THAT(StridedGroupShape(c, 0, 16, 65).status(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside")));
}

}  // namespace
}  // namespace gemtb::sim
