// The GPU embedding kernels against the oracle on the device: bit-identical forward outputs,
// tables and optimizer state; identical bytes from two backward runs; malformed KJTs rejected with
// the oracle's named error before any launch. Skipped without an sm_90 GPU, except the host-side
// checks of CanRun.
#include <string>
#include <vector>

#include "gpu/embedding/api.h"
#include "gpu/embedding/launch.h"
#include "gtest/gtest.h"
#include "tools/check/embed_cases.h"
#include "tools/check/embed_compare.h"
#include "tools/check/embed_gpu.h"

namespace gemtb::gpu::embedding {
namespace {

TEST(EmbeddingDevice, ForwardAndStepBitIdenticalToTheOracle) {
  if (absl::Status s = EmbeddingDeviceAvailable(); !s.ok()) GTEST_SKIP() << s.message();
  const std::vector<check::EmbedFamily> families = check::AllEmbedFamilies();
  for (size_t fi = 0; fi < families.size(); ++fi) {
    const check::EmbedCase c = check::DrawEmbedCase(check::EmbedCaseSeed(21, fi, 0), families[fi]);
    const check::EmbedDiff d = check::CompareEmbedRuns(check::RunEmbedOracle(c), check::RunEmbedGpu(c));
    EXPECT_TRUE(d.Identical()) << c.description << ": " << (d.messages.empty() ? "" : d.messages[0]);
  }
}

// Cases with a row of >= kHotRun occurrences (summed by a block, not a warp), one per family.
TEST(EmbeddingDevice, HotRowsBitIdenticalToTheOracle) {
  if (absl::Status s = EmbeddingDeviceAvailable(); !s.ok()) GTEST_SKIP() << s.message();
  const std::vector<check::EmbedFamily> families = check::AllEmbedFamilies();
  int hot = 0;
  for (size_t fi = 0; fi < families.size(); ++fi) {
    for (int64_t i = 0; i < 100; ++i) {
      const check::EmbedCase c = check::DrawEmbedCase(check::EmbedCaseSeed(24, fi, i), families[fi]);
      if (check::LongestRowRun(c) < kHotRun) continue;
      ++hot;
      const check::EmbedDiff d = check::CompareEmbedRuns(check::RunEmbedOracle(c), check::RunEmbedGpu(c));
      EXPECT_TRUE(d.Identical()) << c.description << ": " << (d.messages.empty() ? "" : d.messages[0]);
      break;
    }
  }
  EXPECT_GT(hot, 250);
}

TEST(EmbeddingDevice, TwoBackwardRunsGiveIdenticalBytes) {
  if (absl::Status s = EmbeddingDeviceAvailable(); !s.ok()) GTEST_SKIP() << s.message();
  check::EmbedFamily family;
  family.pooling = Pooling::kMean;
  family.optimizer = OptimizerKind::kRowwiseAdagrad;
  family.dtype = ElementType::kBFloat16;
  for (int64_t i = 0; i < 20; ++i) {
    const check::EmbedCase c = check::DrawEmbedCase(check::EmbedCaseSeed(22, 0, i), family);
    const check::EmbedDiff d = check::CompareEmbedRuns(check::RunEmbedGpu(c), check::RunEmbedGpu(c));
    EXPECT_TRUE(d.Identical()) << c.description;
  }
}

TEST(EmbeddingDevice, MalformedKjtFailsWithTheOraclesErrorBeforeAnyLaunch) {
  if (absl::Status s = EmbeddingDeviceAvailable(); !s.ok()) GTEST_SKIP() << s.message();
  int errors = 0;
  for (int64_t i = 0; i < 200; ++i) {
    const check::EmbedCase c = check::DrawMalformedEmbedCase(check::EmbedCaseSeed(23, 0, i));
    const check::EmbedRun want = check::RunEmbedOracle(c);
    const check::EmbedRun got = check::RunEmbedGpu(c);
    EXPECT_EQ(got.error, want.error) << c.description;
    if (!want.error.empty()) {
      ++errors;
      EXPECT_TRUE(got.pooled.empty() && got.table_bytes.empty()) << "outputs after an input error: " << c.description;
    }
  }
  EXPECT_GT(errors, 150);
}

TEST(EmbeddingCanRun, RejectsWhatTheKernelsDoNotTake) {
  EmbeddingConfig config;
  config.tables.push_back({});
  config.tables[0].name = "wide";
  config.tables[0].rows = 10;
  config.tables[0].dim = kMaxDim + 4;
  config.features.push_back({"f", 0, Pooling::kSum, 8});
  absl::Status s = CanRun(config);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tables[0] 'wide': dim=1028"), std::string::npos) << s;
  config.tables[0].dim = 6;
  EXPECT_NE(CanRun(config).message().find("dim=6"), std::string::npos);
  config.tables[0].dim = 8;
  EXPECT_TRUE(CanRun(config).ok());
  config.features[0].table = 3;
  EXPECT_NE(CanRun(config).message().find("features[0] 'f': table=3"), std::string::npos);
}

}  // namespace
}  // namespace gemtb::gpu::embedding
