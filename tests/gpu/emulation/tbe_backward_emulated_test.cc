// The TBE backward's kernels (gpu/embedding/backward_kernels.cuh) run on the CPU by the fiber
// emulation, the sort and the scan done on the host as CUB does them (stable, exclusive): the
// updated tables and optimizer state equal the oracle's byte for byte on drawn cases of every
// family, with one block of samples and with G_r summed in blocks of samples (a sharded holder's
// sources; the oracle under the same SumPartition), in one pass and as the split update of column
// shards sharing Adagrad state, on the warp-per-row path and the block-per-hot-row path. The shim's
// explicitly rounded operations are the host's IEEE ones, so equality here is the kernels' order of
// operations, lane work and shuffles; tests/gpu/embedding_device_test.cc checks the same on the GPU.
#include "tests/gpu/emulation/cuda_shim.h"
// The shim must come first.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gpu/embedding/backward_kernels.cuh"
#include "gpu/embedding/host_tables.h"
#include "gpu/embedding/kjt_check.h"
#include "gtest/gtest.h"
#include "tests/gpu/emulation/embedding_launch_params.h"
#include "reference/embedding/kjt.h"
#include "reference/embedding/tbe.h"
#include "tools/check/embed_cases.h"
#include "tools/check/embed_compare.h"
#include "tools/check/kjt_view.h"

