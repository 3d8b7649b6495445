// BatchFlops (model/description/batch_flops.h) against EvaluateGraph: a batch of equal samples costs
// what EvaluateGraph says for it; a batch of different samples costs the sum of its samples' costs,
// with the batch-independent terms counted once; bad sizes and lengths are named.
#include "model/description/batch_flops.h"

#include <cmath>
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

double ModelFlops(const ModelGraph& g, int64_t batch, const std::vector<int64_t>& lengths) {
  const GraphTotals t = EvaluateGraph(g, batch, lengths);
  return t.model.flops_fwd + t.model.flops_bwd;
}

TEST(BatchFlopsTest, EqualSamplesCostWhatEvaluateGraphSays) {
  for (const char* name : {"tiny", "small"}) {
    const ModelGraph g = BuiltinGraph(name);
    const BatchFlops f = BatchFlops::Create(g);
    for (const double sparsity : {0.0, 0.3, 1.0}) {
      const std::vector<int64_t> l = LengthsAtSparsity(g, sparsity);
      const int64_t B = 37;
      std::vector<int32_t> lengths;
      for (int64_t len : l) lengths.insert(lengths.end(), B, static_cast<int32_t>(len));
      absl::StatusOr<double> got = f.Of(lengths, B);
      ASSERT_TRUE(got.ok()) << got.status();
      const double want = ModelFlops(g, B, l);
      EXPECT_NEAR(*got, want, 1e-12 * want) << name << " at sparsity " << sparsity;
    }
  }
}

TEST(BatchFlopsTest, DifferentSamplesAddUpWithTheConstantsOnce) {
  const ModelGraph g = BuiltinGraph("small");
  const BatchFlops f = BatchFlops::Create(g);
  const size_t J = g.sequences.size();
  std::mt19937 rng(5);
  const int64_t B = 9;
  std::vector<int32_t> lengths(J * B);
  double want = -static_cast<double>(B - 1) * ModelFlops(g, 0, std::vector<int64_t>(J, 0));
  std::vector<std::vector<int64_t>> per_sample(B, std::vector<int64_t>(J));
  for (size_t j = 0; j < J; ++j)
    for (int64_t b = 0; b < B; ++b) {
      const int64_t l = static_cast<int64_t>(rng() % static_cast<uint32_t>(g.sequences[j].lmax + 1));
      lengths[j * B + static_cast<size_t>(b)] = static_cast<int32_t>(l);
      per_sample[static_cast<size_t>(b)][j] = l;
    }
  for (const std::vector<int64_t>& l : per_sample) want += ModelFlops(g, 1, l);
  absl::StatusOr<double> got = f.Of(lengths, B);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_NEAR(*got, want, 1e-12 * want);
}

TEST(BatchFlopsTest, BadSizesAndLengthsAreNamed) {
  const ModelGraph g = BuiltinGraph("tiny");
  const BatchFlops f = BatchFlops::Create(g);
  const size_t J = g.sequences.size();
  std::vector<int32_t> lengths(J * 2, 0);
  EXPECT_NE(f.Of(lengths, 3).status().message().find("lengths: "), std::string::npos);
  lengths[1] = -1;
  EXPECT_NE(f.Of(lengths, 2).status().message().find("lengths[0 * batch + 1]: -1"), std::string::npos);
  lengths[1] = static_cast<int32_t>(g.sequences[0].lmax + 1);
  EXPECT_FALSE(f.Of(lengths, 2).ok());
}

}  // namespace
}  // namespace gemtb::model
