// The planted-teacher generator: stream vectors,
// determinism per (seed, index) whatever the batching or thread count, the length and id laws, masks,
// and the oracle NE of the committed tiny data.
#include "model/data/generator.h"

#include <gtest/gtest.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "model/data/batch.h"
#include "model/data/data_params_json.h"
#include "model/data/parallel_batch.h"
#include "model/data/shape_from_config.h"
#include "model/metrics/ne.h"
#include "model/random/splitmix64.h"

namespace gemtb::data {
namespace {

const Generator& Tiny() {
  static const Generator* generator = [] {
    absl::StatusOr<Generator> g = MakeGenerator("tiny");
    EXPECT_TRUE(g.ok()) << g.status();
    return new Generator(*std::move(g));
  }();
  return *generator;
}

bool SameSample(const Sample& a, const Sample& b) {
  auto same_f = [](const std::vector<float>& x, const std::vector<float>& y) {
    return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
  };
  auto same_d = [](const std::vector<double>& x, const std::vector<double>& y) {
    return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0);
  };
  if (a.index != b.index || a.surface != b.surface || a.sparse != b.sparse || !same_f(a.dense, b.dense)) return false;
  if (!same_d(a.logit, b.logit) || !same_d(a.prob, b.prob) || a.label != b.label || a.mask != b.mask) return false;
  if (a.sequences.size() != b.sequences.size()) return false;
  for (size_t j = 0; j < a.sequences.size(); ++j) {
    if (a.sequences[j].item != b.sequences[j].item || a.sequences[j].action != b.sequences[j].action ||
        a.sequences[j].dt != b.sequences[j].dt) {
      return false;
    }
  }
  return true;
}

TEST(Streams, SplitMix64AndStreamIdVectors) {
  // Expected values from an independent Python transcription of splitmix64.
  EXPECT_EQ(SplitMix64(0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(SplitMix64(1), 0x910A2DEC89025CC1ull);
  EXPECT_EQ(SplitMix64(0xFFFFFFFFFFFFFFFFull), 0xE4D971771B652C20ull);
  EXPECT_EQ(StreamId(StreamTag::kData, 0, 0), 0xBCCDFD9C96A18897ull);
  EXPECT_EQ(DataStream(FieldId(FieldKind::kSequence, 1), 12345), 0xE3B8DD3FF41E87FEull);
  EXPECT_EQ(StreamId(StreamTag::kTeacher, 0, 7), 0x435EB23196E47BDAull);
}

TEST(Generator, SampleBitsDependOnlyOnSeedAndIndex) {
  const Generator& g = Tiny();
  const int64_t n = 300;
  std::vector<Sample> one_by_one(n);
  for (int64_t i = 0; i < n; ++i) one_by_one[i] = g.Generate(/*seed=*/11, 1000 + i);
  // Reused buffers, reverse order: a previous, longer sample must not leak into the next.
  Sample reused;
  for (int64_t i = n - 1; i >= 0; --i) {
    g.Generate(11, 1000 + i, &reused);
    ASSERT_TRUE(SameSample(reused, one_by_one[i])) << i;
  }
  // Inside batches of different sizes and offsets.
  for (int64_t first : {int64_t{1000}, int64_t{1100}, int64_t{1217}}) {
    const Batch batch = GenerateBatch(g, 11, first, 64);
    Batch expect;
    AssembleBatch(g.shape(), one_by_one.data() + (first - 1000), 64, &expect);
    EXPECT_EQ(batch.values, expect.values);
    EXPECT_EQ(batch.lengths, expect.lengths);
    EXPECT_EQ(batch.label, expect.label);
    EXPECT_EQ(std::memcmp(batch.prob.data(), expect.prob.data(), batch.prob.size() * sizeof(double)), 0);
  }
  // Any thread count.
  for (int threads : {1, 2, 7, 16}) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads));
    std::vector<Sample> parallel(n);
    tbb::parallel_for(int64_t{0}, n, [&](int64_t i) { parallel[i] = g.Generate(11, 1000 + i); });
    for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(SameSample(parallel[i], one_by_one[i])) << threads << " " << i;
  }
  // A different seed gives different samples.
  EXPECT_FALSE(SameSample(g.Generate(12, 1000), one_by_one[0]));
}

