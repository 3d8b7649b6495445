// The host side of a sharded embedding module on GPUs (sharded_tbe.h): which ids a rank sends to
// each holder, the KJT each held shard runs as a one-table module of its own, and the copy and sum
// plans that carry embeddings back to the requesters and gradients to the holders. No CUDA here:
// plans are offsets into numbered arrays, so the CPU tests run them too.
//
// The placement is model/sharding's (the oracle's), and the arithmetic is the oracle's sharded
// executor's (reference/sharding): a holder pools its rows of a bag (MEAN as SUM), the requester
// adds a bag's row-block pieces in block order (an empty piece is +0) and divides MEAN by the bag's
// valid ids n; backward, the requester sends gamma (gamma / n for MEAN with n > 0) and the holder
// sums G_r over sources in rank order, each source's block of samples first (TbeOptions::batch_block).
//
// What moves, per step, inside one MP group of M positions with local batch b:
//   ids         one all-to-all of bytes: to each holder, per table it holds (config order), the
//               table's slice of the local KJT (int32 lengths [F_t * b], int64 ids, fp32 weights when
//               a feature is weighted), bucketed by row block for RW, TWRW and GRID: the oracle's kappa;
//   embeddings  one all-to-all of floats, holder q to requester p: per held shard (group order) its
//               pooled rows of p's samples [b, F_pooled * cols], then per held shard and NONE feature
//               the rows of the ids p sent;
//   gradients   the same layout from requester to holder.
// Row-wise types send every row block's partial pool straight to the requester (an all-to-all
// instead of the oracle's reduce-scatter: the same bytes per rank, and the requester's sum keeps the
// oracle's block order).
#ifndef GEMTB_GPU_EMBEDDING_SHARD_ROUTING_H_
#define GEMTB_GPU_EMBEDDING_SHARD_ROUTING_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "gpu/embedding/api.h"
#include "gpu/embedding/kjt_check.h"
#include "model/embedding/embedding_config.h"
#include "model/sharding/shard_layout.h"
#include "model/sharding/sharding_types.h"

namespace gemtb::gpu::embedding {

// One table's features in the module's KJT (whose keys are the config's features, in order).
struct RoutedTable {
  std::vector<int> keys;             // feature indices, in key order
  std::vector<int> pooled_index;     // per feature: ordinal among the table's pooled features, or -1
  std::vector<int64_t> output_col;   // pooled features: first column in the requester's [b, W] output
  std::vector<int> output_sequence;  // NONE features: index among the module's NONE keys, else -1
  int num_pooled = 0;
};

// A shard this position holds, run as a one-table module: the rectangle as a table of its rows
// and columns (ids are shard rows: identity, bounds zero, -1 for an id that reads nothing), the
// table's features in key order (MEAN pooled as SUM: the requester divides).
struct HeldShard {
  int shard = 0;  // index into GroupLayout::shards
  int table = 0;
  EmbeddingConfig config;
  ShardPlacement placement;
  // Column shards sharing rowwise-Adagrad state: the update waits for the whole rows' square sums,
  // seqsums in column-shard order of the partial sums of the MP-group positions in `norm_group`.
  bool split_update = false;
  std::vector<int> norm_group;
};

// Where a held shard sits and the size of its one-table module: the shard's rows (one placeholder
// row for a trailing empty row block) and columns.
struct HeldShardShape {
  int shard = 0;  // index into GroupLayout::shards
  int table = 0;
  int64_t rows = 0;
  int64_t cols = 0;
};

// `rows` rows of `count` floats copied from array `src_array` at `src` to `dst_array` at `dst`,
// row r at src + r * src_stride and dst + r * dst_stride, or, with dst_rows >= 0, at the plan's
// row offsets[dst_rows + r] (arrays are numbered by the plan that makes the run). `first_row`
// numbers the rows of a plan's runs consecutively (NumberRows), so a kernel gives each row of every
// run a warp.
struct CopyRun {
  int32_t src_array = 0;
  int32_t dst_array = 0;
  int64_t src = 0;
  int64_t dst = 0;
  int64_t count = 0;
  int64_t rows = 1;
  int64_t src_stride = 0;
  int64_t dst_stride = 0;
  int64_t dst_rows = -1;
  int64_t first_row = 0;
};

// Sets every run's first_row; returns the rows of all of them.
int64_t NumberRows(std::vector<CopyRun>& runs);

// The requester's pooled output [b, W] from (forward) or into (backward) the exchange buffer of
// embeddings: `width` columns at `out_col` are the seqsum over `pieces` (row blocks in order) of
// buffer elements offset + b*stride + j; a MEAN key's columns are then divided by its bag's n.
struct PooledPiece {
  int64_t offset = 0;
  int64_t stride = 0;
};
struct PooledSegment {
  int64_t out_col = 0;
  int64_t width = 0;
  int mean_key = -1;  // the MEAN key whose n divides, or -1
  int first_piece = 0;
  int num_pieces = 0;
};

// What one step's requester side knows after routing its ids.
struct RequesterStep {
  // The ids' all-to-all as it sends them: every destination's bytes, in position order, and the
  // byte counts per destination.
  std::vector<uint8_t> id_bytes;
  std::vector<int64_t> id_counts;
  std::vector<int32_t> bag_counts;             // [num_keys * b]: valid ids per bag (MEAN's n)
  // Embeddings exchange: floats from (forward) / to (backward) each holder position.
  std::vector<int64_t> exchange_counts;
  std::vector<PooledSegment> segments;
  std::vector<PooledPiece> pieces;
  // NONE rows between the exchange buffer (array 0) and the module's NONE outputs or gradients
  // (array 1 + index among the NONE keys), each `cols` floats at the holder's column offset: one
  // run per (holder shard, key), its rows placed through sequence_row_offsets where a row block got
  // only some of the key's ids. `sequence_rows`: their rows.
  std::vector<CopyRun> sequence_runs;
  std::vector<int64_t> sequence_row_offsets;
  int64_t sequence_rows = 0;

