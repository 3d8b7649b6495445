// The GPU embedding's host bookkeeping of tables (gpu/embedding/host_tables.h) on the CPU: a prior
// state uploaded and downloaded again compares identical to itself under the check's own state
// comparison (weights, Adagrad, Adam m and v, Adam's bias products of every table), and one step's
// bookkeeping leaves every table's bias products as the oracle's backward step does.
#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/embedding/host_tables.h"
#include "gtest/gtest.h"
#include "reference/embedding/tbe.h"
#include "tools/check/embed_cases.h"
#include "tools/check/embed_compare.h"

namespace gemtb::gpu::embedding {
namespace {

constexpr int kCasesPerFamily = 3;

HostTable HostTableFrom(const reference::TableState& ts) {
  return {ts.weights, ts.adagrad, ts.adam_m, ts.adam_v, ts.adam_step};
}

// What Create keeps on the device and DownloadTables brings back, the device arrays replaced by the
// host vectors they would hold.
reference::EmbeddingState RoundTrip(const check::EmbedCase& c) {
  reference::EmbeddingState out = c.state;
  int64_t row_offset = 0;
  for (size_t t = 0; t < c.config.tables.size(); ++t) {
    const TableConfig& tc = c.config.tables[t];
    const HostTable prior = HostTableFrom(c.state.tables[t]);
    absl::StatusOr<TableParams> p = TableParamsOf(tc, static_cast<int>(t), row_offset, &prior);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return out;
    row_offset += tc.rows;
    HostTable back = HostTableOf(*p, ToStorage(prior.weights, tc.dtype), KeepsAdagrad(tc) ? prior.adagrad : std::vector<float>{},
                                 KeepsAdam(tc) ? prior.adam_m : std::vector<float>{},
                                 KeepsAdam(tc) ? prior.adam_v : std::vector<float>{});
    reference::TableState& ts = out.tables[t];
    ts.weights = back.weights;
    ts.adagrad = back.adagrad;
    ts.adam_m = back.adam_m;
    ts.adam_v = back.adam_v;
    ts.adam_step = back.adam_step;
  }
  return out;
}

TEST(EmbeddingHostTables, UploadThenDownloadKeepsEveryStateByte) {
  const std::vector<check::EmbedFamily> families = check::AllEmbedFamilies();
  int64_t nonzero_step_non_adam = 0;
  for (size_t fi = 0; fi < families.size(); ++fi) {
    for (int64_t i = 0; i < kCasesPerFamily; ++i) {
      const check::EmbedCase c = check::DrawEmbedCase(check::EmbedCaseSeed(31, fi, i), families[fi]);
      if (c.state.step > 0 && families[fi].optimizer != OptimizerKind::kAdam) ++nonzero_step_non_adam;
      const reference::EmbeddingOutput none;
      const check::EmbedDiff d = check::CompareEmbedRuns(check::EmbedRunOf(c.config, none, c.state),
                                                         check::EmbedRunOf(c.config, none, RoundTrip(c)));
      EXPECT_TRUE(d.Identical()) << c.description << ": " << (d.messages.empty() ? "" : d.messages[0]);
    }
  }
  // The cases reach non-Adam tables whose prior bias products are not the initial ones.
  EXPECT_GT(nonzero_step_non_adam, 100);
}

TEST(EmbeddingHostTables, StepBookkeepingMatchesTheOraclesBackwardStep) {
  const std::vector<check::EmbedFamily> families = check::AllEmbedFamilies();
  int64_t stepped = 0;
  for (size_t fi = 0; fi < families.size(); ++fi) {
    for (int64_t i = 0; i < kCasesPerFamily; ++i) {
      const check::EmbedCase c = check::DrawEmbedCase(check::EmbedCaseSeed(32, fi, i), families[fi]);
      reference::EmbeddingState want = c.state;
      if (!reference::EmbeddingBackwardStep(c.config, want, c.kjt, c.grads, {}, 1).ok()) continue;
      ++stepped;
      std::vector<TableParams> tables;
      int64_t row_offset = 0;
      for (size_t t = 0; t < c.config.tables.size(); ++t) {
        const HostTable prior = HostTableFrom(c.state.tables[t]);
        absl::StatusOr<TableParams> p = TableParamsOf(c.config.tables[t], static_cast<int>(t), row_offset, &prior);
        ASSERT_TRUE(p.ok()) << p.status();
        row_offset += c.config.tables[t].rows;
        tables.push_back(*p);
      }
      EXPECT_EQ(AdvanceAdamSteps(c.config, tables), families[fi].optimizer == OptimizerKind::kAdam);
      for (size_t t = 0; t < tables.size(); ++t) {
        EXPECT_EQ(std::bit_cast<uint32_t>(tables[t].adam_step.b1), std::bit_cast<uint32_t>(want.tables[t].adam_step.b1))
            << c.description << " table " << t;
        EXPECT_EQ(std::bit_cast<uint32_t>(tables[t].adam_step.b2), std::bit_cast<uint32_t>(want.tables[t].adam_step.b2))
            << c.description << " table " << t;
      }
    }
  }
  EXPECT_GT(stepped, 500);
}

TEST(EmbeddingHostTables, PriorStateOfTheWrongSizeIsNamed) {
  TableConfig c;
  c.name = "t0";
  c.rows = 3;
  c.dim = 4;
  c.optimizer.kind = OptimizerKind::kRowwiseAdagrad;
  HostTable h;
  h.weights.assign(12, 0.0f);
  h.adagrad.assign(2, 0.0f);
  absl::StatusOr<TableParams> p = TableParamsOf(c, 0, 0, &h);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("table 't0': 2 Adagrad states, expected rows=3"), std::string::npos) << p.status();
  h.weights.resize(11);
  EXPECT_NE(TableParamsOf(c, 0, 0, &h).status().message().find("11 weights, expected rows*dim=12"), std::string::npos);
}

}  // namespace
}  // namespace gemtb::gpu::embedding
