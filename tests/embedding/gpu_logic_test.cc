// The GPU embedding kernels' shared host/device logic on the CPU (no GPU needed): the host-side
// KJT validation gives the oracle's error for every defect, and the kernels' per-chunk functions
// (gpu/embedding/tbe_row_ops.h), called in the kernels' order (lanes' 4-column chunks, positions in
// order, the stable sort by SortKey, runs of one row, the fused optimizer per chunk), reproduce the
// oracle bit for bit on random cases of every family.
#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <numeric>
#include <vector>

#include "gpu/embedding/host_tables.h"
#include "gpu/embedding/kjt_check.h"
#include "gpu/embedding/launch.h"
#include "gpu/embedding/tbe_row_ops.h"
#include "gtest/gtest.h"
#include "reference/embedding/kjt.h"
#include "reference/embedding/tbe.h"
#include "tools/check/embed_cases.h"
#include "tools/check/kjt_view.h"
#include "tools/check/embed_compare.h"

namespace gemtb::gpu::embedding {
namespace {

using check::EmbedCase;
using check::EmbedRun;


// The kernels' algorithm, sequentially, through the same functions the kernels call; G_r's sum in
// blocks of `batch_block` samples when it is > 0 (BackwardBuffers::batch_block).
EmbedRun RunKernelOrderOnCpu(const EmbedCase& c, int64_t batch_block = 0) {
  EmbedRun run;
  absl::StatusOr<KjtLayout> layout = CheckKjt(c.config, check::KjtViewOf(c.kjt));
  if (!layout.ok()) {
    run.error = std::string(layout.status().message());
    return run;
  }
  const EmbeddingConfig& config = c.config;
  const int64_t batch = c.kjt.stride;
  const int64_t num_keys = static_cast<int64_t>(c.kjt.keys.size());
  // Tables.
  std::vector<std::vector<uint8_t>> storage(config.tables.size());  // as the device holds it
  std::vector<TableParams> tables;
  std::vector<std::vector<float>> adagrad, adam_m, adam_v;
  for (size_t t = 0; t < config.tables.size(); ++t) {
    adagrad.push_back(c.state.tables[t].adagrad);
    adam_m.push_back(c.state.tables[t].adam_m);
    adam_v.push_back(c.state.tables[t].adam_v);
  }
  int64_t total_rows = 0;
  for (size_t t = 0; t < config.tables.size(); ++t) {
    const TableConfig& tc = config.tables[t];
    storage[t] = ToStorage(c.state.tables[t].weights, tc.dtype);
    // The device's parameters as DeviceTbe builds them (without a prior state it cannot fail).
    TableParams p = TableParamsOf(tc, static_cast<int>(t), total_rows, nullptr).value();
    p.weights = storage[t].data();
    p.adagrad = adagrad[t].data();
    p.adam_m = adam_m[t].data();
    p.adam_v = adam_v[t].data();
    p.adam_step = c.state.tables[t].adam_step;
    if (tc.optimizer.kind == OptimizerKind::kAdam) p.adam_step = gemtb::embedding::NextAdamStep(p.adam_step, tc.optimizer);
    total_rows += tc.rows;
    tables.push_back(p);
  }
  // Features.
  int64_t width = 0;
  const std::vector<FeatureParams> features = FeatureParamsOf(config, *layout, batch, &width);
  const std::vector<int64_t>& offsets = layout->offsets;
  const std::vector<int64_t>& values = c.kjt.values;
  // Forward: a bag at a time, a 4-column chunk at a time, positions in order.
  run.pooled.assign(static_cast<size_t>(batch * width), 0.0f);
  std::vector<int> seq_of_key(static_cast<size_t>(num_keys), -1);
  for (int64_t f = 0; f < num_keys; ++f) {
    if (features[f].pooling != Pooling::kNone) continue;
    seq_of_key[f] = static_cast<int>(run.sequence.size());
    run.sequence.emplace_back(static_cast<size_t>((offsets[(f + 1) * batch] - offsets[f * batch]) * tables[features[f].table].dim));
  }
  for (int64_t bag = 0; bag < num_keys * batch; ++bag) {
    const FeatureParams& fp = features[bag / batch];
    const TableParams& t = tables[fp.table];
    for (int64_t c0 = 0; c0 < t.dim; c0 += kChunk) {
      if (fp.pooling == Pooling::kNone) {
        for (int64_t v = offsets[bag]; v < offsets[bag + 1]; ++v) {
          float e[kChunk] = {0.0f, 0.0f, 0.0f, 0.0f};
          const int64_t row = ResolveRow(t, values[v]);
          if (row >= 0) LoadChunk(t, row, c0, e);
          std::copy(e, e + kChunk, run.sequence[seq_of_key[bag / batch]].begin() + (v - fp.value_begin) * t.dim + c0);
        }
        continue;
      }
      SeqSum4 sum;
      int64_t n = 0;
      for (int64_t v = offsets[bag]; v < offsets[bag + 1]; ++v) {
        const int64_t row = ResolveRow(t, values[v]);
        if (row < 0) continue;
        ++n;
        float e[kChunk];
        LoadChunk(t, row, c0, e);
        PoolTerm(fp.pooling, fp.pooling == Pooling::kWeightedSum ? c.kjt.weights[v] : 0.0f, e);
        sum.Add(e);
      }
      float out[kChunk];
      FinishPool(fp.pooling, sum, n, out);
      std::copy(out, out + kChunk, run.pooled.begin() + (bag % batch) * width + fp.out_col + c0);
    }
  }
  // Backward: occurrence keys, a stable sort, runs of one row.
  std::vector<uint64_t> keys(values.size());
  std::vector<int64_t> bag_of(values.size()), bag_count(static_cast<size_t>(num_keys * batch), 0);
  const int64_t key_samples = SortKeySamples(features.data(), num_keys, static_cast<int>(tables.size()), batch);
  for (int64_t bag = 0; bag < num_keys * batch; ++bag) {
    const TableParams& t = tables[features[bag / batch].table];
    for (int64_t v = offsets[bag]; v < offsets[bag + 1]; ++v) {
      const int64_t row = ResolveRow(t, values[v]);
      keys[v] = row >= 0 ? SortKey(t.row_offset + row, key_samples == 1 ? 0 : bag % batch, key_samples)
                         : InvalidSortKey(total_rows, key_samples);
      bag_of[v] = bag;
      bag_count[bag] += row >= 0 ? 1 : 0;
    }
  }
  std::vector<int64_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return keys[a] < keys[b]; });
  for (size_t start = 0; start < order.size();) {
    const uint64_t global_row = keys[order[start]] / static_cast<uint64_t>(key_samples);
    size_t end = start;
    while (end < order.size() && keys[order[end]] / static_cast<uint64_t>(key_samples) == global_row) ++end;
    if (global_row < static_cast<uint64_t>(total_rows)) {
      const TableParams& t = tables[TableOfRow(tables.data(), static_cast<int>(tables.size()), static_cast<int64_t>(global_row))];
      const int64_t row = static_cast<int64_t>(global_row) - t.row_offset;
      std::vector<float> g_row(static_cast<size_t>(t.dim)), w_row(static_cast<size_t>(t.dim));
      for (int64_t c0 = 0; c0 < t.dim; c0 += kChunk) {
        BlockSeqSum4 sum;
        for (size_t i = start; i < end; ++i) {
          const int64_t v = order[i];
          const int64_t bag = bag_of[v];
          const FeatureParams& fp = features[bag / batch];
          const float* grad = fp.pooling == Pooling::kNone
                                  ? c.grads.sequence[seq_of_key[bag / batch]].data() + (v - fp.value_begin) * t.dim
                                  : c.grads.pooled.data() + (bag % batch) * width + fp.out_col;
          float g[kChunk];
          std::copy(grad + c0, grad + c0 + kChunk, g);
          ContributionTerm(fp.pooling, fp.pooling == Pooling::kWeightedSum ? c.kjt.weights[v] : 0.0f,
                           static_cast<int32_t>(bag_count[bag]), g);
          sum.Add(batch_block > 0 ? (bag % batch) / batch_block : 0, g);
        }
        float w[kChunk];
        LoadChunk(t, row, c0, w);
        const SeqSum4 total = sum.Finish(batch_block > 0 ? batch / batch_block : 1);
        for (int k = 0; k < kChunk; ++k) {
          g_row[c0 + k] = total.Get(k);
          w_row[c0 + k] = w[k];
        }
      }
      float square_sum = 0.0f, state_after = 0.0f;
      const float state_before = t.adagrad ? t.adagrad[row] : 0.0f;
      if (t.optimizer.kind == OptimizerKind::kRowwiseAdagrad) {
        square_sum = gemtb::embedding::RowwiseAdagradSquareSum(w_row.data(), g_row.data(), t.dim, t.optimizer);
      }
      for (int64_t c0 = 0; c0 < t.dim; c0 += kChunk) {
        float w[kChunk], g[kChunk];
        std::copy(w_row.begin() + c0, w_row.begin() + c0 + kChunk, w);
        std::copy(g_row.begin() + c0, g_row.begin() + c0 + kChunk, g);
        if (t.optimizer.kind == OptimizerKind::kRowwiseAdagrad) {
          state_after = AdagradChunkUpdate(t, square_sum, state_before, w, g);
        } else {
          ElementwiseUpdate(t, row, c0, w, g);
        }
        RoundChunk(t, config.seed, c.state.step, row, c0, w);
        StoreChunk(t, row, c0, w);
      }
      if (t.optimizer.kind == OptimizerKind::kRowwiseAdagrad) t.adagrad[row] = state_after;
    }
    start = end;
  }
  for (size_t t = 0; t < config.tables.size(); ++t) {
    run.table_bytes.push_back(std::move(storage[t]));
    std::vector<float> st = adagrad[t];
    st.insert(st.end(), adam_m[t].begin(), adam_m[t].end());
    st.insert(st.end(), adam_v[t].begin(), adam_v[t].end());
    st.push_back(tables[t].adam_step.b1);
    st.push_back(tables[t].adam_step.b2);
    run.state.push_back(std::move(st));
  }
  return run;
}

