#include "reference/sharding/shard_math.h"

#include <algorithm>

namespace gemtb::reference {
namespace {

using embedding::MulRn;

// One valid occurrence of a shard row: where its contribution comes from.
struct Occurrence {
  int64_t row;
  int64_t source;
  const float* grad;  // [cols]
  float weight;       // WSUM's weight, else unused
  bool weighted;
};

}  // namespace

void LookupShard(const TableConfig& table, const TableFeatures& features, const Shard& shard,
                 absl::Span<const float> weights, const TableIds& ids, std::vector<float>* pooled,
                 std::vector<float>* sequence) {
  const int64_t cols = shard.cols();
  const int64_t batch = ids.batch;
  pooled->assign(static_cast<size_t>(batch * features.num_pooled * cols), 0.0f);
  sequence->clear();
  auto in_shard = [&](int64_t row) { return row >= shard.row_begin && row < shard.row_end; };
  for (int fi = 0; fi < features.size(); ++fi) {
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t begin = ids.offsets[fi * batch + b], end = ids.offsets[fi * batch + b + 1];
      if (features.pooling[fi] == Pooling::kNone) {
        for (int64_t v = begin; v < end; ++v) {
          const int64_t row = RowOfId(table, ids.values[v]);
          for (int64_t j = 0; j < cols; ++j) {
            sequence->push_back(in_shard(row) ? weights[(row - shard.row_begin) * cols + j] : 0.0f);
          }
        }
        continue;
      }
      float* dst = pooled->data() + (b * features.num_pooled + features.pooled_index[fi]) * cols;
      for (int64_t j = 0; j < cols; ++j) {
        SeqSum sum;
        for (int64_t v = begin; v < end; ++v) {
          const int64_t row = RowOfId(table, ids.values[v]);
          if (!in_shard(row)) continue;
          const float e = weights[(row - shard.row_begin) * cols + j];
          sum.Add(features.pooling[fi] == Pooling::kWeightedSum ? MulRn(ids.weights[v], e) : e);
        }
        dst[j] = sum.Get();
      }
    }
  }
}

RowGradients ShardRowGradients(const TableConfig& table, const TableFeatures& features, const Shard& shard,
                               absl::Span<const TableIds> ids, absl::Span<const SourceGrads> grads) {
  const int64_t cols = shard.cols();
  std::vector<Occurrence> occ;
  for (size_t p = 0; p < ids.size(); ++p) {
    const TableIds& in = ids[p];
    // The oracle's order inside a block: sample, then key order, then position.
    std::vector<int64_t> seq_ordinal(static_cast<size_t>(in.offsets.back()), -1);
    int64_t k = 0;
    for (int fi = 0; fi < features.size(); ++fi) {
      if (features.pooling[fi] != Pooling::kNone) continue;
      for (int64_t v = in.offsets[fi * in.batch]; v < in.offsets[(fi + 1) * in.batch]; ++v) seq_ordinal[v] = k++;
    }
    for (int64_t b = 0; b < in.batch; ++b) {
      for (int fi = 0; fi < features.size(); ++fi) {
        for (int64_t v = in.offsets[fi * in.batch + b]; v < in.offsets[fi * in.batch + b + 1]; ++v) {
          const int64_t row = RowOfId(table, in.values[v]);
          if (row < shard.row_begin || row >= shard.row_end) continue;
          const bool none = features.pooling[fi] == Pooling::kNone;
          const float* g = none ? grads[p].sequence.data() + seq_ordinal[v] * cols
                                : grads[p].pooled.data() + (b * features.num_pooled + features.pooled_index[fi]) * cols;
          const bool weighted = features.pooling[fi] == Pooling::kWeightedSum;
          occ.push_back({row, static_cast<int64_t>(p), g, weighted ? in.weights[v] : 0.0f, weighted});
        }
      }
    }
  }
  std::stable_sort(occ.begin(), occ.end(), [](const Occurrence& a, const Occurrence& b) { return a.row < b.row; });
  RowGradients rg;
  std::vector<size_t> starts;
  for (size_t i = 0; i < occ.size(); ++i) {
    if (i == 0 || occ[i].row != occ[i - 1].row) {
      starts.push_back(i);
      rg.rows.push_back(occ[i].row);
    }
  }
  starts.push_back(occ.size());
  rg.grads.assign(rg.rows.size() * static_cast<size_t>(cols), 0.0f);
  for (size_t r = 0; r < rg.rows.size(); ++r) {
    for (int64_t j = 0; j < cols; ++j) {
      SeqSum outer;
      size_t i = starts[r];
      for (int64_t source = 0; source < static_cast<int64_t>(ids.size()); ++source) {
        SeqSum inner;
        for (; i < starts[r + 1] && occ[i].source == source; ++i) {
          inner.Add(occ[i].weighted ? MulRn(occ[i].weight, occ[i].grad[j]) : occ[i].grad[j]);
        }
        outer.Add(inner.Get());
      }
      rg.grads[r * cols + j] = outer.Get();
    }
  }
  return rg;
}

std::vector<float> ShardSquareSums(const OptimizerConfig& optimizer, const Shard& shard, const ShardState& state,
                                   const RowGradients& g) {
  const int64_t cols = shard.cols();
  std::vector<float> sums(g.rows.size());
  for (size_t k = 0; k < g.rows.size(); ++k) {
    const float* w = state.weights.data() + (g.rows[k] - shard.row_begin) * cols;
    sums[k] = embedding::RowwiseAdagradSquareSum(w, g.grads.data() + k * cols, cols, optimizer);
  }
  return sums;
}

void ApplyShardOptimizer(const EmbeddingConfig& config, const Shard& shard, ShardState& state, const RowGradients& g,
                         absl::Span<const float> square_sums, int64_t norm_dim, int64_t step) {
  const TableConfig& t = config.tables[shard.table];
  const OptimizerConfig& o = t.optimizer;
  const bool sr = t.stochastic_rounding && t.dtype != ElementType::kFloat32;
  const int64_t cols = shard.cols();
  for (size_t k = 0; k < g.rows.size(); ++k) {
    const int64_t r = g.rows[k];
    const int64_t local = r - shard.row_begin;
    float* w = state.weights.data() + local * cols;
    const float* gr = g.grads.data() + k * cols;
    switch (o.kind) {
      case OptimizerKind::kSgd:
        embedding::SgdRow(w, gr, cols, o.lr);
        break;
      case OptimizerKind::kRowwiseAdagrad:
        embedding::RowwiseAdagradApply(w, gr, cols, square_sums[k], norm_dim, &state.adagrad[local], o);
        break;
      case OptimizerKind::kAdam:
        embedding::AdamRow(w, gr, cols, state.adam_m.data() + local * cols, state.adam_v.data() + local * cols,
                           state.adam_step, o);
        break;
    }
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t gj = shard.col_begin + j;
      w[j] = embedding::StoreUpdated(w[j], t.dtype, sr,
                                     sr ? embedding::SrBits(config.seed, shard.table, step, t.dim, r, gj) : 0);
    }
  }
}

}  // namespace gemtb::reference