namespace gemtb::gpu::embedding::backward_kernels {

// The kernels' `extern __shared__` arrays (blocks run one after another).
alignas(16) float shared[kRowWarps * 2 * kMaxDim];
alignas(16) unsigned char hot_shared[size_t{1} << 18];

namespace {

template <typename Body>
void RunGrid(int64_t blocks, int threads, const Body& body, int64_t blocks_y = 1) {
  emu::SetGridDim({static_cast<unsigned>(blocks), static_cast<unsigned>(blocks_y), 1});
  for (int64_t by = 0; by < blocks_y; ++by) {
    for (int64_t bx = 0; bx < blocks; ++bx) {
      // A block sees none of the previous block's shared memory, as on the device.
      std::memset(shared, 0xFF, sizeof(shared));
      std::memset(hot_shared, 0xFF, sizeof(hot_shared));
      emu::RunBlock({static_cast<unsigned>(bx), static_cast<unsigned>(by), 0}, threads, body);
    }
  }
}

int64_t Blocks(int64_t items, int64_t per_block) { return (items + per_block - 1) / per_block; }

// The tables and state after one backward step run by the kernels.
struct Tables {
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<std::vector<float>> adagrad, adam_m, adam_v;
};

Tables RunKernels(const check::EmbedCase& c, int64_t batch_block, bool split) {
  const EmbeddingConfig& config = c.config;
  const KjtLayout layout = CheckKjt(config, check::KjtViewOf(c.kjt)).value();
  const int64_t batch = c.kjt.stride, num_keys = static_cast<int64_t>(c.kjt.keys.size());
  const int64_t n = static_cast<int64_t>(c.kjt.values.size());
  Tables out;
  std::vector<TableParams> tables;
  int64_t total_rows = 0, max_dim = 4;
  for (size_t t = 0; t < config.tables.size(); ++t) {
    const TableConfig& tc = config.tables[t];
    out.bytes.push_back(ToStorage(c.state.tables[t].weights, tc.dtype));
    out.adagrad.push_back(c.state.tables[t].adagrad);
    out.adam_m.push_back(c.state.tables[t].adam_m);
    out.adam_v.push_back(c.state.tables[t].adam_v);
    TableParams p = TableParamsOf(tc, static_cast<int>(t), total_rows, nullptr).value();
    p.adam_step = c.state.tables[t].adam_step;
    if (tc.optimizer.kind == OptimizerKind::kAdam)
      p.adam_step = gemtb::embedding::NextAdamStep(p.adam_step, tc.optimizer);
    total_rows += tc.rows;
    max_dim = std::max(max_dim, tc.dim);
    tables.push_back(p);
  }
  for (size_t t = 0; t < tables.size(); ++t) {
    tables[t].weights = out.bytes[t].data();
    tables[t].adagrad = out.adagrad[t].data();
    tables[t].adam_m = out.adam_m[t].data();
    tables[t].adam_v = out.adam_v[t].data();
  }
  int64_t width = 0;
  std::vector<FeatureParams> features = FeatureParamsOf(config, layout, batch, &width);
  for (size_t f = 0, seq = 0; f < features.size(); ++f) {
    if (features[f].pooling == Pooling::kNone) features[f].sequence_grad = c.grads.sequence[seq++].data();
  }
  LaunchParams p = HostLaunchParams(c, layout, tables, features);
  p.pooled_grad = c.grads.pooled.data();
  p.pooled_width = width;
  p.seed = config.seed;
  p.step = c.state.step;

  std::vector<uint64_t> keys_in(static_cast<size_t>(n)), keys_out(static_cast<size_t>(n));
  std::vector<int64_t> order_in(static_cast<size_t>(n)), order_out(static_cast<size_t>(n)),
      value_bag(static_cast<size_t>(n));
  std::vector<int64_t> run_start(static_cast<size_t>(n) + 1);
  std::vector<int32_t> bag_count(static_cast<size_t>(num_keys * batch)), run_head(static_cast<size_t>(n)),
      run_index(static_cast<size_t>(n)), hot_runs(static_cast<size_t>(HotRunCapacity(n)));
  int32_t num_runs = 0, num_hot_runs = 0;
  std::vector<float> hot_grads(static_cast<size_t>(HotRunCapacity(n) * max_dim), 7.0f);
  std::vector<float> run_grads(split ? static_cast<size_t>(n * max_dim) : 0),
      run_square_sums(split ? static_cast<size_t>(n) : 0);
  BackwardBuffers b;
  b.keys_in = keys_in.data();
  b.keys_out = keys_out.data();
  b.order_in = order_in.data();
  b.order_out = order_out.data();
  b.value_bag = value_bag.data();
  b.bag_count = bag_count.data();
  b.run_head = run_head.data();
  b.run_index = run_index.data();
  b.run_start = run_start.data();
  b.num_runs = &num_runs;
  b.total_rows = total_rows;
  b.key_samples = SortKeySamples(features.data(), num_keys, static_cast<int>(tables.size()), batch);
  b.max_dim = max_dim;
  b.hot_runs = hot_runs.data();
  b.num_hot_runs = &num_hot_runs;
  b.hot_grads = hot_grads.data();
  if (batch_block > 0) {
    b.batch_block = batch_block;
    b.num_batch_blocks = batch / batch_block;
  }
  if (split) {
    b.run_grads = run_grads.data();
    b.run_square_sums = run_square_sums.data();
  }
  if (num_keys * batch == 0 || n == 0) return out;
  // The launches of LaunchBackward, with CUB's sort and scan on the host.
  RunGrid(Blocks(num_keys * batch, kBagWarps), kBagWarps * 32, [&] { OccurrenceKernel(p, b); });
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t x, int64_t y) {
    return keys_in[static_cast<size_t>(x)] < keys_in[static_cast<size_t>(y)];
  });
  for (int64_t i = 0; i < n; ++i) {
    keys_out[static_cast<size_t>(i)] = keys_in[static_cast<size_t>(idx[static_cast<size_t>(i)])];
    order_out[static_cast<size_t>(i)] = order_in[static_cast<size_t>(idx[static_cast<size_t>(i)])];
  }
  RunGrid(Blocks(n, kThreads), kThreads, [&] { RunHeadKernel(b, n); });
  std::exclusive_scan(run_head.begin(), run_head.end(), run_index.begin(), 0);
  RunGrid(Blocks(n, kThreads), kThreads, [&] { RunStartKernel(b, n); });
  RunGrid(Blocks(n, kThreads), kThreads, [&] { HotRunListKernel(b); });
  const LaunchParams pc = p;
  const BackwardBuffers bc = b;
  if (b.num_batch_blocks > 1) {
    RunGrid(Blocks(Blocks(n, 32), kRowWarps), kRowWarps * 32, [&] { RowUpdateKernel<true>(pc, bc); });
  } else {
    RunGrid(Blocks(Blocks(n, 32), kRowWarps), kRowWarps * 32, [&] { RowUpdateKernel<false>(pc, bc); });
  }
  static_assert(kHotSharedBytes <= sizeof(hot_shared));
  // Fewer blocks than hot runs (each block takes several in turn), a slice of 32 columns each.
  RunGrid(
      std::min<int64_t>(HotRunCapacity(n), 3), kHotThreads, [&] { HotRowKernel(pc, bc); },
      (max_dim + kHotCols - 1) / kHotCols);
  RunGrid(Blocks(HotRunCapacity(n), kRowWarps), kRowWarps * 32, [&] { HotRowApplyKernel(pc, bc); });
  if (split) {
    // One shard: its partial square sums are the whole rows'.
    RunGrid(Blocks(n, kRowWarps), kRowWarps * 32, [&] { ApplyRowsKernel(pc, bc, run_square_sums.data()); });
  }
  return out;
}

