// Shared cases of the sharding tests: an embedding config that exercises every pooling, hashing,
// bounds mode, optimizer and storage type; random batches; and the exact references of the sharding rules,
// built from the unsharded oracle only (never from the sharded executor's code).
#ifndef GEMTB_TESTS_EMBEDDING_SHARDING_CASES_H_
#define GEMTB_TESTS_EMBEDDING_SHARDING_CASES_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/embedding/embedding_math.h"
#include "model/sharding/sharding_plan_json.h"
#include "nlohmann/json.hpp"
#include "reference/embedding/kjt.h"
#include "reference/embedding/tbe.h"

namespace gemtb::reference::sharding_cases {

// Seven tables (rows prime, so never divisible by the rank count), eight features: shared tables,
// SUM/MEAN/WSUM/NONE, identity/mod/splitmix64 hashing, zero/remap0 bounds, SGD, rowwise Adagrad in
// its three decay modes, Adam and AdamW, fp32/bf16/fp16 storage with SR, and a table no key uses.
inline EmbeddingConfig MakeConfig() {
  auto table = [](const char* name, int64_t rows, int64_t dim, ElementType dtype, Hashing h, BoundsMode b,
                  OptimizerKind kind, WeightDecayMode decay, float lr, float wd) {
    TableConfig t;
    t.name = name;
    t.rows = rows;
    t.dim = dim;
    t.dtype = dtype;
    t.hashing = h;
    t.bounds = b;
    t.optimizer.kind = kind;
    t.optimizer.decay_mode = decay;
    t.optimizer.lr = lr;
    t.optimizer.weight_decay = wd;
    return t;
  };
  using E = ElementType;
  using O = OptimizerKind;
  using W = WeightDecayMode;
  EmbeddingConfig c;
  c.seed = 20260803;
  c.tables = {
      table("users", 13, 8, E::kFloat32, Hashing::kIdentity, BoundsMode::kZero, O::kSgd, W::kNone, 0.05f, 0.0f),
      table("items", 29, 12, E::kBFloat16, Hashing::kMod, BoundsMode::kZero, O::kRowwiseAdagrad, W::kNone, 0.1f, 0.0f),
      table("ads", 7, 8, E::kFloat16, Hashing::kSplitMix64, BoundsMode::kError, O::kRowwiseAdagrad, W::kL2, 0.08f,
            0.01f),
      table("ctx", 11, 4, E::kBFloat16, Hashing::kIdentity, BoundsMode::kRemap0, O::kRowwiseAdagrad, W::kDecoupled,
            0.05f, 0.02f),
      table("pages", 17, 8, E::kFloat32, Hashing::kMod, BoundsMode::kRemap0, O::kAdam, W::kDecoupled, 0.01f, 0.01f),
      table("geo", 5, 8, E::kBFloat16, Hashing::kIdentity, BoundsMode::kZero, O::kAdam, W::kNone, 0.02f, 0.0f),
      table("unused", 3, 4, E::kFloat32, Hashing::kIdentity, BoundsMode::kError, O::kAdam, W::kNone, 0.01f, 0.0f),
  };
  for (size_t t = 0; t < c.tables.size(); ++t) c.tables[t].hash_seed = embedding::DefaultHashSeed(static_cast<int>(t));
  auto feature = [](const char* key, int table_index, Pooling p) {
    FeatureConfig f;
    f.key = key;
    f.table = table_index;
    f.pooling = p;
    return f;
  };
  c.features = {feature("f_user", 0, Pooling::kSum),  feature("f_hist", 1, Pooling::kNone),
                feature("f_item", 1, Pooling::kMean), feature("f_ad", 2, Pooling::kWeightedSum),
                feature("f_ctx", 3, Pooling::kSum),   feature("f_page", 4, Pooling::kMean),
                feature("f_pseq", 4, Pooling::kNone), feature("f_geo", 5, Pooling::kWeightedSum)};
  return c;
}

// The plan JSON's "tables" with every table under `type`, as the GPU sharded module's tests run
// them: CW and GRID tables in the most column shards, at most `max_shards`, whose columns are a
// multiple of 4 (the GPU kernels' rule). Callers add owners and the plan-wide fields.
inline nlohmann::json UniformPlanJson(const EmbeddingConfig& config, const std::string& type, int64_t max_shards = 3) {
  nlohmann::json plan;
  for (const TableConfig& t : config.tables) {
    nlohmann::json e = {{"type", type}};
    if (type == "CW" || type == "GRID") {
      int64_t c = max_shards;
      while (c > 1 && t.dim % (4 * c) != 0) --c;
      e["shards"] = c;
    }
    plan["tables"][t.name] = e;
  }
  return plan;
}

// `plan` parsed for `r` ranks on hosts of `gph`; a parse error fails the test (and gives an empty plan).
inline ShardingPlanSpec ParsePlan(const EmbeddingConfig& config, const nlohmann::json& plan, int r, int gph) {
  absl::StatusOr<ShardingPlanSpec> spec = ParseShardingPlan(plan, PlanTablesOf(config), r, gph);
  EXPECT_TRUE(spec.ok()) << spec.status() << " in " << plan.dump();
  return spec.ok() ? *spec : ShardingPlanSpec{};
}

struct Batch {
  KeyedJaggedTensor kjt;
  EmbeddingGrads grads;
};

// Random lengths 0..4 (so empty bags occur), ids from small ranges (so duplicates occur) including
// invalid ones where the bounds mode allows them, weights and upstream gradients in [-2, 2].
inline Batch MakeBatch(const EmbeddingConfig& config, int64_t batch, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Batch out;
  KeyedJaggedTensor& k = out.kjt;
  k.stride = batch;
  for (const FeatureConfig& f : config.features) k.keys.push_back(f.key);
  std::uniform_real_distribution<float> real(-2.0f, 2.0f);
  for (const FeatureConfig& f : config.features) {
    const TableConfig& t = config.tables[f.table];
    for (int64_t b = 0; b < batch; ++b) {
      const int32_t len = static_cast<int32_t>(rng() % 5);
      k.lengths.push_back(len);
      for (int32_t p = 0; p < len; ++p) {
        int64_t id = 0;
        switch (t.hashing) {
          case Hashing::kIdentity:
            id = static_cast<int64_t>(rng() % static_cast<uint64_t>(t.rows + 3)) -
                 (t.bounds == BoundsMode::kError ? 0 : 2);
            if (t.bounds == BoundsMode::kError) id %= t.rows;
            break;
          case Hashing::kMod:
            id = static_cast<int64_t>(rng() % 200) - 10;
            break;
          case Hashing::kSplitMix64:
            id = static_cast<int64_t>(rng() % 1000);
            break;
        }
        k.values.push_back(id);
        k.weights.push_back(real(rng));
      }
    }
  }
  KjtLayout layout;
  const absl::Status s = ValidateKjt(k, config, &layout);
  EXPECT_TRUE(s.ok()) << s;
  int64_t width = 0;
  for (const FeatureConfig& f : config.features) {
    if (f.pooling != Pooling::kNone) width += config.tables[f.table].dim;
  }
  out.grads.pooled.resize(static_cast<size_t>(batch * width));
  for (float& g : out.grads.pooled) g = real(rng);
  for (size_t f = 0; f < config.features.size(); ++f) {
    if (config.features[f].pooling != Pooling::kNone) continue;
    const int64_t n = layout.offsets[(f + 1) * batch] - layout.offsets[f * batch];
    std::vector<float> g(static_cast<size_t>(n * config.tables[config.features[f].table].dim));
    for (float& x : g) x = real(rng);
    out.grads.sequence.push_back(std::move(g));
  }
  return out;
}

// The samples `samples` of a batch (in that order), with their upstream gradients.
inline Batch SubBatch(const EmbeddingConfig& config, const Batch& in, const std::vector<int64_t>& samples) {
  KjtLayout layout;
  EXPECT_TRUE(ValidateKjt(in.kjt, config, &layout).ok());
  const int64_t batch = in.kjt.stride;
  Batch out;
  out.kjt.keys = in.kjt.keys;
  out.kjt.stride = static_cast<int64_t>(samples.size());
  int64_t width = 0;
  for (int f : layout.feature) {
    if (config.features[f].pooling != Pooling::kNone) width += config.tables[config.features[f].table].dim;
  }
  for (int64_t f = 0; f < in.kjt.NumKeys(); ++f) {
    const FeatureConfig& fc = config.features[layout.feature[f]];
    const int64_t dim = config.tables[fc.table].dim;
    std::vector<float> seq;
    for (int64_t b : samples) {
      const int64_t v0 = layout.offsets[f * batch + b], v1 = layout.offsets[f * batch + b + 1];
      out.kjt.lengths.push_back(static_cast<int32_t>(v1 - v0));
      out.kjt.values.insert(out.kjt.values.end(), in.kjt.values.begin() + v0, in.kjt.values.begin() + v1);
      out.kjt.weights.insert(out.kjt.weights.end(), in.kjt.weights.begin() + v0, in.kjt.weights.begin() + v1);
      if (fc.pooling == Pooling::kNone) {
        const int64_t base = layout.offsets[f * batch];
        const size_t k = out.grads.sequence.size();
        seq.insert(seq.end(), in.grads.sequence[k].begin() + (v0 - base) * dim,
                   in.grads.sequence[k].begin() + (v1 - base) * dim);
      }
    }
    if (fc.pooling == Pooling::kNone) out.grads.sequence.push_back(std::move(seq));
  }
  for (int64_t b : samples) {
    out.grads.pooled.insert(out.grads.pooled.end(), in.grads.pooled.begin() + b * width,
                            in.grads.pooled.begin() + (b + 1) * width);
  }
  return out;
}

// The batch with every bag of the samples in `empty` emptied (their ids, weights and sequence
// gradients removed), e.g. to leave one rank without any id.
inline Batch EmptySamples(const EmbeddingConfig& config, const Batch& in, const std::vector<int64_t>& empty) {
  KjtLayout layout;
  EXPECT_TRUE(ValidateKjt(in.kjt, config, &layout).ok());
  const int64_t batch = in.kjt.stride;
  Batch out = in;
  out.kjt.values.clear();
  out.kjt.weights.clear();
  out.grads.sequence.clear();
  size_t k = 0;
  for (int64_t f = 0; f < in.kjt.NumKeys(); ++f) {
    const FeatureConfig& fc = config.features[layout.feature[f]];
    const int64_t dim = config.tables[fc.table].dim;
    std::vector<float> seq;
    for (int64_t b = 0; b < batch; ++b) {
      const bool drop = std::find(empty.begin(), empty.end(), b) != empty.end();
      const int64_t v0 = layout.offsets[f * batch + b], v1 = layout.offsets[f * batch + b + 1];
      out.kjt.lengths[f * batch + b] = drop ? 0 : static_cast<int32_t>(v1 - v0);
      if (drop) continue;
      out.kjt.values.insert(out.kjt.values.end(), in.kjt.values.begin() + v0, in.kjt.values.begin() + v1);
      out.kjt.weights.insert(out.kjt.weights.end(), in.kjt.weights.begin() + v0, in.kjt.weights.begin() + v1);
      if (fc.pooling == Pooling::kNone) {
        const int64_t base = layout.offsets[f * batch];
        seq.insert(seq.end(), in.grads.sequence[k].begin() + (v0 - base) * dim,
                   in.grads.sequence[k].begin() + (v1 - base) * dim);
      }
    }
    if (fc.pooling == Pooling::kNone) {
      out.grads.sequence.push_back(std::move(seq));
      ++k;
    }
  }
  return out;
}

// Writes an output computed on `samples` of the global batch into the global output's places.
inline void ScatterOutput(const EmbeddingConfig& config, const KeyedJaggedTensor& global,
                          const std::vector<int64_t>& samples, const EmbeddingOutput& part, EmbeddingOutput* out) {
  KjtLayout layout;
  EXPECT_TRUE(ValidateKjt(global, config, &layout).ok());
  const int64_t batch = global.stride;
  if (out->pooled.empty()) {
    out->pooled_width = part.pooled_width;
    out->pooled.assign(static_cast<size_t>(batch * part.pooled_width), 0.0f);
    out->sequence_keys = part.sequence_keys;
    for (int key : part.sequence_keys) {
      const int64_t n = layout.offsets[(key + 1) * batch] - layout.offsets[key * batch];
      out->sequence.emplace_back(static_cast<size_t>(n * config.tables[config.features[layout.feature[key]].table].dim),
                                 0.0f);
    }
  }
  const int64_t w = part.pooled_width;
  for (size_t i = 0; i < samples.size(); ++i) {
    std::copy(part.pooled.begin() + i * w, part.pooled.begin() + (i + 1) * w, out->pooled.begin() + samples[i] * w);
  }
  for (size_t k = 0; k < part.sequence_keys.size(); ++k) {
    const int key = part.sequence_keys[k];
    const int64_t dim = config.tables[config.features[layout.feature[key]].table].dim;
    const int64_t base = layout.offsets[key * batch];
    int64_t at = 0;
    for (int64_t b : samples) {
      const int64_t v0 = layout.offsets[key * batch + b], v1 = layout.offsets[key * batch + b + 1];
      std::copy(part.sequence[k].begin() + at * dim, part.sequence[k].begin() + (at + v1 - v0) * dim,
                out->sequence[k].begin() + (v0 - base) * dim);
      at += v1 - v0;
    }
  }
}

// seqsum over replicas in replica order, / N; weights rounded to storage (RNE).
inline void AverageReplicas(const EmbeddingConfig& config, std::vector<EmbeddingState>& replicas, bool state_sync) {
  const size_t n = replicas.size();
  auto average = [&](auto member, bool round, ElementType dtype) {
    const size_t len = member(replicas[0]).size();
    for (size_t e = 0; e < len; ++e) {
      float sum = member(replicas[0])[e];
      for (size_t r = 1; r < n; ++r) sum = embedding::AddRn(sum, member(replicas[r])[e]);
      float avg = embedding::DivRn(sum, static_cast<float>(n));
      if (round) avg = embedding::StoreRne(avg, dtype);
      for (size_t r = 0; r < n; ++r) member(replicas[r])[e] = avg;
    }
  };
  for (size_t t = 0; t < config.tables.size(); ++t) {
    const ElementType dt = config.tables[t].dtype;
    average([t](EmbeddingState& s) -> std::vector<float>& { return s.tables[t].weights; }, true, dt);
    if (!state_sync) continue;
    average([t](EmbeddingState& s) -> std::vector<float>& { return s.tables[t].adagrad; }, false, dt);
    average([t](EmbeddingState& s) -> std::vector<float>& { return s.tables[t].adam_m; }, false, dt);
    average([t](EmbeddingState& s) -> std::vector<float>& { return s.tables[t].adam_v; }, false, dt);
  }
}

struct Reference {
  EmbeddingOutput output;  // global layout, last step
  std::vector<EmbeddingState> replicas;
};

// The exact reference: N = R/M unsharded replicas, replica rho trained on the samples of
// ranks {m*N + rho} (m order) under `partition`, averaged every `sync_period` steps (0 = never).
// 1D sharding is the case M = R (one replica).
inline Reference RunReference(const EmbeddingConfig& config, const EmbeddingState& initial, const Batch& batch, int r,
                              int m, const SumPartition& partition, int steps, int sync_period, bool state_sync) {
  const int n = r / m;
  const int64_t local = batch.kjt.stride / r;
  Reference ref;
  std::vector<std::vector<int64_t>> samples(n);
  std::vector<Batch> parts;
  for (int rho = 0; rho < n; ++rho) {
    for (int mm = 0; mm < m; ++mm) {
      for (int64_t i = 0; i < local; ++i) samples[rho].push_back((mm * n + rho) * local + i);
    }
    parts.push_back(SubBatch(config, batch, samples[rho]));
    ref.replicas.push_back(initial);
  }
  for (int s = 0; s < steps; ++s) {
    ref.output = EmbeddingOutput{};
    for (int rho = 0; rho < n; ++rho) {
      absl::StatusOr<EmbeddingOutput> out = EmbeddingForward(config, ref.replicas[rho], parts[rho].kjt, partition, 1);
      EXPECT_TRUE(out.ok()) << out.status();
      ScatterOutput(config, batch.kjt, samples[rho], *out, &ref.output);
      const absl::Status st =
          EmbeddingBackwardStep(config, ref.replicas[rho], parts[rho].kjt, parts[rho].grads, partition, 1);
      EXPECT_TRUE(st.ok()) << st;
    }
    if (n > 1 && sync_period > 0 && (s + 1) % sync_period == 0) AverageReplicas(config, ref.replicas, state_sync);
  }
  return ref;
}

// ---- byte comparisons ----

inline ::testing::AssertionResult SameBytes(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  if (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0) return ::testing::AssertionSuccess();
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      return ::testing::AssertionFailure() << "first difference at [" << i << "]: " << a[i] << " vs " << b[i];
    }
  }
  return ::testing::AssertionFailure();
}

