// The GPU embedding kernels against the oracle on the device: bit-identical forward outputs,
// tables and optimizer state; identical bytes from two backward runs; malformed KJTs rejected with
// the oracle's named error before any launch. Skipped without an sm_90 GPU, except the host-side
// checks of CanRun.
#include <algorithm>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gpu/common/device_buffer.h"
#include "gpu/embedding/api.h"
#include "gpu/embedding/launch.h"
#include "gtest/gtest.h"
#include "model/common/status_macros.h"
#include "tools/check/embed_cases.h"
#include "tools/check/embed_compare.h"
#include "tools/check/embed_gpu.h"
#include "tools/check/kjt_view.h"

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
      // The hot-row kernel's batch blocks (a holder's sources) and its split update.
      if (c.kjt.stride % 2 == 0) {
        reference::SumPartition partition;
        partition.batch_blocks.assign(2, c.kjt.stride / 2);
        check::EmbedGpuOptions options;
        options.batch_block = c.kjt.stride / 2;
        options.split_update = fi % 2 == 0;
        const check::EmbedDiff db = check::CompareEmbedRuns(check::RunEmbedOracle(c, partition), check::RunEmbedGpu(c, options));
        EXPECT_TRUE(db.Identical()) << c.description << ", two blocks: " << (db.messages.empty() ? "" : db.messages[0]);
      }
      break;
    }
  }
  EXPECT_GT(hot, 250);
}