TEST(EmbeddingGpuLogic, KjtCheckGivesTheOraclesErrorForEveryDefect) {
  int errors = 0;
  for (int64_t i = 0; i < 600; ++i) {
    const EmbedCase c = check::DrawMalformedEmbedCase(check::EmbedCaseSeed(11, 0, i));
    reference::KjtLayout want_layout;
    const absl::Status want = reference::ValidateKjt(c.kjt, c.config, &want_layout);
    const absl::StatusOr<KjtLayout> got = CheckKjt(c.config, check::KjtViewOf(c.kjt));
    ASSERT_EQ(got.ok(), want.ok()) << c.description << ": oracle " << want;
    if (!want.ok()) {
      ++errors;
      EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(got.status().message(), want.message()) << c.description;
    } else {
      EXPECT_EQ(got->offsets, want_layout.offsets);
      EXPECT_EQ(got->feature, want_layout.feature);
    }
  }
  EXPECT_GT(errors, 450);  // nearly every drawn defect is one
}

// The three malformed inputs, with the messages written out by hand.
TEST(EmbeddingGpuLogic, NamedErrorsForNonMonotoneOffsetsBadIdsAndOverflowingLengths) {
  EmbeddingConfig config;
  config.tables.push_back({});
  config.tables[0].name = "t";
  config.tables[0].rows = 10;
  config.tables[0].dim = 4;
  config.features.push_back({"a", 0, Pooling::kSum, 1 << 30});
  const std::vector<std::string> keys = {"a"};
  std::vector<int32_t> lengths = {2, 0, 1};
  std::vector<int64_t> values = {1, 2, 3};
  std::vector<int64_t> offsets = {0, 2, 1, 3};  // not monotone
  KjtView kjt{keys, 3, lengths, values, {}, false, offsets};
  EXPECT_EQ(CheckKjt(config, kjt).status().message(), "E_KJT_OFFSETS at index 2: offsets[2]=1 but the lengths give 2");
  kjt.offsets = {};
  values = {1, 2, 10};  // identity hashing, 10 rows
  kjt.values = values;
  EXPECT_EQ(CheckKjt(config, kjt).status().message(),
            "E_ID_OUT_OF_RANGE at index 2 (key 'a', b 2, p 0): values[2]=10 is not a valid id of table 't' (10 rows)");
  lengths = {1 << 30, 1 << 30, 1 << 30};  // sums past int32 and past |values|
  kjt.lengths = lengths;
  EXPECT_EQ(CheckKjt(config, kjt).status().message(), "E_KJT_OFFSETS: sum of lengths 3221225472 but |values|=3");
  EXPECT_EQ(CheckKjt(config, kjt).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(EmbeddingGpuLogic, ValidKjtPassesWithTheOraclesLayout) {
  for (int64_t i = 0; i < 150; ++i) {
    const std::vector<check::EmbedFamily> families = check::AllEmbedFamilies();
    const check::EmbedFamily& family = families[static_cast<size_t>(i) % families.size()];
    const EmbedCase c = check::DrawEmbedCase(check::EmbedCaseSeed(12, 0, i), family);
    reference::KjtLayout want;
    ASSERT_TRUE(reference::ValidateKjt(c.kjt, c.config, &want).ok()) << c.description;
    const absl::StatusOr<KjtLayout> got = CheckKjt(c.config, check::KjtViewOf(c.kjt));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->offsets, want.offsets);
  }
}

TEST(EmbeddingGpuLogic, KernelOrderIsBitIdenticalToTheOracleInEveryFamily) {
  const std::vector<check::EmbedFamily> families = check::AllEmbedFamilies();
  for (size_t fi = 0; fi < families.size(); ++fi) {
    for (int64_t i = 0; i < 2; ++i) {
      const EmbedCase c = check::DrawEmbedCase(check::EmbedCaseSeed(13, fi, i), families[fi]);
      const EmbedRun want = check::RunEmbedOracle(c);
      ASSERT_TRUE(want.error.empty()) << c.description << ": " << want.error;
      const check::EmbedDiff d = check::CompareEmbedRuns(want, RunKernelOrderOnCpu(c));
      EXPECT_TRUE(d.Identical()) << c.description << ": " << (d.messages.empty() ? "" : d.messages[0]);
    }
  }
}

// With G_r summed in blocks of samples (a sharded holder's batch: one block per source), the kernel
// order equals the oracle under the same SumPartition; and the partition matters in these cases
// (a block's sum first, empty blocks' +0), so the comparison can fail.
TEST(EmbeddingGpuLogic, BatchBlocksGiveTheOraclesPartitionedSums) {
  const std::vector<check::EmbedFamily> families = check::AllEmbedFamilies();
  int differs_from_one_block = 0, cases = 0;
  for (size_t fi = 0; fi < families.size(); ++fi) {
    for (int64_t i = 0; i < 3; ++i) {
      const EmbedCase c = check::DrawEmbedCase(check::EmbedCaseSeed(29, fi, i), families[fi]);
      const int64_t batch = c.kjt.stride;
      for (int64_t block : {int64_t{1}, int64_t{2}, int64_t{3}}) {
        if (batch % block != 0 || batch / block < 2) continue;
        reference::SumPartition partition;
        partition.batch_blocks.assign(static_cast<size_t>(batch / block), block);
        const EmbedRun want = check::RunEmbedOracle(c, partition);
        ASSERT_TRUE(want.error.empty()) << c.description << ": " << want.error;
        const check::EmbedDiff d = check::CompareEmbedRuns(want, RunKernelOrderOnCpu(c, block));
        EXPECT_TRUE(d.Identical()) << c.description << ", blocks of " << block << ": "
                                   << (d.messages.empty() ? "" : d.messages[0]);
        ++cases;
        if (!check::CompareEmbedRuns(check::RunEmbedOracle(c), want).Identical()) ++differs_from_one_block;
      }
    }
  }
  EXPECT_GT(cases, 10);
  EXPECT_GT(differs_from_one_block, 0);
}

// BlockSeqSum4 on hand-made terms: a block's sum first, and an empty block turns -0 into +0.
TEST(EmbeddingGpuLogic, BlockSeqSumAddsBlocksInOrderAndEmptyBlocksAsPlusZero) {
  auto chunk = [](float x) {
    std::array<float, kChunk> a;
    a.fill(x);
    return a;
  };
  // 1 + (2^-24 + 2^-24): the block's sum is 2^-23 and survives; one seqsum would round it away.
  BlockSeqSum4 blocked;
  blocked.Add(0, chunk(1.0f).data());
  blocked.Add(1, chunk(0x1p-24f).data());
  blocked.Add(1, chunk(0x1p-24f).data());
  EXPECT_EQ(blocked.Finish(2).Get(0), 1.0f + 0x1p-23f);
  SeqSum4 flat;
  for (float x : {1.0f, 0x1p-24f, 0x1p-24f}) flat.Add(chunk(x).data());
  EXPECT_EQ(flat.Get(0), 1.0f);
  // -0 alone in one block of two: the other block adds +0.
  BlockSeqSum4 negative_zero;
  negative_zero.Add(1, chunk(-0.0f).data());
  EXPECT_FALSE(std::signbit(negative_zero.Finish(2).Get(0)));
  EXPECT_TRUE(std::signbit(negative_zero.Finish(1).Get(0)));
}

// The key's order: global row first, then sample b; the row comes back by division.
TEST(EmbeddingGpuLogic, SortKeyOrdersBySampleThenKjtOrder) {
  const int64_t batch = 5;
  EXPECT_LT(SortKey(3, 4, batch), SortKey(4, 0, batch));
  EXPECT_LT(SortKey(3, 1, batch), SortKey(3, 2, batch));
  EXPECT_EQ(SortKey(3, 2, batch) / batch, 3u);
  EXPECT_GT(InvalidSortKey(10, batch), SortKey(9, batch - 1, batch));
}

// Pooled bags of D = 128 have kernels of their own; the pooling kernels index rows in 32 bits
// unless a pooled bag's table has 2^31 rows or more.
TEST(EmbeddingGpuLogic, PooledKindsByDimAndWideRowsOnlyForTablesOfTwoToThe31Rows) {
  TableParams tables[2];
  tables[0].rows = INT32_MAX;
  tables[1].rows = int64_t{INT32_MAX} + 1;
  tables[1].dtype = ElementType::kBFloat16;
  FeatureParams features[2];
  features[0].table = 0;
  features[1].table = 1;
  EXPECT_EQ(ForwardKindsOf(features, 1, tables), kForwardPooledF32);
  EXPECT_EQ(ForwardKindsOf(features, 2, tables), kForwardPooledF32 | kForwardPooledBf16 | kForwardWideRows);
  features[1].pooling = Pooling::kNone;  // the sequence gather indexes rows in 64 bits always
  EXPECT_EQ(ForwardKindsOf(features, 2, tables), kForwardPooledF32 | kForwardSequence);
  tables[0].dim = 128;  // a kernel of its own
  EXPECT_EQ(ForwardKindsOf(features, 2, tables), kForwardPooledF32D128 | kForwardSequence);
  tables[1].dim = 128;
  features[1].pooling = Pooling::kMean;
  EXPECT_EQ(ForwardKindsOf(features, 2, tables), kForwardPooledF32D128 | kForwardPooledBf16D128 | kForwardWideRows);
}

// RoundChunk draws a chunk's four SR words as one Philox block; each must be the word the oracle
// draws for that element on its own (SrBits), for any table, step, row, width and chunk.
TEST(EmbeddingGpuLogic, OneSrBlockPerChunkGivesEachElementsOwnBits) {
  const int64_t dims[] = {4, 12, 128, 1024};
  for (uint64_t seed : {0ull, 7ull, 0xFEEDFACECAFEBEEFull}) {
    for (int table : {0, 3}) {
      for (int64_t step : {0ll, 1ll, 123456789ll}) {
        for (int64_t dim : dims) {
          for (int64_t row : {0ll, 1ll, 999ll, (1ll << 33) + 5}) {
            for (int64_t c = 0; c < dim; c += std::max<int64_t>(kChunk, dim / 4)) {
              const numerics::Philox4x32 block = em::SrBlock(seed, table, step, dim, row, c);
              for (int k = 0; k < kChunk; ++k) {
                ASSERT_EQ(static_cast<uint16_t>(block.v[k]), em::SrBits(seed, table, step, dim, row, c + k))
                    << "seed " << seed << " table " << table << " step " << step << " dim " << dim << " row " << row
                    << " column " << c + k;
              }
            }
          }
        }
      }
    }
  }
}

// The check's cases reach the backward's block-per-row path (runs of >= kHotRun occurrences) in
// every optimizer, so `check embed` compares it with the oracle; LongestRowRun against a count by hand.
TEST(EmbeddingGpuLogic, ForwardKindsNameEveryKernelWithBags) {
  // Each kind of bag runs in a forward kernel of its own; a kind missing here would leave its bags
  // unwritten, one too many launches a kernel with nothing to do.
  TableParams tables[3];
  tables[0].dtype = ElementType::kFloat32;
  tables[1].dtype = ElementType::kBFloat16;
  tables[2].dtype = ElementType::kFloat16;
  FeatureParams f[4];
  f[0].table = 1;
  f[0].pooling = Pooling::kSum;
  f[1].table = 0;
  f[1].pooling = Pooling::kNone;
  f[2].table = 2;
  f[2].pooling = Pooling::kMean;
  f[3].table = 0;
  f[3].pooling = Pooling::kWeightedSum;
  EXPECT_EQ(ForwardKindsOf(f, 1, tables), kForwardPooledBf16);
  EXPECT_EQ(ForwardKindsOf(f, 2, tables), kForwardPooledBf16 | kForwardSequence);
  EXPECT_EQ(ForwardKindsOf(f, 4, tables), kForwardPooledBf16 | kForwardSequence | kForwardPooledF16 | kForwardPooledF32);
  EXPECT_EQ(ForwardKindsOf(f + 1, 1, tables), kForwardSequence);  // a sequence key of an fp32 table
  EXPECT_EQ(ForwardKindsOf(f, 0, tables), 0u);
}

TEST(EmbeddingGpuLogic, DrawnCasesReachTheHotRowPath) {
  const std::vector<check::EmbedFamily> families = check::AllEmbedFamilies();
  int hot[3] = {0, 0, 0};
  for (size_t fi = 0; fi < families.size(); ++fi) {
    for (int64_t i = 0; i < 8; ++i) {
      const EmbedCase c = check::DrawEmbedCase(check::EmbedCaseSeed(41, fi, i), families[fi]);
      if (check::LongestRowRun(c) >= kHotRun) ++hot[static_cast<int>(families[fi].optimizer)];
    }
  }
  for (int o = 0; o < 3; ++o) EXPECT_GT(hot[o], 10) << "optimizer " << o << ": " << hot[o] << " cases";

  EmbedCase c;
  c.config.tables.resize(2);
  c.config.tables[0].rows = 5;
  c.config.tables[1].rows = 1;
  c.config.tables[1].bounds = BoundsMode::kRemap0;
  c.config.features = {{"a", 0, Pooling::kSum, 8}, {"b", 1, Pooling::kSum, 8}};
  c.kjt.keys = {"b", "a"};
  c.kjt.stride = 2;
  c.kjt.lengths = {2, 1, 3, 1};
  c.kjt.values = {0, 7, 0, /*a:*/ 4, 4, 1, 4};  // b: row 0, 7 remapped to row 0, row 0; a: row 4 thrice
  EXPECT_EQ(check::LongestRowRun(c), 3);
  c.kjt.values[5] = 4;  // a: row 4 four times
  EXPECT_EQ(check::LongestRowRun(c), 4);
  c.config.tables[1].bounds = BoundsMode::kZero;  // b: 7 contributes nothing, row 0 twice
  c.kjt.values[3] = 0;                            // a: row 0 once, row 4 three times
  EXPECT_EQ(check::LongestRowRun(c), 3);
}

}  // namespace
}  // namespace gemtb::gpu::embedding
