// RegionCosts (model/description/region_costs.h) against EvaluateOp: a batch of different samples
// costs, region by region and pass by pass, the sum of its samples' op costs with the
// batch-independent terms counted once; the regions add up to EvaluateGraph's totals; bad sizes and
// lengths are named.
#include "model/description/region_costs.h"

#include <map>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/description/graph_costs.h"
#include "model/description/model_config.h"
#include "tests/testing/builtin_graph.h"

namespace gemtb::model {
namespace {

using gemtb::testing::BuiltinGraph;

TEST(RegionCostsTest, RegionsOfDifferentSamplesAreTheSumOfTheirOps) {
  const ModelGraph g = BuiltinGraph("small");
  const RegionCosts costs = RegionCosts::Create(g);
  const size_t J = g.sequences.size();
  std::mt19937 rng(11);
  const int64_t B = 7;
  std::vector<int32_t> lengths(J * B);
  std::vector<std::vector<int64_t>> per_sample(B, std::vector<int64_t>(J));
  for (size_t j = 0; j < J; ++j)
    for (int64_t b = 0; b < B; ++b) {
      const int64_t l = static_cast<int64_t>(rng() % static_cast<uint32_t>(g.sequences[j].lmax + 1));
      lengths[j * B + static_cast<size_t>(b)] = static_cast<int32_t>(l);
      per_sample[static_cast<size_t>(b)][j] = l;
    }
  // The expectation, op by op and sample by sample: each sample's cost less the constant terms, which
  // count once.
  struct Want {
    double flops_fwd = 0, flops_bwd = 0, model_fwd = 0, model_bwd = 0, bytes_fwd = 0, bytes_bwd = 0;
  };
  std::map<std::string, Want> want;
  const std::vector<int64_t> none(J, 0);
  for (const Op& op : g.ops) {
    Want& w = want[op.region];
    const OpCost c0 = EvaluateOp(g, op, 0, none);
    OpCost sum;
    for (const std::vector<int64_t>& l : per_sample) {
      const OpCost c = EvaluateOp(g, op, 1, l);
      sum.flops_fwd += c.flops_fwd - c0.flops_fwd;
      sum.flops_bwd += c.flops_bwd - c0.flops_bwd;
      sum.bytes_fwd += c.bytes_fwd - c0.bytes_fwd;
      sum.bytes_bwd += c.bytes_bwd - c0.bytes_bwd;
    }
    sum.flops_fwd += c0.flops_fwd;
    sum.flops_bwd += c0.flops_bwd;
    sum.bytes_fwd += c0.bytes_fwd;
    sum.bytes_bwd += c0.bytes_bwd;
    w.flops_fwd += sum.flops_fwd;
    w.flops_bwd += sum.flops_bwd;
    w.bytes_fwd += sum.bytes_fwd;
    w.bytes_bwd += sum.bytes_bwd;
    if (op.local_mfu) {
      w.model_fwd += sum.flops_fwd;
      w.model_bwd += sum.flops_bwd;
    }
  }
  absl::StatusOr<std::vector<RegionCost>> got = costs.Of(lengths, B);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), want.size());
  ASSERT_EQ(got->size(), costs.regions().size());
  for (size_t r = 0; r < got->size(); ++r) {
    const RegionCost& rc = (*got)[r];
    EXPECT_EQ(rc.region, costs.regions()[r]);
    ASSERT_TRUE(want.count(rc.region)) << rc.region;
    const Want& w = want[rc.region];
    auto near = [&](double a, double b, const char* what) { EXPECT_NEAR(a, b, 1e-12 * std::max(1.0, b)) << rc.region << " " << what; };
    near(rc.fwd.flops, w.flops_fwd, "flops fwd");
    near(rc.bwd.flops, w.flops_bwd, "flops bwd");
    near(rc.fwd.model_flops, w.model_fwd, "model flops fwd");
    near(rc.bwd.model_flops, w.model_bwd, "model flops bwd");
    near(rc.fwd.bytes, w.bytes_fwd, "bytes fwd");
    near(rc.bwd.bytes, w.bytes_bwd, "bytes bwd");
  }
  EXPECT_EQ(costs.regions().front(), g.ops.front().region);
}

TEST(RegionCostsTest, EqualSamplesAddUpToEvaluateGraph) {
  const ModelGraph g = BuiltinGraph("tiny");
  const RegionCosts costs = RegionCosts::Create(g);
  const std::vector<int64_t> l = LengthsAtSparsity(g, 0.4);
  const int64_t B = 13;
  std::vector<int32_t> lengths;
  for (int64_t len : l) lengths.insert(lengths.end(), B, static_cast<int32_t>(len));
  absl::StatusOr<std::vector<RegionCost>> got = costs.Of(lengths, B);
  ASSERT_TRUE(got.ok()) << got.status();
  PassCost fwd, bwd;
  for (const RegionCost& rc : *got) {
    fwd += rc.fwd;
    bwd += rc.bwd;
  }
  const GraphTotals t = EvaluateGraph(g, B, l);
  EXPECT_NEAR(fwd.flops, t.all.flops_fwd, 1e-12 * t.all.flops_fwd);
  EXPECT_NEAR(bwd.flops, t.all.flops_bwd, 1e-12 * t.all.flops_bwd);
  EXPECT_NEAR(fwd.model_flops, t.model.flops_fwd, 1e-12 * t.model.flops_fwd);
  EXPECT_NEAR(bwd.bytes, t.all.bytes_bwd, 1e-12 * t.all.bytes_bwd);
}

TEST(RegionCostsTest, BadSizesAndLengthsAreNamed) {
  const ModelGraph g = BuiltinGraph("tiny");
  const RegionCosts costs = RegionCosts::Create(g);
  const size_t J = g.sequences.size();
  std::vector<int32_t> lengths(J * 2, 0);
  EXPECT_NE(costs.Of(lengths, 3).status().message().find("lengths: "), std::string::npos);
  lengths[1] = -1;
  EXPECT_NE(costs.Of(lengths, 2).status().message().find("lengths[0 * batch + 1]: -1"), std::string::npos);
  lengths[1] = static_cast<int32_t>(g.sequences[0].lmax + 1);
  EXPECT_FALSE(costs.Of(lengths, 2).ok());
}

}  // namespace
}  // namespace gemtb::model
