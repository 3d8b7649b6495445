// One table's slice of a local KJT, as it travels in the ids all-to-all of a sharded run
// the table's features in key order, their per-sample lengths,
// the ids and (if the KJT is weighted) the weights; serialised as int32 lengths [F_t*B], int64
// values and fp32 weights, i.e. kappa = 4*B*|F_t| + 8*nu (+ 4*nu weighted) bytes.
#ifndef GEMTB_REFERENCE_SHARDING_TABLE_IDS_H_
#define GEMTB_REFERENCE_SHARDING_TABLE_IDS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/embedding/embedding_config.h"
#include "reference/embedding/kjt.h"

namespace gemtb::reference {

// The features of one table within a KJT, in key order, and where their outputs go.
struct TableFeatures {
  std::vector<int> keys;             // KJT key indices
  std::vector<Pooling> pooling;      // per feature
  std::vector<int> pooled_index;     // per feature: ordinal among the table's pooled features, or -1
  std::vector<int> sequence_index;   // per feature: ordinal among the table's NONE features, or -1
  std::vector<int64_t> output_col;   // pooled features: first column in EmbeddingOutput::pooled
  std::vector<int> output_sequence;  // NONE features: index into EmbeddingOutput::sequence
  int num_pooled = 0;
  int num_sequence = 0;

  int size() const { return static_cast<int>(keys.size()); }
};

// Per table, from a validated KJT layout; `pooled_width` gets the width of the pooled output.
std::vector<TableFeatures> CollectTableFeatures(const EmbeddingConfig& config, const KjtLayout& layout,
                                                int64_t* pooled_width);

// The row of an id, or -1 when it contributes nothing (invalid under bounds mode `zero`), exactly as
// the unsharded oracle decides.
int64_t RowOfId(const TableConfig& table, int64_t id);

struct TableIds {
  int64_t batch = 0;
  int num_features = 0;
  std::vector<int32_t> lengths;  // [feature][b]
  std::vector<int64_t> values;
  std::vector<float> weights;    // one per value when the KJT is weighted, else empty
  std::vector<int64_t> offsets;  // [num_features*batch + 1]
};

// Which ids go to a holder: all of them (TW, CW, DP), or only the valid ids whose row lies in
// [row_begin, row_end) (row-wise bucketing of RW, TWRW, GRID; lengths count the ids sent).
struct RowFilter {
  bool all = true;
  int64_t row_begin = 0;
  int64_t row_end = 0;
};

// Table `features`' ids of a local KJT selected by `filter`; `sent` (if not null) gets the KJT value
// index of every id selected, in order.
TableIds SelectTableIds(const KeyedJaggedTensor& kjt, const KjtLayout& layout, const TableConfig& table,
                        const TableFeatures& features, RowFilter filter, std::vector<int64_t>* sent);

// How many of `ids` belong to NONE (sequence) features.
int64_t SequenceIdCount(const TableFeatures& features, const TableIds& ids);

std::vector<uint8_t> SerializeTableIds(const TableIds& ids);
absl::StatusOr<TableIds> DeserializeTableIds(absl::Span<const uint8_t> bytes, int num_features, int64_t batch,
                                             bool weighted);

}  // namespace gemtb::reference

#endif  // GEMTB_REFERENCE_SHARDING_TABLE_IDS_H_
