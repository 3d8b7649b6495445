// The local arithmetic of a shard holder: lookups of the ids
// it received, the row gradients G_r of its rows and the fused optimizer on its rectangle, op by
// op as the unsharded oracle does them, with global row and column indices wherever a value depends
// on them (stochastic-rounding words).
#ifndef GEMTB_REFERENCE_SHARDING_SHARD_MATH_H_
#define GEMTB_REFERENCE_SHARDING_SHARD_MATH_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "model/embedding/embedding_config.h"
#include "model/embedding/embedding_math.h"
#include "reference/embedding/tbe.h"
#include "reference/sharding/shard_layout.h"
#include "reference/sharding/table_ids.h"

namespace gemtb::reference {

// What one rank keeps of one shard.
struct ShardState {
  std::vector<float> weights;  // [rows, cols]; V3: the gathered copy, empty when freed
  std::vector<float> adagrad;  // rowwise Adagrad m [rows]
  std::vector<float> adam_m;   // [rows, cols]
  std::vector<float> adam_v;   // [rows, cols]
  embedding::AdamStep adam_step;
  std::vector<float> stored;  // V3: this rank's sub-block of the weights [sub-block rows, cols]
};

// seqsum: the first term as is, ((x1 + x2) + x3)..., an empty sum is +0.
struct SeqSum {
  float value = 0.0f;
  bool any = false;
  void Add(float x) {
    value = any ? embedding::AddRn(value, x) : x;
    any = true;
  }
  float Get() const { return any ? value : 0.0f; }
};

// One source's ids looked up in one shard:
//   pooled   [batch][num_pooled][cols]: per bag the seqsum over its ids in the shard's rows of the row
//            slice (w * e under WSUM); MEAN's division by n is left to the requester;
//   sequence [ids of NONE features][cols]: the row slice, +0 for an invalid id or a row elsewhere.
void LookupShard(const TableConfig& table, const TableFeatures& features, const Shard& shard,
                 absl::Span<const float> weights, const TableIds& ids, std::vector<float>* pooled,
                 std::vector<float>* sequence);

// One source's upstream gradients restricted to a shard's columns (MEAN's already divided by n).
struct SourceGrads {
  std::vector<float> pooled;    // [batch][num_pooled][cols]
  std::vector<float> sequence;  // [ids of NONE features sent to this holder][cols]
};

// G_r of the shard's touched rows, ascending: per row and column the seqsum over sources (in the
// given order; a source without the row adds +0) of the seqsum of that source's contributions in
// (sample, key, position) order. Contribution: the gradient (SUM, MEAN, NONE) or weight * gradient
// (WSUM). Grads are [rows.size(), cols].
RowGradients ShardRowGradients(const TableConfig& table, const TableFeatures& features, const Shard& shard,
                               absl::Span<const TableIds> ids, absl::Span<const SourceGrads> grads);

// Rowwise Adagrad: each touched row's seqsum of g~^2 over the shard's columns.
std::vector<float> ShardSquareSums(const OptimizerConfig& optimizer, const Shard& shard, const ShardState& state,
                                   const RowGradients& g);

// The fused optimizer on the touched rows of the shard, then rounding to storage (SR words of global
// row and column at `step`). Rowwise Adagrad uses `square_sums` (one per touched row) over
// `norm_dim` columns. Adam's bias products are advanced by the caller, once per step.
void ApplyShardOptimizer(const EmbeddingConfig& config, const Shard& shard, ShardState& state, const RowGradients& g,
                         absl::Span<const float> square_sums, int64_t norm_dim, int64_t step);

}  // namespace gemtb::reference

#endif  // GEMTB_REFERENCE_SHARDING_SHARD_MATH_H_
