// Mode nccl: NCCL's latency/bandwidth tables and its (algorithm, protocol) choice on
// 1, 2 and 16 hosts of 8 H200s, against values derived by hand from NVIDIA/nccl src/graph/tuning.cc
// @5067397c (Hopper rows, Intel hosts, NVLS off, 16 channels of 370/16 GB/s: the tier default).
//
// Derivation (per-channel bwIntra = 23.125, nCh = 16 so nCh·bw = 370; times t = lat + S/(1000·bw) µs):
//  1 host, p = 8, all-reduce (nsteps 14, llMaxBw Hopper-N1 141):
//   Ring  LL    bus min(141, 370·.5) = 141      -> algbw ·8/14 = 80.571   lat 6.6 + 14·0.6 = 15.0
//   Ring  LL128 bus min(370·.92, 16·36.7) = 340.4 -> 194.514               lat 14 + 14·1.9 = 40.6
//   Ring  Simple bus 370                          -> 211.429               lat 8.4 + 14·3.4 = 56.0
//   Tree  (AR ·.92, cap 16·38.7): LL 340.4/3.8 = 89.58 -> ·.5 44.79, lat 6.8 + 2·7·0.6 = 15.2;
//         LL128 340.4·7/9 = 264.76 -> 132.38, lat 14 + 2·7·1.25 = 31.5; Simple 170.2, lat 8.4 + 2·7·4 = 64.4
//   => 1 KiB Ring/LL (15.013 < Tree/LL 15.2 + 1024/(1000·44.79·.9)); 1 MiB Ring/LL (28.0); 16 MiB Ring/LL128
//      (126.85 < Simple 135.35); LL128 -> Simple crossover at 15.4/(1/194514 − 1/211429) ≈ 37.4 MB, so
//      32 MiB Ring/LL128 and 64 MiB Ring/Simple (373.4 < 385.6).
//  2 hosts × 8 (p = 16, nsteps 30, nInter 2, llMaxBw Intel-N2 39, netOverhead 1 µs, ×3 Simple):
//   Ring LL 39 -> ·16/30 = 20.8, lat 6.6 + 28·max(0.6,1) + 2·2.7 = 40.0; LL128 340.4 -> 181.547,
//   lat 14 + 28·1.9 + 2·4 = 75.2; Simple 370 -> 197.333, lat 8.4 + 28·3.4 + 2·14 = 131.6 (×1.4 plateau
//   once S/(16·16) >= 64 B: 184.24). Tree: LL min(89.58, 39)·.5 = 19.5, lat 6.8 + 2(7·0.6 + 1·5.0) = 25.2;
//   LL128 min(340.4·120/128, 587.2) = 319.125 -> 159.5625, lat 14 + 2(7·1.25 + 8.5) = 48.5;
//   Simple 170.2, lat 8.4 + 2(7·4 + 14) = 92.4.
//   => 1 KiB Tree/LL; 64 MiB Ring/LL128 (444.85 < Tree/LL128 48.5 + S/(1000·159.5625·.9) = 515.8);
//      1 GiB Ring/Simple (5625.5 < Ring/LL128 5989.6).
//  16 hosts × 8 (p = 128, nsteps 254, nInter 30, llMaxBw Intel-N4 20.4, bwInter = min(23.125, 8·48.5/16)):
//   Ring LL 20.4 -> 10.280, lat 6.6 + 224 + 81 = 311.6; LL128 -> 171.547, lat 14 + 224·1.9 + 30·4 = 559.6;
//   Simple -> 186.457, lat (8.4 + 224·3.4 + 30·14)·1.4 = 1666.0.
//   Tree (cap 16·36 = 576): LL 10.2, lat 6.8 + 2(7·.6 + 4·5) = 55.2; LL128 min(319.125, 16·29) -> 159.5625,
//   lat 14 + 2(7·1.25 + 4·8.5) = 99.5; Simple 170.2, lat 8.4 + 2(7·4 + 4·14) = 176.4.
//   => 1 KiB Tree/LL; 64 MiB Tree/LL128 (566.8); 1 GiB Tree/Simple (6485.1 < Ring/LL128 6818.8).
#include "sim/network/nccl_tuning.h"

#include "gtest/gtest.h"
#include "sim/network/collective_cost.h"