bool SameBytes(const void* a, const void* b, size_t n) { return n == 0 || std::memcmp(a, b, n) == 0; }

// The kernels' tables against the oracle's under the partition of `batch_block`.
void ExpectOraclesTables(const check::EmbedCase& c, int64_t batch_block, bool split, const std::string& what) {
  reference::SumPartition partition;
  if (batch_block > 0) partition.batch_blocks.assign(static_cast<size_t>(c.kjt.stride / batch_block), batch_block);
  reference::EmbeddingState want = c.state;
  ASSERT_TRUE(reference::EmbeddingBackwardStep(c.config, want, c.kjt, c.grads, partition, 1).ok()) << what;
  const Tables got = RunKernels(c, batch_block, split);
  for (size_t t = 0; t < c.config.tables.size(); ++t) {
    const std::vector<uint8_t> bytes = ToStorage(want.tables[t].weights, c.config.tables[t].dtype);
    EXPECT_TRUE(bytes == got.bytes[t]) << what << ": table " << t << " weights";
    const auto& w = want.tables[t];
    EXPECT_TRUE(w.adagrad.size() == got.adagrad[t].size() &&
                SameBytes(w.adagrad.data(), got.adagrad[t].data(), 4 * w.adagrad.size()))
        << what << ": table " << t << " Adagrad";
    EXPECT_TRUE(w.adam_m.size() == got.adam_m[t].size() &&
                SameBytes(w.adam_m.data(), got.adam_m[t].data(), 4 * w.adam_m.size()))
        << what << ": table " << t << " Adam m";
    EXPECT_TRUE(w.adam_v.size() == got.adam_v[t].size() &&
                SameBytes(w.adam_v.data(), got.adam_v[t].data(), 4 * w.adam_v.size()))
        << what << ": table " << t << " Adam v";
  }
}

TEST(TbeBackwardEmulated, KernelsGiveTheOraclesTablesInEveryFamily) {
  const std::vector<check::EmbedFamily> families = check::AllEmbedFamilies();
  int blocked = 0;
  for (size_t fi = 0; fi < families.size(); fi += 3) {  // a third of the families: the emulation is slow
    const check::EmbedCase c = check::DrawEmbedCase(check::EmbedCaseSeed(41, fi, 0), families[fi]);
    const std::string what = c.description;
    ExpectOraclesTables(c, 0, false, what + ", one block");
    ExpectOraclesTables(c, 0, true, what + ", one block, split update");
    for (int64_t block : {int64_t{1}, int64_t{2}}) {
      if (c.kjt.stride % block != 0 || c.kjt.stride / block < 2) continue;
      ExpectOraclesTables(c, block, fi % 2 == 0, what + ", blocks of " + std::to_string(block));
      ++blocked;
    }
  }
  EXPECT_GT(blocked, 20);
}

