#include "reference/embedding/tbe.h"

#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/info.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "model/embedding/optimizer_rules.h"

namespace gemtb::reference {
namespace {

using embedding::AddRn;
using embedding::DivRn;
using embedding::MulRn;

absl::Status Bad(const std::string& m) { return absl::InvalidArgumentError(m); }

template <typename F>
void InArena(int threads, F&& body) {
  tbb::task_arena arena(threads > 0 ? threads : tbb::info::default_concurrency());
  arena.execute(body);
}

// seqsum accumulator: the first term is taken as is ((x1 + x2) + x3 ...); an empty sum is +0.
struct SeqSum {
  float value = 0.0f;
  bool any = false;
  void Add(float x) {
    value = any ? AddRn(value, x) : x;
    any = true;
  }
  float Get() const { return any ? value : 0.0f; }
};

// One valid occurrence of a row in the KJT: where its upstream gradient comes from.
struct Occurrence {
  int64_t row;
  int64_t block;      // sample block (partition of the batch)
  const float* grad;  // gamma_fb (pooled) or gamma_fbp (NONE), [dim]
  Pooling pooling;
  float scalar;       // weight (WSUM) or n (MEAN)
};

int64_t PooledWidth(const EmbeddingConfig& config, const KjtLayout& layout) {
  int64_t w = 0;
  for (int f : layout.feature) {
    const FeatureConfig& fc = config.features[f];
    if (fc.pooling != Pooling::kNone) w += config.tables[fc.table].dim;
  }
  return w;
}

// The forward's output of a validated KJT, zero-filled; per key its first pooled column (`col`) or
// its index among the NONE keys' arrays (`seq_index`, -1 for pooled keys).
EmbeddingOutput ZeroOutput(const EmbeddingConfig& config, const KjtLayout& layout, int64_t batch,
                           std::vector<int64_t>* col, std::vector<int64_t>* seq_index) {
  const int64_t num_keys = static_cast<int64_t>(layout.feature.size());
  EmbeddingOutput out;
  out.pooled_width = PooledWidth(config, layout);
  out.pooled.assign(static_cast<size_t>(batch * out.pooled_width), 0.0f);
  col->assign(static_cast<size_t>(num_keys), 0);
  seq_index->assign(static_cast<size_t>(num_keys), -1);
  int64_t c = 0;
  for (int64_t f = 0; f < num_keys; ++f) {
    const FeatureConfig& fc = config.features[layout.feature[f]];
    const int64_t dim = config.tables[fc.table].dim;
    if (fc.pooling == Pooling::kNone) {
      (*seq_index)[f] = static_cast<int64_t>(out.sequence.size());
      out.sequence_keys.push_back(static_cast<int>(f));
      out.sequence.emplace_back(static_cast<size_t>((layout.offsets[(f + 1) * batch] - layout.offsets[f * batch]) * dim), 0.0f);
    } else {
      (*col)[f] = c;
      c += dim;
    }
  }
  return out;
}

// The row of value v of a bag, or -1 when it contributes nothing (invalid id under `zero`).
int64_t RowOf(const TableConfig& t, int64_t id) {
  int64_t row = 0;
  if (embedding::IdToRow(id, t.hashing, t.rows, t.hash_seed, &row)) return row;
  return t.bounds == BoundsMode::kRemap0 ? 0 : -1;  // kError was rejected by validation
}

std::vector<int64_t> BlockOfSample(const SumPartition& partition, int64_t batch, int64_t* num_blocks) {
  std::vector<int64_t> block(static_cast<size_t>(batch), 0);
  if (partition.batch_blocks.empty()) {
    *num_blocks = 1;
    return block;
  }
  int64_t b = 0;
  for (size_t k = 0; k < partition.batch_blocks.size(); ++k) {
    for (int64_t i = 0; i < partition.batch_blocks[k]; ++i) block[b++] = static_cast<int64_t>(k);
  }
  *num_blocks = static_cast<int64_t>(partition.batch_blocks.size());
  return block;
}

absl::Status CheckPartition(const EmbeddingConfig& config, const SumPartition& p, int64_t batch) {
  if (!p.batch_blocks.empty()) {
    int64_t total = 0;
    for (int64_t s : p.batch_blocks) {
      if (s < 0) return Bad(absl::StrCat("partition: negative batch block ", s));
      total += s;
    }
    if (total != batch) return Bad(absl::StrCat("partition: batch blocks sum to ", total, ", batch is ", batch));
  }
  for (size_t t = 0; t < p.pool_row_blocks.size() && t < config.tables.size(); ++t) {
    const auto& rb = p.pool_row_blocks[t];
    if (rb.size > 0 && (rb.count < 1 || rb.size * rb.count < config.tables[t].rows)) {
      return Bad(absl::StrCat("partition: row blocks of table ", t, " do not cover its rows"));
    }
  }
  for (size_t t = 0; t < p.norm_col_shards.size() && t < config.tables.size(); ++t) {
    const int64_t c = p.norm_col_shards[t];
    if (c > 1 && config.tables[t].dim % c != 0) {
      return Bad(absl::StrCat("partition: ", c, " column shards do not divide dim ", config.tables[t].dim));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateEmbeddingConfig(const EmbeddingConfig& config) {
  for (size_t t = 0; t < config.tables.size(); ++t) {
    const TableConfig& c = config.tables[t];
    const std::string name = absl::StrCat("tables[", t, "] '", c.name, "'");
    if (c.rows < 1) return Bad(absl::StrCat(name, ": rows=", c.rows, " must be >= 1"));
    if (c.dim < 4 || c.dim % 4 != 0) return Bad(absl::StrCat(name, ": dim=", c.dim, " must be a positive multiple of 4"));
    if (c.dtype == ElementType::kFloat64) return Bad(absl::StrCat(name, ": dtype must be fp32, fp16 or bf16"));
    if (c.rows > (int64_t{1} << 40) || c.dim > (int64_t{1} << 34) / c.rows) {  // rows*dim > 2^34, without overflow
      return Bad(absl::StrCat(name, ": rows*dim=", c.rows, "*", c.dim, " is too large for the CPU oracle"));
    }
    GEMTB_RETURN_IF_ERROR(ValidateOptimizerConfig(c.optimizer, name));
  }
  for (size_t f = 0; f < config.features.size(); ++f) {
    const FeatureConfig& c = config.features[f];
    if (c.table < 0 || c.table >= static_cast<int>(config.tables.size())) {
      return Bad(absl::StrCat("features[", f, "] '", c.key, "': table=", c.table, " does not exist"));
    }
    if (c.max_len < 0) return Bad(absl::StrCat("features[", f, "] '", c.key, "': max_len=", c.max_len, " is negative"));
    for (size_t g = 0; g < f; ++g) {
      if (config.features[g].key == c.key) return Bad(absl::StrCat("features[", f, "]: duplicate key '", c.key, "'"));
    }
  }
  return absl::OkStatus();
}

EmbeddingState InitEmbeddingState(const EmbeddingConfig& config) {
  EmbeddingState s;
  for (size_t t = 0; t < config.tables.size(); ++t) {
    const TableConfig& c = config.tables[t];
    TableState ts;
    ts.weights.resize(static_cast<size_t>(c.rows * c.dim));
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int64_t j = 0; j < c.dim; ++j) {
        ts.weights[r * c.dim + j] =
            embedding::StoreRne(embedding::InitValue(config.seed, static_cast<int>(t), c.rows, c.dim, r, j), c.dtype);
      }
    }
    if (c.optimizer.kind == OptimizerKind::kRowwiseAdagrad) ts.adagrad.assign(static_cast<size_t>(c.rows), 0.0f);
    if (c.optimizer.kind == OptimizerKind::kAdam) {
      ts.adam_m.assign(ts.weights.size(), 0.0f);
      ts.adam_v.assign(ts.weights.size(), 0.0f);
    }
    s.tables.push_back(std::move(ts));
  }
  return s;
}

absl::StatusOr<EmbeddingOutput> EmbeddingOutputShape(const EmbeddingConfig& config, const KeyedJaggedTensor& kjt) {
  GEMTB_RETURN_IF_ERROR(ValidateEmbeddingConfig(config));
  KjtLayout layout;
  GEMTB_RETURN_IF_ERROR(ValidateKjt(kjt, config, &layout));
  std::vector<int64_t> col, seq_index;
  return ZeroOutput(config, layout, kjt.stride, &col, &seq_index);
}

absl::StatusOr<EmbeddingOutput> EmbeddingForward(const EmbeddingConfig& config, const EmbeddingState& state,
                                                 const KeyedJaggedTensor& kjt, const SumPartition& partition,
                                                 int threads) {
  GEMTB_RETURN_IF_ERROR(ValidateEmbeddingConfig(config));
  KjtLayout layout;
  GEMTB_RETURN_IF_ERROR(ValidateKjt(kjt, config, &layout));
  GEMTB_RETURN_IF_ERROR(CheckPartition(config, partition, kjt.stride));
  const int64_t batch = kjt.stride;
  const int64_t num_keys = kjt.NumKeys();
  std::vector<int64_t> col, seq_index;
  EmbeddingOutput out = ZeroOutput(config, layout, batch, &col, &seq_index);
  // One task per (key, sample): it owns that bag's output slice.
  InArena(threads, [&] {
    tbb::parallel_for(int64_t{0}, num_keys * batch, [&](int64_t bag) {
      const int64_t f = bag / batch;
      const int64_t b = bag % batch;
      const FeatureConfig& fc = config.features[layout.feature[f]];
      const TableConfig& t = config.tables[fc.table];
      const std::vector<float>& w = state.tables[fc.table].weights;
      const int64_t begin = layout.offsets[bag], end = layout.offsets[bag + 1];
      if (fc.pooling == Pooling::kNone) {
        float* dst = out.sequence[seq_index[f]].data() + (begin - layout.offsets[f * batch]) * t.dim;
        for (int64_t v = begin; v < end; ++v) {
          const int64_t row = RowOf(t, kjt.values[v]);
          for (int64_t j = 0; j < t.dim; ++j) dst[(v - begin) * t.dim + j] = row >= 0 ? w[row * t.dim + j] : 0.0f;
        }
        return;
      }
      SumPartition::RowBlocks rb;
      if (static_cast<size_t>(fc.table) < partition.pool_row_blocks.size()) rb = partition.pool_row_blocks[fc.table];
      const int64_t blocks = rb.size > 0 ? rb.count : 1;
      float* dst = out.pooled.data() + b * out.pooled_width + col[f];
      // Rows once per bag; then whole rows at a time, column sums in the same order as the definition's
      // per-column seqsums (positions ascending within a block, blocks ascending).
      std::vector<int64_t> rows(static_cast<size_t>(end - begin));
      int64_t n = 0;
      for (int64_t v = begin; v < end; ++v) {
        rows[v - begin] = RowOf(t, kjt.values[v]);
        n += rows[v - begin] >= 0 ? 1 : 0;
      }
      std::vector<SeqSum> outer(static_cast<size_t>(t.dim)), inner(static_cast<size_t>(t.dim));
      for (int64_t blk = 0; blk < blocks; ++blk) {
        std::fill(inner.begin(), inner.end(), SeqSum{});
        for (int64_t v = begin; v < end; ++v) {
          const int64_t row = rows[v - begin];
          if (row < 0 || (rb.size > 0 && row / rb.size != blk)) continue;
          const float* e = w.data() + row * t.dim;
          for (int64_t j = 0; j < t.dim; ++j) {
            inner[j].Add(fc.pooling == Pooling::kWeightedSum ? MulRn(kjt.weights[v], e[j]) : e[j]);
          }
        }
        for (int64_t j = 0; j < t.dim; ++j) outer[j].Add(inner[j].Get());
      }
      for (int64_t j = 0; j < t.dim; ++j) {
        float value = outer[j].Get();
        if (fc.pooling == Pooling::kMean) value = n == 0 ? 0.0f : DivRn(value, static_cast<float>(n));
        dst[j] = value;
      }
    });
  });
  return out;
}

absl::StatusOr<std::vector<RowGradients>> EmbeddingRowGradients(const EmbeddingConfig& config,
                                                                const KeyedJaggedTensor& kjt,
                                                                const EmbeddingGrads& grads,
                                                                const SumPartition& partition) {
  GEMTB_RETURN_IF_ERROR(ValidateEmbeddingConfig(config));
  KjtLayout layout;
  GEMTB_RETURN_IF_ERROR(ValidateKjt(kjt, config, &layout));
  GEMTB_RETURN_IF_ERROR(CheckPartition(config, partition, kjt.stride));
  const int64_t batch = kjt.stride;
  const int64_t num_keys = kjt.NumKeys();
  const int64_t width = PooledWidth(config, layout);
  if (static_cast<int64_t>(grads.pooled.size()) != batch * width) {
    return Bad(absl::StrCat("grads.pooled: ", grads.pooled.size(), " values, expected B*W = ", batch, "*", width));
  }
  // Column of each pooled key and index of each NONE key, as in the forward.
  std::vector<int64_t> col(static_cast<size_t>(num_keys), 0), seq(static_cast<size_t>(num_keys), -1);
  int64_t c = 0, s = 0;
  for (int64_t f = 0; f < num_keys; ++f) {
    const FeatureConfig& fc = config.features[layout.feature[f]];
    const int64_t dim = config.tables[fc.table].dim;
    if (fc.pooling == Pooling::kNone) {
      seq[f] = s++;
      const int64_t want = (layout.offsets[(f + 1) * batch] - layout.offsets[f * batch]) * dim;
      if (static_cast<int64_t>(grads.sequence.size()) < s ||
          static_cast<int64_t>(grads.sequence[seq[f]].size()) != want) {
        return Bad(absl::StrCat("grads.sequence[", seq[f], "] (key '", kjt.keys[f], "'): expected ", want, " values"));
      }
    } else {
      col[f] = c;
      c += dim;
    }
  }
  // Without keys nothing is touched, and B (then backed by no data) must not size anything.
  if (num_keys == 0) return std::vector<RowGradients>(config.tables.size());
  int64_t num_blocks = 1;
  const std::vector<int64_t> block_of = BlockOfSample(partition, batch, &num_blocks);

  std::vector<RowGradients> out(config.tables.size());
  for (size_t t = 0; t < config.tables.size(); ++t) {
    const TableConfig& tc = config.tables[t];
    // Occurrences in (sample b, key order, position p) order; b ascending makes blocks contiguous.
    std::vector<Occurrence> occ;
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t f = 0; f < num_keys; ++f) {
        const FeatureConfig& fc = config.features[layout.feature[f]];
        if (fc.table != static_cast<int>(t)) continue;
        const int64_t bag = f * batch + b;
        const int64_t begin = layout.offsets[bag], end = layout.offsets[bag + 1];
        int64_t n = 0;
        for (int64_t v = begin; v < end; ++v) n += RowOf(tc, kjt.values[v]) >= 0 ? 1 : 0;
        for (int64_t v = begin; v < end; ++v) {
          const int64_t row = RowOf(tc, kjt.values[v]);
          if (row < 0) continue;
          const float* g = fc.pooling == Pooling::kNone
                               ? grads.sequence[seq[f]].data() + (v - layout.offsets[f * batch]) * tc.dim
                               : grads.pooled.data() + b * width + col[f];
          const float scalar = fc.pooling == Pooling::kWeightedSum ? kjt.weights[v] : static_cast<float>(n);
          occ.push_back({row, block_of[b], g, fc.pooling, scalar});
        }
      }
    }
    std::stable_sort(occ.begin(), occ.end(), [](const Occurrence& a, const Occurrence& b) { return a.row < b.row; });
    RowGradients& rg = out[t];
    std::vector<size_t> starts;
    for (size_t i = 0; i < occ.size(); ++i) {
      if (i == 0 || occ[i].row != occ[i - 1].row) {
        starts.push_back(i);
        rg.rows.push_back(occ[i].row);
      }
    }
    starts.push_back(occ.size());
    rg.grads.assign(rg.rows.size() * static_cast<size_t>(tc.dim), 0.0f);
    tbb::parallel_for(size_t{0}, rg.rows.size(), [&](size_t k) {
      float* dst = rg.grads.data() + k * tc.dim;
      for (int64_t j = 0; j < tc.dim; ++j) {
        SeqSum outer;
        size_t i = starts[k];
        for (int64_t blk = 0; blk < num_blocks; ++blk) {
          SeqSum inner;
          for (; i < starts[k + 1] && occ[i].block == blk; ++i) {
            const Occurrence& o = occ[i];
            float term = o.grad[j];
            if (o.pooling == Pooling::kWeightedSum) term = MulRn(o.scalar, term);
            if (o.pooling == Pooling::kMean) term = DivRn(term, o.scalar);
            inner.Add(term);
          }
          outer.Add(inner.Get());
        }
        dst[j] = outer.Get();
      }
    });
  }
  return out;
}

void ApplyOptimizer(const EmbeddingConfig& config, int table, TableState& state, const RowGradients& g,
                    int64_t step, int64_t norm_col_shards) {
  const TableConfig& t = config.tables[table];
  const OptimizerConfig& o = t.optimizer;
  const bool sr = t.stochastic_rounding && t.dtype != ElementType::kFloat32;
  const int64_t shards = norm_col_shards > 1 ? norm_col_shards : 1;
  const int64_t width = t.dim / shards;
  tbb::parallel_for(size_t{0}, g.rows.size(), [&](size_t k) {
    const int64_t r = g.rows[k];
    float* w = state.weights.data() + r * t.dim;
    const float* gr = g.grads.data() + k * t.dim;
    switch (o.kind) {
      case OptimizerKind::kSgd: embedding::SgdRow(w, gr, t.dim, o.lr); break;
      case OptimizerKind::kRowwiseAdagrad: {
        SeqSum total;  // partitioned over column shards (one block = plain seqsum)
        for (int64_t s = 0; s < shards; ++s) {
          total.Add(embedding::RowwiseAdagradSquareSum(w + s * width, gr + s * width, width, o));
        }
        embedding::RowwiseAdagradApply(w, gr, t.dim, total.Get(), t.dim, &state.adagrad[r], o);
        break;
      }
      case OptimizerKind::kAdam:
        embedding::AdamRow(w, gr, t.dim, state.adam_m.data() + r * t.dim, state.adam_v.data() + r * t.dim,
                           state.adam_step, o);
        break;
    }
    for (int64_t j = 0; j < t.dim; ++j) {
      w[j] = embedding::StoreUpdated(w[j], t.dtype, sr, sr ? embedding::SrBits(config.seed, table, step, t.dim, r, j) : 0);
    }
  });
}

absl::Status EmbeddingBackwardStep(const EmbeddingConfig& config, EmbeddingState& state,
                                   const KeyedJaggedTensor& kjt, const EmbeddingGrads& grads,
                                   const SumPartition& partition, int threads) {
  absl::Status status;
  InArena(threads, [&] {
    absl::StatusOr<std::vector<RowGradients>> rg = EmbeddingRowGradients(config, kjt, grads, partition);
    if (!rg.ok()) {
      status = rg.status();
      return;
    }
    for (size_t t = 0; t < config.tables.size(); ++t) {
      TableState& ts = state.tables[t];
      if (config.tables[t].optimizer.kind == OptimizerKind::kAdam) {
        ts.adam_step = embedding::NextAdamStep(ts.adam_step, config.tables[t].optimizer);
      }
      const int64_t shards = t < partition.norm_col_shards.size() ? partition.norm_col_shards[t] : 1;
      ApplyOptimizer(config, static_cast<int>(t), ts, (*rg)[t], state.step, shards);
    }
  });
  GEMTB_RETURN_IF_ERROR(status);
  ++state.step;
  return absl::OkStatus();
}

}  // namespace gemtb::reference