inline void ExpectSameOutput(const EmbeddingOutput& a, const EmbeddingOutput& b, const std::string& what) {
  EXPECT_EQ(a.pooled_width, b.pooled_width) << what;
  EXPECT_TRUE(SameBytes(a.pooled, b.pooled)) << what << " pooled";
  EXPECT_EQ(a.sequence_keys, b.sequence_keys) << what;
  ASSERT_EQ(a.sequence.size(), b.sequence.size()) << what;
  for (size_t k = 0; k < a.sequence.size(); ++k)
    EXPECT_TRUE(SameBytes(a.sequence[k], b.sequence[k])) << what << " sequence " << k;
}

inline void ExpectSameState(const EmbeddingState& a, const EmbeddingState& b, const std::string& what) {
  EXPECT_EQ(a.step, b.step) << what;
  ASSERT_EQ(a.tables.size(), b.tables.size()) << what;
  for (size_t t = 0; t < a.tables.size(); ++t) {
    const std::string at = what + " table " + std::to_string(t);
    EXPECT_TRUE(SameBytes(a.tables[t].weights, b.tables[t].weights)) << at << " weights";
    EXPECT_TRUE(SameBytes(a.tables[t].adagrad, b.tables[t].adagrad)) << at << " adagrad";
    EXPECT_TRUE(SameBytes(a.tables[t].adam_m, b.tables[t].adam_m)) << at << " adam_m";
    EXPECT_TRUE(SameBytes(a.tables[t].adam_v, b.tables[t].adam_v)) << at << " adam_v";
    EXPECT_TRUE(SameBytes({a.tables[t].adam_step.b1, a.tables[t].adam_step.b2},
                          {b.tables[t].adam_step.b1, b.tables[t].adam_step.b2}))
        << at << " adam_step";
  }
}

}  // namespace gemtb::reference::sharding_cases

#endif  // GEMTB_TESTS_EMBEDDING_SHARDING_CASES_H_