// A sharded holder's options: G_r summed in blocks of samples equals the oracle under the same
// partition; the split update with a table's own square sums equals the one-pass update.
TEST(EmbeddingDevice, BatchBlocksAndTheSplitUpdateBitIdenticalToTheOracle) {
  if (absl::Status s = EmbeddingDeviceAvailable(); !s.ok()) GTEST_SKIP() << s.message();
  const std::vector<check::EmbedFamily> families = check::AllEmbedFamilies();
  int blocked = 0;
  for (size_t fi = 0; fi < families.size(); ++fi) {
    for (int64_t i = 0; i < 2; ++i) {
      const check::EmbedCase c = check::DrawEmbedCase(check::EmbedCaseSeed(31, fi, i), families[fi]);
      const int64_t batch = c.kjt.stride;
      for (int64_t block : {int64_t{1}, int64_t{2}, int64_t{3}}) {
        if (batch % block != 0 || batch / block < 2) continue;
        reference::SumPartition partition;
        partition.batch_blocks.assign(static_cast<size_t>(batch / block), block);
        check::EmbedGpuOptions options;
        options.batch_block = block;
        const check::EmbedDiff d = check::CompareEmbedRuns(check::RunEmbedOracle(c, partition), check::RunEmbedGpu(c, options));
        EXPECT_TRUE(d.Identical()) << c.description << ", blocks of " << block << ": " << (d.messages.empty() ? "" : d.messages[0]);
        ++blocked;
      }
      check::EmbedGpuOptions split;
      split.split_update = true;
      const check::EmbedDiff d = check::CompareEmbedRuns(check::RunEmbedOracle(c), check::RunEmbedGpu(c, split));
      EXPECT_TRUE(d.Identical()) << c.description << ", split update: " << (d.messages.empty() ? "" : d.messages[0]);
    }
  }
  EXPECT_GT(blocked, 10);
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

// A KJT checked by CheckInput (as a trainer checks the next batch on its data thread) uploads to the
// forward outputs of SetInput's own check, and is refused for another KJT's arrays or another module.
TEST(EmbeddingDevice, CheckedInputGivesTheSameOutputsAndOnlyForItsOwnKjt) {
  if (absl::Status s = EmbeddingDeviceAvailable(); !s.ok()) GTEST_SKIP() << s.message();
  const check::EmbedCase c = check::DrawEmbedCase(check::EmbedCaseSeed(29, 0, 0), check::AllEmbedFamilies()[0]);
  absl::StatusOr<std::unique_ptr<DeviceTbe>> a = DeviceTbe::Create(c.config, {}, 0);
  absl::StatusOr<std::unique_ptr<DeviceTbe>> b = DeviceTbe::Create(c.config, {}, 0);
  ASSERT_TRUE(a.ok() && b.ok());
  const KjtView kjt = check::KjtViewOf(c.kjt);
  ASSERT_TRUE((*a)->SetInput(kjt).ok());
  ASSERT_TRUE((*a)->Forward().ok());
  absl::StatusOr<HostOutput> want = (*a)->DownloadOutput();
  ASSERT_TRUE(want.ok()) << want.status();

  absl::StatusOr<CheckedKjt> checked = (*b)->CheckInput(kjt);
  ASSERT_TRUE(checked.ok()) << checked.status();
  // Another module's check, and the same values in other memory, are refused by name.
  absl::Status other_module = (*a)->SetInput(kjt, *checked);
  EXPECT_EQ(other_module.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(other_module.message().find("checked KJT"), std::string::npos) << other_module;
  const std::vector<int64_t> values_copy(kjt.values.begin(), kjt.values.end());
  KjtView moved = kjt;
  moved.values = values_copy;
  EXPECT_EQ((*b)->SetInput(moved, *checked).code(), absl::StatusCode::kInvalidArgument);

  ASSERT_TRUE((*b)->SetInput(kjt, *checked).ok());
  ASSERT_TRUE((*b)->Forward().ok());
  absl::StatusOr<HostOutput> got = (*b)->DownloadOutput();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->pooled, want->pooled);
  EXPECT_EQ(got->sequence, want->sequence);
}

// CheckInput stages a KJT's values in one of two page-locked buffers in turn, and SetInput uploads
// them from there asynchronously. A check whose buffer a later check has refilled, or one used a
// second time, must upload its own KJT's values (from the KJT's arrays), not the buffer's.
TEST(EmbeddingDevice, StagedValuesUploadOnlyForTheirOwnCheck) {
  if (absl::Status s = EmbeddingDeviceAvailable(); !s.ok()) GTEST_SKIP() << s.message();
  const check::EmbedCase c = check::DrawEmbedCase(check::EmbedCaseSeed(29, 0, 0), check::AllEmbedFamilies()[0]);
  const KjtView kjt = check::KjtViewOf(c.kjt);
  // A second KJT: every bag's ids rotated by one (the same ids and lengths, other outputs).
  std::vector<int64_t> rotated(kjt.values.begin(), kjt.values.end());
  int64_t at = 0;
  for (const int32_t n : kjt.lengths) {
    if (n > 1) std::rotate(rotated.begin() + at, rotated.begin() + at + 1, rotated.begin() + at + n);
    at += n;
  }
  KjtView other = kjt;
  other.values = rotated;
  absl::StatusOr<std::unique_ptr<DeviceTbe>> a = DeviceTbe::Create(c.config, {}, 0);
  absl::StatusOr<std::unique_ptr<DeviceTbe>> b = DeviceTbe::Create(c.config, {}, 0);
  ASSERT_TRUE(a.ok() && b.ok());
  const auto outputs = [](DeviceTbe& tbe, const KjtView& k, const CheckedKjt* checked) -> absl::StatusOr<HostOutput> {
    GEMTB_RETURN_IF_ERROR(checked != nullptr ? tbe.SetInput(k, *checked) : tbe.SetInput(k));
    GEMTB_RETURN_IF_ERROR(tbe.Forward());
    return tbe.DownloadOutput();
  };
  absl::StatusOr<HostOutput> want = outputs(**a, kjt, nullptr), want_other = outputs(**a, other, nullptr);
  ASSERT_TRUE(want.ok() && want_other.ok());
  ASSERT_TRUE(want->pooled != want_other->pooled || want->sequence != want_other->sequence)
      << "the rotated KJT must give other outputs for this test to tell them apart";

  absl::StatusOr<CheckedKjt> first = (*b)->CheckInput(kjt), second = (*b)->CheckInput(other),
                             third = (*b)->CheckInput(other);  // refills `first`'s buffer
  ASSERT_TRUE(first.ok() && second.ok() && third.ok());
  for (const auto& [k, checked, expected, what] :
       {std::tuple{kjt, &*first, &*want, "a check whose buffer was refilled"},
        std::tuple{other, &*third, &*want_other, "the latest check"},
        std::tuple{other, &*third, &*want_other, "the latest check a second time"},
        std::tuple{other, &*second, &*want_other, "the check before it"}}) {
    absl::StatusOr<HostOutput> got = outputs(**b, k, checked);
    ASSERT_TRUE(got.ok()) << what << ": " << got.status();
    EXPECT_EQ(got->pooled, expected->pooled) << what;
    EXPECT_EQ(got->sequence, expected->sequence) << what;
  }
}

// The pooling kernels index rows in 32 bits unless a table has 2^31 rows or more
// (kForwardWideRows). Such a table does not fit a test, so the flag is set on small ones: the
// 64-bit kernels must write the 32-bit ones' bytes (which the tests above hold to the oracle) on
// every storage type, pooling, D = 128 and not, and bags of 0 to 80 ids with invalid ones.
TEST(EmbeddingDevice, WideRowKernelsWriteTheNarrowOnesBytes) {
  if (absl::Status s = EmbeddingDeviceAvailable(); !s.ok()) GTEST_SKIP() << s.message();
  struct Table {
    ElementType dtype;
    int64_t rows, dim;
  };
  const Table kTables[] = {{ElementType::kFloat32, 1000, 128}, {ElementType::kFloat32, 300, 20},
                           {ElementType::kBFloat16, 700, 128}, {ElementType::kFloat16, 500, 36}};
  const Pooling kPoolings[] = {Pooling::kSum, Pooling::kMean, Pooling::kWeightedSum};
  constexpr int64_t kBatch = 97;
  std::mt19937_64 rng(31);
  std::deque<DeviceArray<uint32_t>> weights;
  std::vector<TableParams> tables;
  for (const Table& tt : kTables) {
    const size_t words = static_cast<size_t>(tt.rows * tt.dim / (tt.dtype == ElementType::kFloat32 ? 1 : 2));
    std::vector<uint32_t> host(words);
    for (uint32_t& w : host) w = static_cast<uint32_t>(rng()) & 0xBFFFBFFFu;  // finite: exponents below the top
    ASSERT_TRUE(weights.emplace_back().Upload(host, "table").ok());
    TableParams t;
    t.weights = weights.back().get();
    t.rows = tt.rows;
    t.dim = tt.dim;
    t.dtype = tt.dtype;
    t.bounds = BoundsMode::kZero;
    t.table = static_cast<int>(tables.size());
    tables.push_back(t);
  }
  std::vector<FeatureParams> features;
  int64_t width = 0;
  for (size_t t = 0; t < tables.size(); ++t) {
    for (Pooling pooling : kPoolings) {
      FeatureParams f;
      f.table = static_cast<int>(t);
      f.pooling = pooling;
      f.out_col = width;
      width += tables[t].dim;
      features.push_back(f);
    }
  }
  std::vector<int64_t> offsets = {0}, ids;
  std::vector<float> id_weights;
  for (const FeatureParams& f : features) {
    for (int64_t b = 0; b < kBatch; ++b) {
      const int64_t len = static_cast<int64_t>(rng() % 81);
      for (int64_t i = 0; i < len; ++i) {
        const int64_t rows = tables[static_cast<size_t>(f.table)].rows;
        ids.push_back(rng() % 10 == 0 ? rows + static_cast<int64_t>(rng() % 5) : static_cast<int64_t>(rng() % rows));
        id_weights.push_back(static_cast<float>(rng() % 1000) / 997.0f - 0.5f);
      }
      offsets.push_back(static_cast<int64_t>(ids.size()));
    }
  }
  DeviceArray<TableParams> d_tables;
  DeviceArray<FeatureParams> d_features;
  DeviceArray<int64_t> d_offsets, d_ids;
  DeviceArray<float> d_id_weights, d_pooled;
  ASSERT_TRUE(d_tables.Upload(tables, "tables").ok());
  ASSERT_TRUE(d_features.Upload(features, "features").ok());
  ASSERT_TRUE(d_offsets.Upload(offsets, "offsets").ok());
  ASSERT_TRUE(d_ids.Upload(ids, "ids").ok());
  ASSERT_TRUE(d_id_weights.Upload(id_weights, "id weights").ok());
  ASSERT_TRUE(d_pooled.Allocate(static_cast<size_t>(kBatch * width), "pooled").ok());
  LaunchParams p;
  p.tables = d_tables.get();
  p.features = d_features.get();
  p.num_tables = static_cast<int>(tables.size());
  p.kjt = {d_offsets.get(), d_ids.get(), d_id_weights.get(), kBatch, static_cast<int64_t>(features.size())};
  p.pooled = d_pooled.get();
  p.pooled_width = width;
  p.forward_kinds = ForwardKindsOf(features.data(), static_cast<int64_t>(features.size()), tables.data());
  ASSERT_EQ(p.forward_kinds & kForwardWideRows, 0u);
  std::vector<float> narrow, wide;
  ASSERT_TRUE(LaunchForward(p).ok());
  ASSERT_TRUE(d_pooled.Download(narrow, "pooled").ok());
  ASSERT_TRUE(std::any_of(narrow.begin(), narrow.end(), [](float x) { return x != 0.0f; }));
  ASSERT_TRUE(d_pooled.Zero("pooled").ok());
  p.forward_kinds |= kForwardWideRows;
  ASSERT_TRUE(LaunchForward(p).ok());
  ASSERT_TRUE(d_pooled.Download(wide, "pooled").ok());
  ASSERT_EQ(narrow.size(), wide.size());
  EXPECT_EQ(std::memcmp(narrow.data(), wide.data(), narrow.size() * sizeof(float)), 0);
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