TEST(TbeBackwardEmulated, HotRowsGiveTheOraclesTables) {
  const std::vector<check::EmbedFamily> families = check::AllEmbedFamilies();
  int hot = 0;
  for (size_t fi = 0; fi < families.size() && hot < 6; fi += 7) {
    for (int64_t i = 0; i < 100; ++i) {
      const check::EmbedCase c = check::DrawEmbedCase(check::EmbedCaseSeed(24, fi, i), families[fi]);
      if (check::LongestRowRun(c) < kHotRun) continue;
      ++hot;
      ExpectOraclesTables(c, 0, false, c.description + ", hot");
      if (c.kjt.stride % 2 == 0)
        ExpectOraclesTables(c, c.kjt.stride / 2, hot % 2 == 0, c.description + ", hot, two blocks");
      break;
    }
  }
  EXPECT_GE(hot, 3);
}

// One row read several thousand times by four keys of every pooling (their terms scaled
// differently, interleaved in the sorted order): a run that spans several batches of the hot-row
// kernel's metadata. The terms' magnitudes spread over 2^-20 .. 2^20, so
// the sums depend on the order of the additions; SGD with lr 1 from zero weights stores -G, every
// bit of it.
check::EmbedCase LongHotRunCase(int64_t dim, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> exponent(-20, 20);
  const auto value = [&] { return std::ldexp(normal(rng), exponent(rng)); };
  check::EmbedCase c;
  TableConfig table;
  table.name = "hot";
  table.rows = 3;
  table.dim = dim;
  table.optimizer.lr = 1.0f;
  c.config.tables = {table};
  c.config.features = {{"seq", 0, Pooling::kNone}, {"sum", 0, Pooling::kSum}, {"mean", 0, Pooling::kMean},
                       {"wsum", 0, Pooling::kWeightedSum}};
  c.kjt.keys = {"seq", "sum", "mean", "wsum"};
  c.kjt.stride = 4;
  std::vector<int64_t> sequence_lengths;
  for (size_t key = 0; key < c.kjt.keys.size(); ++key) {
    for (int64_t b = 0; b < c.kjt.stride; ++b) {
      const int32_t len = 120 + static_cast<int32_t>(rng() % 100);
      c.kjt.lengths.push_back(len);
      for (int32_t i = 0; i < len; ++i) c.kjt.values.push_back(rng() % 8 == 0 ? static_cast<int64_t>(rng() % 2) * 2 : 1);
      if (key == 0) sequence_lengths.push_back(len);
    }
  }
  c.kjt.has_weights = true;
  for (size_t v = 0; v < c.kjt.values.size(); ++v) c.kjt.weights.push_back(value());
  c.state = reference::InitEmbeddingState(c.config);
  std::fill(c.state.tables[0].weights.begin(), c.state.tables[0].weights.end(), 0.0f);
  for (int64_t i = 0; i < c.kjt.stride * 3 * dim; ++i) c.grads.pooled.push_back(value());
  const int64_t sequence_len = std::accumulate(sequence_lengths.begin(), sequence_lengths.end(), int64_t{0});
  std::vector<float> sequence(static_cast<size_t>(sequence_len * dim));
  for (float& x : sequence) x = value();
  c.grads.sequence.push_back(std::move(sequence));
  c.description = "long hot run, dim " + std::to_string(dim);
  return c;
}

TEST(TbeBackwardEmulated, LongHotRunsGiveTheOraclesTables) {
  for (int64_t dim : {int64_t{4}, int64_t{64}, int64_t{128}, int64_t{1024}}) {
    const check::EmbedCase c = LongHotRunCase(dim, 7 + static_cast<uint64_t>(dim));
    ASSERT_GT(check::LongestRowRun(c), 2 * kHotThreads) << c.description;
    ExpectOraclesTables(c, 0, false, c.description + ", one block");
    ExpectOraclesTables(c, 1, false, c.description + ", blocks of 1 sample");
    ExpectOraclesTables(c, 2, true, c.description + ", blocks of 2 samples, split update");
  }
}

}  // namespace
}  // namespace gemtb::gpu::embedding::backward_kernels