  // The bytes to destination position `q`.
  absl::Span<const uint8_t> IdBytesTo(int q) const;
};

// What one step's holder side builds from the ids it received.
struct HolderStep {
  // Per held shard: its KJT (batch M*b: source p's samples at [p*b, (p+1)*b)).
  struct ShardInput {
    std::vector<std::string> keys;
    std::vector<int32_t> lengths;
    std::vector<int64_t> values;
    std::vector<float> weights;
    bool weighted = false;
  };
  std::vector<ShardInput> inputs;
  // Embeddings exchange: floats to (forward) / from (backward) each source position.
  std::vector<int64_t> exchange_counts;
  // Between the held shards' outputs (forward) or gradients (backward) and the exchange buffer
  // (array 0): array 1 + i is held shard i's pooled [M*b, F_pooled * cols]; then come the held
  // shards' NONE features, shard by shard and in key order within one, each [values][cols].
  // `run_rows`: their rows.
  std::vector<CopyRun> runs;
  int64_t run_rows = 0;
};

class ShardRouting {
 public:
  // Position `position` of the plan's MP group (M = mp_group, or world_size for 1D; 2D plans run one
  // such group per replica); the module's KJTs have the config's features as keys, in order, and
  // `local_batch` samples.
  static absl::StatusOr<ShardRouting> Create(const EmbeddingConfig& config, const ShardingPlanSpec& plan,
                                             int world_size, int gpus_per_host, int position, int64_t local_batch);
  // The plan's MP-group layout, checked for what the module runs (no DP table, column shards of a
  // multiple of 4 columns, no position holding two column shards of one row block that share
  // rowwise-Adagrad state): Create's errors for the plan, without building a routing.
  static absl::StatusOr<GroupLayout> CheckedLayout(const EmbeddingConfig& config, const ShardingPlanSpec& plan,
                                                   int world_size, int gpus_per_host);
  // The shards position `position` of `layout` holds, in held()'s order (group order), as Create
  // runs them.
  static std::vector<HeldShardShape> HeldShapes(const GroupLayout& layout, int position);

  int position() const { return position_; }
  int group_size() const { return layout_.size; }
  int64_t pooled_width() const { return pooled_width_; }
  const std::vector<int>& sequence_keys() const { return sequence_keys_; }
  const GroupLayout& layout() const { return layout_; }
  const std::vector<HeldShard>& held() const { return held_; }

  // Requester: this position's ids to every holder and the plans for what comes back. `kjt` is the
  // local batch (validated against the config by the caller).
  absl::StatusOr<RequesterStep> RouteIds(const KjtView& kjt, const KjtLayout& layout) const;
  // Holder: the held shards' KJTs from the bytes each source sent (position order), and the plans
  // between their outputs and the exchange buffer. Names the source and table of a malformed message.
  absl::StatusOr<HolderStep> ReceiveIds(absl::Span<const absl::Span<const uint8_t>> received) const;

 private:
  ShardRouting() = default;
  // The holders (positions, in the order of their first shard) of table `t`.
  const std::vector<int>& Holders(int t) const { return holders_[t]; }

  EmbeddingConfig config_;
  GroupLayout layout_;
  int position_ = 0;
  int64_t local_batch_ = 0;
  int64_t pooled_width_ = 0;
  bool weighted_ = false;
  std::vector<RoutedTable> tables_;
  std::vector<std::vector<int>> holders_;
  std::vector<int> sequence_keys_;
  std::vector<int64_t> sequence_dim_;  // per NONE key: its table's D
  std::vector<HeldShard> held_;
};

}  // namespace gemtb::gpu::embedding

#endif  // GEMTB_GPU_EMBEDDING_SHARD_ROUTING_H_
