// `gemtb train`'s checkpoint arrays (tools/gemtb/gpu_train_state.h) on the CPU: a job's ranks each
// write what they hold (dense parts, their replicated tables, or their table shards), and every
// rank's arrays together load back as the whole state; a missing part is refused by name.
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/description/gem_geometry.h"
#include "model/description/model_config.h"
#include "tools/gemtb/gpu_train_state.h"

namespace gemtb::cli {
namespace {

struct Tiny {
  gemtb::model::ModelConfig config = gemtb::model::LoadModelConfig("tiny").value();
  gpu::train::TrainerOptions options;
  EmbeddingConfig emb = gemtb::model::GemEmbeddingConfig(config, options.table_lr, options.seed);
  int64_t P = gemtb::model::MakeGemGeometry(config).value().layout.total();
};

std::vector<float> Ramp(int64_t n, float base) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = base + static_cast<float>(i % 977) * 0.25f;
  return v;
}

TEST(GpuTrainState, EveryRanksArraysTogetherLoadAsTheWholeState) {
  const Tiny t;
  const int R = 3;
  const int64_t shard = (t.P + R - 1) / R;  // shard group of 3: the last part is short
  std::vector<float> params = Ramp(t.P, 1), m = Ramp(t.P, 2), v = Ramp(t.P, 3);
  reference::model::NamedArrays all;
  for (int r = 0; r < R; ++r) {
    gpu::train::TrainerRankState s;
    s.step = 7;
    s.adam_b1 = 0.5f;
    s.adam_b2 = 0.25f;
    s.dense_part = r;
    s.dense_first = r * shard;
    const int64_t n = std::min(shard, t.P - s.dense_first);
    s.params.assign(params.begin() + s.dense_first, params.begin() + s.dense_first + n);
    s.adam_m.assign(m.begin() + s.dense_first, m.begin() + s.dense_first + n);
    s.adam_v.assign(v.begin() + s.dense_first, v.begin() + s.dense_first + n);
    for (int tb = r; tb < static_cast<int>(t.emb.tables.size()); tb += R) {
      const TableConfig& tc = t.emb.tables[static_cast<size_t>(tb)];
      s.table_index.push_back(tb);
      s.tables.push_back(
          {Ramp(tc.rows * tc.dim, static_cast<float>(tb)), Ramp(tc.rows, -static_cast<float>(tb)), {}, {}, {}});
    }
    reference::model::NamedArrays mine = GpuRankArrays(t.config, t.options, r, s, {});
    all.insert(all.end(), mine.begin(), mine.end());
  }
  absl::StatusOr<gpu::train::TrainerState> whole = GpuStateFromArrays(t.config, t.options, all);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->step, 7);
  EXPECT_EQ(whole->params, params);
  EXPECT_EQ(whole->adam_m, m);
  EXPECT_EQ(whole->adam_v, v);
  EXPECT_EQ(whole->adam_b2, 0.25f);
  ASSERT_EQ(whole->tables.size(), t.emb.tables.size());
  for (size_t tb = 0; tb < t.emb.tables.size(); ++tb) {
    const TableConfig& tc = t.emb.tables[tb];
    EXPECT_EQ(whole->tables[tb].weights, Ramp(tc.rows * tc.dim, static_cast<float>(tb))) << tc.name;
    EXPECT_EQ(whole->tables[tb].adagrad, Ramp(tc.rows, -static_cast<float>(tb))) << tc.name;
  }
  // Without rank 1's arrays the second dense part is missing, by name.
  reference::model::NamedArrays partial;
  for (const auto& a : all)
    if (a.first.find(".part1") == std::string::npos) partial.push_back(a);
  absl::StatusOr<gpu::train::TrainerState> refused = GpuStateFromArrays(t.config, t.options, partial);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("'params.part1' is missing"), std::string::npos) << refused.status();
}

TEST(GpuTrainState, TableShardsLoadByTheirKeys) {
  const Tiny t;
  gpu::train::TrainerRankState s;
  s.step = 3;
  const std::vector<GpuShardKey> keys = {{0, 0, -1, 2048, 32}, {9, 14, 1, 4096, 32}};
  for (const GpuShardKey& k : keys)
    s.table_shards.push_back({Ramp(k.rows * k.cols, static_cast<float>(k.shard)), Ramp(k.rows, 1), {}, {}, {}});
  s.dense_part = 0;
  s.params = Ramp(t.P, 0);
  s.adam_m = s.params;
  s.adam_v = s.params;
  reference::model::NamedArrays arrays = GpuRankArrays(t.config, t.options, 0, s, keys);
  EXPECT_TRUE(std::any_of(arrays.begin(), arrays.end(),
                          [](const auto& a) { return a.first == "table.items.shard14.replica1.weights"; }));
  absl::StatusOr<gpu::train::TrainerState> back = GpuStateFromArrays(t.config, t.options, arrays, keys);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->table_shards.size(), 2u);
  EXPECT_EQ(back->table_shards[1].weights, s.table_shards[1].weights);
  EXPECT_TRUE(back->tables.empty());
}

}  // namespace
}  // namespace gemtb::cli
