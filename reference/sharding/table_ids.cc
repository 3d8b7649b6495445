#include "reference/sharding/table_ids.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "model/embedding/embedding_math.h"

namespace gemtb::reference {
namespace {

template <typename T>
void Append(std::vector<uint8_t>& out, const std::vector<T>& v) {
  const size_t at = out.size();
  out.resize(at + v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data() + at, v.data(), v.size() * sizeof(T));
}

template <typename T>
void Read(absl::Span<const uint8_t> bytes, size_t* at, size_t count, std::vector<T>* out) {
  out->resize(count);
  if (count > 0) std::memcpy(out->data(), bytes.data() + *at, count * sizeof(T));
  *at += count * sizeof(T);
}

void DeriveOffsets(TableIds& ids) {
  ids.offsets.assign(ids.lengths.size() + 1, 0);
  for (size_t i = 0; i < ids.lengths.size(); ++i) ids.offsets[i + 1] = ids.offsets[i] + ids.lengths[i];
}

}  // namespace

std::vector<TableFeatures> CollectTableFeatures(const EmbeddingConfig& config, const KjtLayout& layout,
                                                int64_t* pooled_width) {
  std::vector<TableFeatures> out(config.tables.size());
  int64_t col = 0;
  int seq = 0;
  for (size_t f = 0; f < layout.feature.size(); ++f) {
    const FeatureConfig& fc = config.features[layout.feature[f]];
    TableFeatures& t = out[fc.table];
    t.keys.push_back(static_cast<int>(f));
    t.pooling.push_back(fc.pooling);
    if (fc.pooling == Pooling::kNone) {
      t.pooled_index.push_back(-1);
      t.sequence_index.push_back(t.num_sequence++);
      t.output_col.push_back(-1);
      t.output_sequence.push_back(seq++);
    } else {
      t.pooled_index.push_back(t.num_pooled++);
      t.sequence_index.push_back(-1);
      t.output_col.push_back(col);
      t.output_sequence.push_back(-1);
      col += config.tables[fc.table].dim;
    }
  }
  if (pooled_width != nullptr) *pooled_width = col;
  return out;
}

int64_t RowOfId(const TableConfig& table, int64_t id) {
  int64_t row = 0;
  if (embedding::IdToRow(id, table.hashing, table.rows, table.hash_seed, &row)) return row;
  return table.bounds == BoundsMode::kRemap0 ? 0 : -1;
}

TableIds SelectTableIds(const KeyedJaggedTensor& kjt, const KjtLayout& layout, const TableConfig& table,
                        const TableFeatures& features, RowFilter filter, std::vector<int64_t>* sent) {
  TableIds ids;
  ids.batch = kjt.stride;
  ids.num_features = features.size();
  const bool weighted = !kjt.weights.empty();
  for (int fi = 0; fi < features.size(); ++fi) {
    const int64_t f = features.keys[fi];
    for (int64_t b = 0; b < kjt.stride; ++b) {
      int32_t n = 0;
      for (int64_t v = layout.offsets[f * kjt.stride + b]; v < layout.offsets[f * kjt.stride + b + 1]; ++v) {
        if (!filter.all) {
          const int64_t row = RowOfId(table, kjt.values[v]);
          if (row < filter.row_begin || row >= filter.row_end) continue;  // also drops row -1
        }
        ++n;
        ids.values.push_back(kjt.values[v]);
        if (weighted) ids.weights.push_back(kjt.weights[v]);
        if (sent != nullptr) sent->push_back(v);
      }
      ids.lengths.push_back(n);
    }
  }
  DeriveOffsets(ids);
  return ids;
}

int64_t SequenceIdCount(const TableFeatures& features, const TableIds& ids) {
  int64_t count = 0;
  for (int fi = 0; fi < features.size(); ++fi) {
    if (features.pooling[fi] == Pooling::kNone) {
      count += ids.offsets[(fi + 1) * ids.batch] - ids.offsets[fi * ids.batch];
    }
  }
  return count;
}

std::vector<uint8_t> SerializeTableIds(const TableIds& ids) {
  std::vector<uint8_t> out;
  Append(out, ids.lengths);
  Append(out, ids.values);
  Append(out, ids.weights);
  return out;
}

absl::StatusOr<TableIds> DeserializeTableIds(absl::Span<const uint8_t> bytes, int num_features, int64_t batch,
                                             bool weighted) {
  TableIds ids;
  ids.batch = batch;
  ids.num_features = num_features;
  const size_t bags = static_cast<size_t>(num_features * batch);
  if (bytes.size() < bags * sizeof(int32_t)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ids message of ", bytes.size(), " bytes is shorter than ", bags, " lengths"));
  }
  size_t at = 0;
  Read(bytes, &at, bags, &ids.lengths);
  DeriveOffsets(ids);
  const size_t count = static_cast<size_t>(ids.offsets.back());
  const size_t want = at + count * (sizeof(int64_t) + (weighted ? sizeof(float) : 0));
  if (bytes.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat("ids message of ", bytes.size(), " bytes, lengths say ", want));
  }
  Read(bytes, &at, count, &ids.values);
  if (weighted) Read(bytes, &at, count, &ids.weights);
  return ids;
}

}  // namespace gemtb::reference