TEST(Generator, IdsInRangeAndLengthsWithinCaps) {
  const Generator& g = Tiny();
  const DataShape& shape = g.shape();
  Sample s;
  for (int64_t i = 0; i < 2000; ++i) {
    g.Generate(3, i, &s);
    ASSERT_EQ(s.sparse.size(), shape.features.size());
    for (size_t f = 0; f < shape.features.size(); ++f) {
      ASSERT_LE(static_cast<int64_t>(s.sparse[f].size()), shape.features[f].max_len);
      for (int64_t id : s.sparse[f]) ASSERT_TRUE(id >= 0 && id < shape.features[f].rows) << f << " " << id;
    }
    EXPECT_EQ(s.sparse[0].size(), 1u);  // the user role is single-hot
    for (size_t j = 0; j < shape.sequences.size(); ++j) {
      const SequenceEvents& ev = s.sequences[j];
      ASSERT_LE(static_cast<int64_t>(ev.item.size()), shape.sequences[j].lmax);
      for (size_t p = 0; p < ev.item.size(); ++p) {
        ASSERT_TRUE(ev.item[p] >= 0 && ev.item[p] < shape.sequences[j].item_rows);
        ASSERT_TRUE(ev.action[p] >= 0 && ev.action[p] < shape.sequences[j].action_rows);
        ASSERT_TRUE(ev.dt[p] >= 0 && ev.dt[p] < shape.sequences[j].dt_rows);
        if (p > 0) {
          ASSERT_GE(ev.dt[p - 1], ev.dt[p]);  // oldest first: time since event shrinks
        }
      }
    }
    for (size_t t = 0; t < shape.tasks.size(); ++t) ASSERT_TRUE(s.prob[t] > 0.0 && s.prob[t] < 1.0);
  }
}

TEST(Generator, SequenceLengthsFollowTheirLaw) {
  // E[len] ~ 0.5 Lmax, 5-10 % capped, ~2 % empty.
  const Generator& g = Tiny();
  const int64_t n = 20000;
  Sample s;
  for (size_t j = 0; j < g.shape().sequences.size(); ++j) {
    const int64_t lmax = g.shape().sequences[j].lmax;
    int64_t total = 0, capped = 0, empty = 0;
    for (int64_t i = 0; i < n; ++i) {
      g.Generate(5, i, &s);
      const int64_t len = static_cast<int64_t>(s.sequences[j].item.size());
      total += len;
      capped += len == lmax;
      empty += len == 0;
    }
    const double mean_fraction = static_cast<double>(total) / static_cast<double>(n * lmax);
    EXPECT_NEAR(mean_fraction, 0.5, 0.03) << j;
    EXPECT_GE(static_cast<double>(capped) / n, 0.05) << j;
    EXPECT_LE(static_cast<double>(capped) / n, 0.10) << j;
    EXPECT_NEAR(static_cast<double>(empty) / n, 0.02, 0.005) << j;
  }
}

TEST(Generator, LengthOnlyDrawsMatchTheFullSample) {
  const Generator& g = Tiny();
  Sample s;
  std::vector<int64_t> lengths(g.shape().sequences.size());
  for (int64_t i = 0; i < 500; ++i) {
    g.Generate(8, i, &s);
    EXPECT_EQ(g.SequenceLoad(8, i), s.SequenceLoad());
    g.SequenceLengths(8, i, lengths.data());
    for (size_t j = 0; j < lengths.size(); ++j) EXPECT_EQ(lengths[j], static_cast<int64_t>(s.sequences[j].item.size()));
  }
}

TEST(Generator, IdsAreHeavyTailed) {
  // Zipf(1.1) on 2048 ad ids: the most frequent id alone takes several percent of the draws, and the
  // top 1 % of ids more than a third of them.
  const Generator& g = Tiny();
  std::vector<int64_t> counts(static_cast<size_t>(g.shape().features[1].rows), 0);
  Sample s;
  const int64_t n = 20000;
  for (int64_t i = 0; i < n; ++i) {
    g.Generate(6, i, &s);
    ++counts[static_cast<size_t>(s.sparse[1][0])];
  }
  std::sort(counts.rbegin(), counts.rend());
  EXPECT_GT(static_cast<double>(counts[0]) / n, 0.05);
  int64_t top = 0;
  for (size_t r = 0; r < counts.size() / 100; ++r) top += counts[r];
  EXPECT_GT(static_cast<double>(top) / n, 0.33);
}

TEST(Generator, LabelsFollowTheTrueProbabilitiesAndConversionsFollowClicks) {
  const Generator& g = Tiny();
  const int64_t n = 20000;
  Sample s;
  double sum_p = 0.0, sum_y = 0.0;
  int64_t conversion_masked = 0, clicks = 0;
  for (int64_t i = 0; i < n; ++i) {
    g.Generate(7, i, &s);
    sum_p += s.prob[0];
    sum_y += s.label[0];
    clicks += s.label[0];
    EXPECT_EQ(s.mask[0], 1);
    EXPECT_EQ(s.mask[1], s.label[0]);  // conversion observed exactly after a click
    conversion_masked += s.mask[1];
  }
  const double mean_p = sum_p / n;
  EXPECT_NEAR(sum_y / n, mean_p, 4.0 * std::sqrt(mean_p * (1.0 - mean_p) / n));
  EXPECT_GT(mean_p, 0.02);  // CTR of a few percent
  EXPECT_LT(mean_p, 0.10);
  EXPECT_EQ(conversion_masked, clicks);
}

