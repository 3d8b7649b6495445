// The embedding forward's sequence gather (gpu/embedding/sequence_kernel.cuh) run on the CPU by the
// fiber emulation: every NONE key's rows equal the oracle's forward byte for byte, on a drawn case of
// every family with sequence keys (each storage type, hashing and bounds mode: ids dropped under
// `zero` give +0 rows) and on sequences longer than a warp's 32 positions, whose lengths leave
// partial groups of 32 and of the rows a warp copies at a time.
// tests/gpu/embedding_device_test.cc checks the same on the GPU.
#include "tests/gpu/emulation/cuda_shim.h"
// The shim must come first.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu/embedding/host_tables.h"
#include "gpu/embedding/kjt_check.h"
#include "gpu/embedding/sequence_kernel.cuh"
#include "gtest/gtest.h"
#include "tests/gpu/emulation/embedding_launch_params.h"
#include "reference/embedding/kjt.h"
#include "reference/embedding/tbe.h"
#include "tools/check/embed_cases.h"
#include "tools/check/kjt_view.h"

namespace gemtb::gpu::embedding {
namespace {

// The kernel's sequence outputs (one per NONE key, in key order), each filled with 0xFF first.
std::vector<std::vector<float>> RunSequenceKernel(const check::EmbedCase& c) {
  const EmbeddingConfig& config = c.config;
  const KjtLayout layout = CheckKjt(config, check::KjtViewOf(c.kjt)).value();
  const int64_t batch = c.kjt.stride, num_keys = static_cast<int64_t>(c.kjt.keys.size());
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<TableParams> tables;
  int64_t total_rows = 0;
  for (size_t t = 0; t < config.tables.size(); ++t) {
    bytes.push_back(ToStorage(c.state.tables[t].weights, config.tables[t].dtype));
    tables.push_back(TableParamsOf(config.tables[t], static_cast<int>(t), total_rows, nullptr).value());
    total_rows += config.tables[t].rows;
  }
  for (size_t t = 0; t < tables.size(); ++t) tables[t].weights = bytes[t].data();
  int64_t pooled_width = 0;
  std::vector<FeatureParams> features = FeatureParamsOf(config, layout, batch, &pooled_width);
  std::vector<std::vector<float>> out;
  for (int64_t f = 0; f < num_keys; ++f) {
    FeatureParams& fp = features[static_cast<size_t>(f)];
    if (fp.pooling != Pooling::kNone) continue;
    const int64_t n = layout.offsets[static_cast<size_t>((f + 1) * batch)] - fp.value_begin;
    out.emplace_back(static_cast<size_t>(n * config.tables[static_cast<size_t>(fp.table)].dim));
    std::memset(out.back().data(), 0xFF, out.back().size() * sizeof(float));
  }
  for (size_t f = 0, s = 0; f < features.size(); ++f) {
    if (features[f].pooling == Pooling::kNone) features[f].sequence = out[s++].data();
  }
  const LaunchParams p = HostLaunchParams(c, layout, tables, features);
  const int64_t blocks = (num_keys * batch + kSequenceWarps - 1) / kSequenceWarps;
  emu::SetGridDim({static_cast<unsigned>(blocks), 1, 1});
  for (int64_t bx = 0; bx < blocks; ++bx) {
    emu::RunBlock({static_cast<unsigned>(bx), 0, 0}, kSequenceWarps * 32, [&] { SequenceKernel(p); });
  }
  return out;
}

void ExpectOraclesRows(const check::EmbedCase& c) {
  const absl::StatusOr<reference::EmbeddingOutput> want = reference::EmbeddingForward(c.config, c.state, c.kjt);
  ASSERT_TRUE(want.ok()) << c.description << ": " << want.status();
  const std::vector<std::vector<float>> got = RunSequenceKernel(c);
  ASSERT_EQ(got.size(), want->sequence.size()) << c.description;
  for (size_t s = 0; s < got.size(); ++s) {
    const std::vector<float>& w = want->sequence[s];
    EXPECT_TRUE(got[s].size() == w.size() && std::memcmp(got[s].data(), w.data(), w.size() * sizeof(float)) == 0)
        << c.description << ": sequence key " << s;
  }
}

TEST(SequenceGatherEmulated, RowsAreTheOraclesInEveryFamilyWithSequenceKeys) {
  const std::vector<check::EmbedFamily> families = check::AllEmbedFamilies();
  int cases = 0;
  for (size_t fi = 0; fi < families.size(); ++fi) {
    if (families[fi].pooling != Pooling::kNone) continue;
    ExpectOraclesRows(check::DrawEmbedCase(check::EmbedCaseSeed(17, fi, 0), families[fi]));
    ++cases;
  }
  EXPECT_GT(cases, 10);
}

// Sequences of 0 to 300 positions over two tables (dims 4 and 128 x 3, so a lane copies one or
// three chunks of a row), about a tenth of the ids out of range and dropped under `zero`.
TEST(SequenceGatherEmulated, LongSequencesAreTheOraclesRows) {
  for (ElementType dtype : {ElementType::kFloat32, ElementType::kBFloat16}) {
    std::mt19937_64 rng(3 + static_cast<uint64_t>(dtype));
    check::EmbedCase c;
    for (int64_t dim : {int64_t{4}, int64_t{384}}) {
      TableConfig table;
      table.name = "t" + std::to_string(dim);
      table.rows = 50;
      table.dim = dim;
      table.dtype = dtype;
      table.bounds = BoundsMode::kZero;
      c.config.tables.push_back(table);
    }
    c.config.features = {{"a", 0, Pooling::kNone}, {"b", 1, Pooling::kNone}};
    c.kjt.keys = {"a", "b"};
    c.kjt.stride = 5;
    for (size_t key = 0; key < c.kjt.keys.size(); ++key) {
      for (int64_t b = 0; b < c.kjt.stride; ++b) {
        const auto len = static_cast<int32_t>(b == 0 ? 0 : rng() % 301);
        c.kjt.lengths.push_back(len);
        for (int32_t i = 0; i < len; ++i) c.kjt.values.push_back(static_cast<int64_t>(rng() % 55));
      }
    }
    c.state = reference::InitEmbeddingState(c.config);
    c.description = std::string("long sequences, ") + (dtype == ElementType::kFloat32 ? "fp32" : "bf16");
    ExpectOraclesRows(c);
  }
}

}  // namespace
}  // namespace gemtb::gpu::embedding
