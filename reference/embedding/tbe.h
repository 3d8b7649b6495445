// Table-batched embeddings, the unsharded oracle.
//
// Forward pooling and the backward fused with the optimizer, op by op in fp32 as the definition writes
// them. Every sum that a sharding splits is a *partitioned sum* (seqsum over ordered blocks of
// per-block seqsums); `SumPartition` names the blocks, so that the unsharded oracle with the
// partition a sharding induces is bit-identical to that sharding (one block = plain seqsum).
#ifndef GEMTB_REFERENCE_EMBEDDING_TBE_H_
#define GEMTB_REFERENCE_EMBEDDING_TBE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "model/embedding/embedding_config.h"
#include "model/embedding/embedding_math.h"
#include "reference/embedding/kjt.h"

namespace gemtb::reference {

absl::Status ValidateEmbeddingConfig(const EmbeddingConfig& config);

// One table's parameters and optimizer state. Weights hold storage values widened to fp32.
struct TableState {
  std::vector<float> weights;    // [rows, dim]
  std::vector<float> adagrad;    // rowwise Adagrad: m per row [rows]
  std::vector<float> adam_m;     // Adam: [rows, dim]
  std::vector<float> adam_v;     // Adam: [rows, dim]
  embedding::AdamStep adam_step; // bias-correction products b1, b2
};

struct EmbeddingState {
  std::vector<TableState> tables;
  int64_t step = 0;  // optimizer steps taken; keys the SR stream
};

// Tables initialised from Philox, zero optimizer state.
EmbeddingState InitEmbeddingState(const EmbeddingConfig& config);

// The blocks of every split sum.
struct SumPartition {
  // Sizes of consecutive sample blocks (local batches in rank order) of the row-gradient sum G_r;
  // empty = one block of all samples.
  std::vector<int64_t> batch_blocks;
  // Per table: pooled sums are partitioned into `count` row blocks, block = floor(row / size), summed
  // in block order with empty blocks as +0 (row-wise sharding's reduce-scatter over `count` ranks);
  // size 0 or absent = one block.
  struct RowBlocks {
    int64_t size = 0;
    int64_t count = 1;
  };
  std::vector<RowBlocks> pool_row_blocks;
  // Per table: the rowwise-Adagrad square sum is partitioned over this many equal column shards
  // (column-wise sharding's all-gather of partial sums); 0/1 or absent = one block.
  std::vector<int64_t> norm_col_shards;
};

// Pooled features in key order: [B, sum of their dims]; each NONE feature: [sum_b len, dim].
struct EmbeddingOutput {
  std::vector<float> pooled;
  int64_t pooled_width = 0;
  std::vector<int> sequence_keys;  // KJT key index of each NONE feature, in key order
  std::vector<std::vector<float>> sequence;
};

// Upstream gradients in the shapes of EmbeddingOutput.
struct EmbeddingGrads {
  std::vector<float> pooled;
  std::vector<std::vector<float>> sequence;
};

// The shapes of EmbeddingForward's output on `kjt`, zero-filled, after the same validation (a
// caller filling the output from elsewhere, e.g. a checkpoint's lookups).
absl::StatusOr<EmbeddingOutput> EmbeddingOutputShape(const EmbeddingConfig& config, const KeyedJaggedTensor& kjt);

absl::StatusOr<EmbeddingOutput> EmbeddingForward(const EmbeddingConfig& config, const EmbeddingState& state,
                                                 const KeyedJaggedTensor& kjt, const SumPartition& partition = {},
                                                 int threads = 0);

// G_r per touched row (rows ascending) and the fused optimizer update; advances state.step.
absl::Status EmbeddingBackwardStep(const EmbeddingConfig& config, EmbeddingState& state,
                                   const KeyedJaggedTensor& kjt, const EmbeddingGrads& grads,
                                   const SumPartition& partition = {}, int threads = 0);

// The row gradients of one table: touched rows ascending, each with its G_r [dim] (for tests and
// for sharded executors that update a subset of rows).
struct RowGradients {
  std::vector<int64_t> rows;
  std::vector<float> grads;  // [rows.size(), dim]
};
absl::StatusOr<std::vector<RowGradients>> EmbeddingRowGradients(const EmbeddingConfig& config,
                                                                const KeyedJaggedTensor& kjt,
                                                                const EmbeddingGrads& grads,
                                                                const SumPartition& partition = {});

// Applies one table's fused optimizer to the given rows (as EmbeddingBackwardStep does), with the
// SR stream of `step`; the rowwise-Adagrad square sum is partitioned over `norm_col_shards` equal
// column shards (1 = one block). Does not advance Adam's bias products (the caller does, once per step).
void ApplyOptimizer(const EmbeddingConfig& config, int table, TableState& state, const RowGradients& g,
                    int64_t step, int64_t norm_col_shards);

}  // namespace gemtb::reference

#endif  // GEMTB_REFERENCE_EMBEDDING_TBE_H_