TEST(Generator, OracleNeOfTinyIsAtMost085) {
  const Generator& g = Tiny();
  const int64_t n = 20000;
  std::vector<metrics::NeUnit> units(g.shape().tasks.size());
  Sample s;
  for (int64_t i = 0; i < n; ++i) {
    g.Generate(/*seed=*/1, i, &s);
    for (size_t t = 0; t < units.size(); ++t) {
      if (s.mask[t]) units[t].Add(s.prob[t], s.label[t] != 0);
    }
  }
  const metrics::NeResult ctr = metrics::EvaluateNe(std::vector<metrics::NeUnit>{units[0]});
  const metrics::NeResult conv = metrics::EvaluateNe(std::vector<metrics::NeUnit>{units[1]});
  std::printf("tiny oracle NE over %lld samples (seed 1): ctr %.4f (mean label %.4f, calibration %.4f), "
              "conversion %.4f (%lld masked, mean label %.4f)\n",
              static_cast<long long>(n), ctr.ne, ctr.mean_label, ctr.calibration, conv.ne,
              static_cast<long long>(conv.count), conv.mean_label);
  EXPECT_LE(ctr.ne, 0.85);
  EXPECT_GT(ctr.ne, 0.5);  // and not trivially easy
}

TEST(GeneratorParams, ErrorsNameTheField) {
  const Generator& g = Tiny();
  DataParams p = g.params();
  p.user_feature = "nobody";
  absl::StatusOr<Generator> bad = Generator::Create(p, g.shape());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("roles.user"), std::string::npos) << bad.status();
  p = g.params();
  p.tasks.pop_back();
  bad = Generator::Create(p, g.shape());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("no parameters for task"), std::string::npos) << bad.status();

  absl::StatusOr<DataParams> parsed = ParseDataParamsText(R"({"teacher": {"seed": 1, "gamma": 2}})");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("$.teacher.gamma"), std::string::npos) << parsed.status();
  parsed = ParseDataParamsText(R"({"lengths": {"sigma": -1}})");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("$.lengths.sigma: -1"), std::string::npos) << parsed.status();
  EXPECT_FALSE(ParseDataParamsText("{").ok());
  EXPECT_TRUE(ParseDataParamsText(R"({"_comment": ["free text"]})").ok());
}

TEST(Batch, KjtLayoutIsKeyMajor) {
  const Generator& g = Tiny();
  const Batch batch = GenerateBatch(g, 2, 0, 16);
  const size_t F = g.shape().features.size(), J = g.shape().sequences.size();
  ASSERT_EQ(batch.keys.size(), F + 3 * J);
  EXPECT_EQ(batch.keys[F], g.shape().sequences[0].name + ".item");
  ASSERT_EQ(batch.lengths.size(), batch.keys.size() * 16);
  int64_t total = 0;
  for (int32_t l : batch.lengths) total += l;
  EXPECT_EQ(total, static_cast<int64_t>(batch.values.size()));
  const Sample s3 = g.Generate(2, 3);
  EXPECT_EQ(batch.lengths[0 * 16 + 3], static_cast<int32_t>(s3.sparse[0].size()));
  EXPECT_EQ(batch.seq_lengths[1 * 16 + 3], static_cast<int32_t>(s3.sequences[1].item.size()));
  EXPECT_EQ(batch.lengths[(F + 3 + 2) * 16 + 3], static_cast<int32_t>(s3.sequences[1].dt.size()));
}

// The trainers' parallel batches: GenerateBatch's bits for any number of threads.
TEST(Batch, ParallelBatchHasTheBitsOfTheSerialOne) {
  const Generator& g = Tiny();
  const Batch serial = GenerateBatch(g, 5, 300, 257);
  for (const int threads : {1, 2, 7}) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads));
    const Batch parallel = GenerateBatchParallel(g, 5, 300, 257);
    EXPECT_EQ(parallel.size, serial.size);
    EXPECT_EQ(parallel.indices, serial.indices) << threads;
    EXPECT_EQ(parallel.keys, serial.keys) << threads;
    EXPECT_EQ(parallel.lengths, serial.lengths) << threads;
    EXPECT_EQ(parallel.values, serial.values) << threads;
    EXPECT_EQ(parallel.surface, serial.surface) << threads;
    EXPECT_EQ(parallel.seq_lengths, serial.seq_lengths) << threads;
    EXPECT_EQ(parallel.label, serial.label) << threads;
    EXPECT_EQ(parallel.mask, serial.mask) << threads;
    ASSERT_EQ(parallel.dense.size(), serial.dense.size());
    EXPECT_EQ(std::memcmp(parallel.dense.data(), serial.dense.data(), serial.dense.size() * sizeof(float)), 0) << threads;
    ASSERT_EQ(parallel.prob.size(), serial.prob.size());
    EXPECT_EQ(std::memcmp(parallel.prob.data(), serial.prob.data(), serial.prob.size() * sizeof(double)), 0) << threads;
  }
}

}  // namespace
}  // namespace gemtb::data
