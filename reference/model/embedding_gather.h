// The embedding stage of the model as a plain gather in any precision: MEAN pooling of the sparse
// features and the summed (item + action + dt) rows of each sequence event, with the backward as a
// scatter into dense per-table gradients. The fp64 gradient check and the fp64 mode use it; fp32
// training uses the TBE oracle (reference/embedding/tbe.h), and a test checks that both give the
// same bits in fp32.
#ifndef GEMTB_REFERENCE_MODEL_EMBEDDING_GATHER_H_
#define GEMTB_REFERENCE_MODEL_EMBEDDING_GATHER_H_

#include <cstdint>
#include <vector>

#include "model/embedding/embedding_math.h"
#include "reference/model/batch.h"
#include "reference/model/gem_model.h"

namespace gemtb::reference::model {

template <typename T>
struct GatheredBatch {
  std::vector<std::vector<T>> pooled;  // per sample [F, d]
  std::vector<std::vector<std::vector<T>>> events;  // per sample, per sequence [len, d]
  std::vector<SampleInput<T>> inputs;  // views into the above and the batch's dense floats
  std::vector<std::vector<T>> dense;   // per sample [m]
};

namespace gather_detail {
inline int64_t Row(const EmbeddingConfig& e, int table, int64_t id) {
  const TableConfig& t = e.tables[table];
  int64_t row = 0;
  embedding::IdToRow(id, t.hashing, t.rows, t.hash_seed, &row);
  return row;
}
}  // namespace gather_detail

// `tables[t]` = [rows, dim] of table t. Ids must be valid (the batch came through ValidateKjt).
template <typename T>
GatheredBatch<T> GatherBatch(const gemtb::model::ModelConfig& config, const EmbeddingConfig& e,
                             const std::vector<std::vector<T>>& tables, const TrainBatch& batch) {
  const int64_t B = batch.size;
  const int d = static_cast<int>(config.d);
  const int F = static_cast<int>(config.features.size());
  const int J = static_cast<int>(config.sequences.size());
  const int m = static_cast<int>(config.dense.m);
  GatheredBatch<T> g;
  g.pooled.resize(B);
  g.events.resize(B);
  g.dense.resize(B);
  g.inputs.resize(B);
  for (int64_t b = 0; b < B; ++b) {
    g.pooled[b].assign(static_cast<size_t>(F) * d, T(0));
    for (int f = 0; f < F; ++f) {
      const std::vector<int64_t>& bag = batch.sparse[f * B + b];
      const int table = e.features[f].table;
      T* out = g.pooled[b].data() + static_cast<size_t>(f) * d;
      for (int64_t id : bag) {
        const T* row = tables[table].data() + gather_detail::Row(e, table, id) * d;
        for (int c = 0; c < d; ++c) out[c] += row[c];
      }
      if (e.features[f].pooling == Pooling::kMean && !bag.empty())
        for (int c = 0; c < d; ++c) out[c] /= static_cast<T>(bag.size());
    }
    g.events[b].resize(J);
    for (int j = 0; j < J; ++j) {
      const auto& s = config.sequences[j];
      const std::vector<int64_t>& items = batch.item[j * B + b];
      const std::vector<int64_t>& actions = batch.action[j * B + b];
      const std::vector<int64_t>& dts = batch.dt[j * B + b];
      std::vector<T>& ev = g.events[b][j];
      ev.assign(items.size() * d, T(0));
      for (size_t p = 0; p < items.size(); ++p) {
        const T* ri = tables[s.item_table_index].data() + gather_detail::Row(e, s.item_table_index, items[p]) * d;
        const T* ra = tables[s.action_table_index].data() + gather_detail::Row(e, s.action_table_index, actions[p]) * d;
        const T* rd = tables[s.dt_table_index].data() + gather_detail::Row(e, s.dt_table_index, dts[p]) * d;
        for (int c = 0; c < d; ++c) ev[p * d + c] = (ri[c] + ra[c]) + rd[c];
      }
    }
    g.dense[b].assign(batch.dense.begin() + b * m, batch.dense.begin() + (b + 1) * m);
  }
  for (int64_t b = 0; b < B; ++b) {
    SampleInput<T>& in = g.inputs[b];
    in.pooled = g.pooled[b].data();
    in.dense = g.dense[b].data();
    for (int j = 0; j < J; ++j) {
      in.events.push_back(g.events[b][j].data());
      in.lengths.push_back(static_cast<int>(g.events[b][j].size() / d));
    }
  }
  return g;
}

// Dense table gradients: dtables[t] += the scatter of the input gradients (samples in order).
template <typename T>
void ScatterBatchGrad(const gemtb::model::ModelConfig& config, const EmbeddingConfig& e, const TrainBatch& batch,
                      const std::vector<SampleInputGrad<T>>& grads, std::vector<std::vector<T>>& dtables) {
  const int64_t B = batch.size;
  const int d = static_cast<int>(config.d);
  const int F = static_cast<int>(config.features.size());
  const int J = static_cast<int>(config.sequences.size());
  for (int64_t b = 0; b < B; ++b) {
    for (int f = 0; f < F; ++f) {
      const std::vector<int64_t>& bag = batch.sparse[f * B + b];
      const int table = e.features[f].table;
      const T* gr = grads[b].pooled.data() + static_cast<size_t>(f) * d;
      const T scale = (e.features[f].pooling == Pooling::kMean && !bag.empty()) ? T(1) / static_cast<T>(bag.size()) : T(1);
      for (int64_t id : bag) {
        T* row = dtables[table].data() + gather_detail::Row(e, table, id) * d;
        for (int c = 0; c < d; ++c) row[c] += gr[c] * scale;
      }
    }
    for (int j = 0; j < J; ++j) {
      const auto& s = config.sequences[j];
      const std::vector<int64_t>& items = batch.item[j * B + b];
      const std::vector<T>& gev = grads[b].events[j];
      const int tables3[3] = {s.item_table_index, s.action_table_index, s.dt_table_index};
      const std::vector<int64_t>* ids3[3] = {&items, &batch.action[j * B + b], &batch.dt[j * B + b]};
      for (int k = 0; k < 3; ++k)
        for (size_t p = 0; p < items.size(); ++p) {
          T* row = dtables[tables3[k]].data() + gather_detail::Row(e, tables3[k], (*ids3[k])[p]) * d;
          for (int c = 0; c < d; ++c) row[c] += gev[p * d + c];
        }
    }
  }
}

}  // namespace gemtb::reference::model

#endif  // GEMTB_REFERENCE_MODEL_EMBEDDING_GATHER_H_