namespace gemtb::sim {
namespace {

using nccl::Algo;
using nccl::Proto;

constexpr double KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;

nccl::CommParams Comm(int hosts) {
  nccl::CommParams c;
  c.nranks = 8 * hosts;
  c.nnodes = hosts;
  c.nchannels = 16;
  c.bw_intra_GBps = 370.0 / 16;
  c.bw_inter_GBps = std::min(370.0 / 16, 8 * 48.5 / 16);
  return c;
}

struct Expect {
  double bytes;
  Algo algo;
  Proto proto;
  double time_us;
};

void CheckChoices(CollectiveOp op, int hosts, std::initializer_list<Expect> cases) {
  const nccl::CommParams comm = Comm(hosts);
  const nccl::Tables t = nccl::TuneModel(op, comm);
  for (const Expect& e : cases) {
    const nccl::Choice c = nccl::Choose(t, op, comm, e.bytes);
    EXPECT_EQ(c.algo, e.algo) << hosts << " hosts, " << e.bytes << " B";
    EXPECT_EQ(c.proto, e.proto) << hosts << " hosts, " << e.bytes << " B";
    EXPECT_NEAR(c.time_us, e.time_us, 0.1) << hosts << " hosts, " << e.bytes << " B";
  }
}

TEST(NcclTuning, OneHostAllReduceTable) {
  const nccl::Tables t = nccl::TuneModel(CollectiveOp::kAllReduce, Comm(1));
  EXPECT_NEAR(t.lat_us[nccl::kRing][nccl::kLL], 15.0, 1e-9);
  EXPECT_NEAR(t.lat_us[nccl::kRing][nccl::kLL128], 40.6, 1e-9);
  EXPECT_NEAR(t.lat_us[nccl::kRing][nccl::kSimple], 56.0, 1e-9);
  EXPECT_NEAR(t.bw_GBps[nccl::kRing][nccl::kLL], 141.0 * 8 / 14, 1e-9);
  EXPECT_NEAR(t.bw_GBps[nccl::kRing][nccl::kSimple], 370.0 * 8 / 14, 1e-9);
  EXPECT_NEAR(t.lat_us[nccl::kTree][nccl::kLL128], 31.5, 1e-9);
  EXPECT_NEAR(t.bw_GBps[nccl::kTree][nccl::kLL128], 370 * .92 * 7 / 9 * .5, 1e-9);
  EXPECT_EQ(t.bw_GBps[nccl::kNvls][nccl::kSimple], 0);  // NVLS off
  EXPECT_EQ(t.bw_GBps[nccl::kPat][nccl::kSimple], 0);   // PAT: AG/RS only
}

TEST(NcclTuning, OneHostAllReduceChoice) {
  CheckChoices(CollectiveOp::kAllReduce, 1,
               {{KiB, nccl::kRing, nccl::kLL, 15.0 + KiB / 80571.43},
                {MiB, nccl::kRing, nccl::kLL, 15.0 + MiB / 80571.43},
                {16 * MiB, nccl::kRing, nccl::kLL128, 40.6 + 16 * MiB / 194514.3},
                {32 * MiB, nccl::kRing, nccl::kLL128, 40.6 + 32 * MiB / 194514.3},
                {64 * MiB, nccl::kRing, nccl::kSimple, 56.0 + 64 * MiB / 211428.6},
                {4 * GiB, nccl::kRing, nccl::kSimple, 56.0 + 4 * GiB / 211428.6}});
}

TEST(NcclTuning, TwoHostAllReduceChoice) {
  CheckChoices(CollectiveOp::kAllReduce, 2,
               {{KiB, nccl::kTree, nccl::kLL, 25.2 + KiB / (19500 * 0.9)},
                {64 * MiB, nccl::kRing, nccl::kLL128, 75.2 + 64 * MiB / 181546.7},
                {GiB, nccl::kRing, nccl::kSimple, 184.24 + GiB / 197333.3}});
}

TEST(NcclTuning, SixteenHostAllReduceChoice) {
  CheckChoices(CollectiveOp::kAllReduce, 16,
               {{KiB, nccl::kTree, nccl::kLL, 55.2 + KiB / (10200 * 0.9)},
                {64 * MiB, nccl::kTree, nccl::kLL128, 99.5 + 64 * MiB / (159562.5 * 0.9)},
                {GiB, nccl::kTree, nccl::kSimple, 176.4 + GiB / 170200}});
}

TEST(NcclTuning, OneHostAllGatherIsRingOnly) {
  // nsteps 7: LL 141·8/7, lat 6.6 + 7·0.6 = 10.8; Simple 370·8/7, lat 8.4 + 7·3.4 = 32.2.
  CheckChoices(CollectiveOp::kAllGather, 1,
               {{KiB, nccl::kRing, nccl::kLL, 10.8 + KiB / (141000.0 * 8 / 7)},
                {GiB, nccl::kRing, nccl::kSimple, 32.2 + GiB / (370000.0 * 8 / 7)}});
}

TEST(NcclTuning, CostModelModeNccl) {
  Cluster c;
  c.world_size = 8;
  c.gpus_per_host = 8;
  c.tiers = {{"nvlink", 450e9, 370e9, 1.87e-6, 1}};
  CollectivesPlan plan;
  plan.cost_mode = "nccl";
  absl::StatusOr<CollectiveCostModel> m = CollectiveCostModel::Create(c, plan);
  ASSERT_TRUE(m.ok()) << m.status();
  const CollectiveCost cost = m->Estimate(CollectiveOp::kAllReduce, {8, 8, 1, 8, 1}, 64 * MiB);
  EXPECT_EQ(AlgoLabel(cost.algo, cost.proto), "ring/Simple");
  EXPECT_NEAR(cost.duration_s * 1e6, 56.0 + 64 * MiB / 211428.6, 0.1);
  // Pinned to tree: Tree's best protocol at this size (Simple, with the 0.8 size correction at 2^20·64 B).
  plan.algo["all_reduce"] = "tree";
  absl::StatusOr<CollectiveCostModel> tree = CollectiveCostModel::Create(c, plan);
  ASSERT_TRUE(tree.ok());
  const CollectiveCost tc = tree->Estimate(CollectiveOp::kAllReduce, {8, 8, 1, 8, 1}, 64 * MiB);
  EXPECT_EQ(tc.algo, CollAlgo::kTree);
}

}  // namespace
}  // namespace gemtb::sim
