// The benchmark cases (gpu/bench/bench_cases.h): names, the length rule and the valid
// pair counts, checked against the formulas written out independently here (and the closed
// forms ../shared/peers/torch_peers.py uses, so that both sides count the same pairs). Runs without
// a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gpu/bench/bench_cases.h"
#include "model/numerics/philox.h"

namespace gemtb::gpu::bench {
namespace {

TEST(BenchCases, TheEightCasesInOrder) {
  std::vector<std::string> names;
  for (const BenchCase& c : SpecCases()) names.push_back(c.name);
  EXPECT_EQ(names, (std::vector<std::string>{"self_softmax", "self_gdpa_silu", "cross_gdpa_gelu",
                                             "cross_softmax", "swa_causal_512", "block64_softmax",
                                             "pma_gdpa_silu", "dense_gdpa_silu"}));
  EXPECT_FALSE(FindCase("no_such_case").ok());
  for (const BenchCase& c : SpecCases()) {
    EXPECT_EQ(c.heads, 4) << c.name;
    EXPECT_EQ(c.head_dim, 128) << c.name;
  }
}

// Lengths: s >= 0.5 draws uniformly from [max(1, floor((2s-1)M)), M], else from [1, floor(2sM)];
// draw b is lo + floor(u (hi - lo + 1)) with u = Philox word b (seed 0, stream 0) / 2^32.
std::vector<int64_t> SpecRule(int64_t batch, int64_t m, double s) {
  const int64_t lo = s >= 0.5 ? std::max<int64_t>(1, static_cast<int64_t>(std::floor((2 * s - 1) * m))) : 1;
  const int64_t hi = s >= 0.5 ? m : static_cast<int64_t>(std::floor(2 * s * m));
  std::vector<int64_t> out;
  for (int64_t b = 0; b < batch; ++b) {
    const uint32_t word = numerics::PhiloxWord(0, 0, static_cast<uint64_t>(b));
    out.push_back(lo + static_cast<int64_t>(std::floor(word / 4294967296.0 * static_cast<double>(hi - lo + 1))));
  }
  return out;
}

TEST(BenchCases, LengthsFollowTheLengthRule) {
  const std::vector<int64_t> self = SpecRule(1152, 1024, 0.5);
  for (int64_t l : self) ASSERT_TRUE(l >= 1 && l <= 1024) << l;
  for (const BenchCase& c : SpecCases()) {
    const CaseLengths l = DrawLengths(c);
    ASSERT_EQ(static_cast<int64_t>(l.q.size()), c.batch) << c.name;
    ASSERT_EQ(l.kv.size(), l.q.size()) << c.name;
    if (c.name == "self_softmax" || c.name == "self_gdpa_silu") {
      EXPECT_EQ(l.q, self) << c.name;
      EXPECT_EQ(l.kv, self) << c.name;
    } else if (c.name == "cross_gdpa_gelu" || c.name == "cross_softmax") {
      EXPECT_EQ(l.q, self) << c.name;
      EXPECT_EQ(l.kv, std::vector<int64_t>(1152, 256)) << c.name;
    } else if (c.name == "pma_gdpa_silu") {
      EXPECT_EQ(l.q, std::vector<int64_t>(1152, 32));
      EXPECT_EQ(l.kv, self) << "PMA reads self_softmax's K/V";
    } else if (c.name == "dense_gdpa_silu") {
      EXPECT_EQ(l.q, std::vector<int64_t>(1152, 1024));
      EXPECT_EQ(l.kv, l.q);
    } else if (c.name == "swa_causal_512") {
      EXPECT_EQ(l.q, SpecRule(32, 8192, 0.75));
      for (int64_t x : l.q) EXPECT_TRUE(x >= 4096 && x <= 8192) << x;
      EXPECT_EQ(l.kv, l.q);
    } else if (c.name == "block64_softmax") {
      EXPECT_EQ(l.q, SpecRule(1152, 4096, 0.7));
      for (int64_t x : l.q) EXPECT_TRUE(x >= 1638 && x <= 4096) << x;
      EXPECT_EQ(l.kv, l.q);
    }
  }
}

// torch_peers.py's pairs_of(): q*k unmasked; sum_i min(i, 512) + 1 for the causal window; full
// 64-blocks squared plus the remainder squared for block(64).
TEST(BenchCases, ValidPairsMatchThePeersClosedForms) {
  for (const BenchCase& c : SpecCases()) {
    const CaseLengths l = DrawLengths(c);
    int64_t want = 0;
    for (size_t b = 0; b < l.q.size(); ++b) {
      const int64_t q = l.q[b], k = l.kv[b];
      if (c.name == "swa_causal_512") {
        for (int64_t i = 0; i < q; ++i) want += std::min<int64_t>(i, 512) + 1;
      } else if (c.name == "block64_softmax") {
        want += (q / 64) * 64 * 64 + (q % 64) * (q % 64);
      } else {
        want += q * k;
      }
    }
    EXPECT_EQ(ValidPairs(c, l), want) << c.name;
  }
}

}  // namespace
}  // namespace gemtb::gpu::bench
