// Where each piece of each table lives inside one MP group: the placement of a sharding plan
// as shards (rectangles of rows and columns on MP-group positions), the layout every executor of
// a plan shares (reference/ runs it exactly, gpu/ runs it on devices).
//
// Placement, in MP-group positions 0..M-1 (M = world_size for 1D sharding):
//   DP    a full copy on every position;
//   TW    all of table t on `owner` (default t mod M);
//   CW    c column shards of D/c columns, shard i on position (t + i) mod M;
//   RW    M row blocks of ceil(N_t / M) rows, block s on position s (trailing blocks may be empty);
//   TWRW  hosts of g consecutive positions (H = M / g hosts); table t on host t mod H, its rows in
//         g blocks of ceil(N_t / g), block k on position host*g + k;
//   GRID  c column shards, shard i placed TWRW on host (t + i) mod H.
// Every table's shard list is ordered by column shard, then row block (DP: by position), and the
// group's shards are numbered table by table in that order.
#ifndef GEMTB_MODEL_SHARDING_SHARD_LAYOUT_H_
#define GEMTB_MODEL_SHARDING_SHARD_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "model/embedding/embedding_config.h"
#include "model/sharding/sharding_types.h"

namespace gemtb {

// One rectangle of one table on one position: global rows [row_begin, row_end), global columns
// [col_begin, col_end).
struct Shard {
  int table = 0;
  int position = 0;
  int col_shard = 0;
  int row_block = 0;
  int64_t row_begin = 0, row_end = 0;
  int64_t col_begin = 0, col_end = 0;

  int64_t rows() const { return row_end - row_begin; }
  int64_t cols() const { return col_end - col_begin; }
};

struct TableLayout {
  ShardingType type = ShardingType::kTableWise;
  int col_shards = 1;               // c
  int row_blocks = 1;               // RW: M; TWRW, GRID: g; else 1
  int64_t block_rows = 0;           // rows per block; 0 = no row split
  std::vector<int> col_shard_host;  // TWRW, GRID: host of each column shard
  std::vector<int> shards;          // indices into GroupLayout::shards
};

struct GroupLayout {
  int size = 1;            // M
  int host_positions = 1;  // g: consecutive positions per host (TWRW, GRID)
  std::vector<Shard> shards;
  std::vector<TableLayout> tables;

  int hosts() const { return size / host_positions; }
  // Shards of `table` held by `position`, in the table's shard order.
  std::vector<int> ShardsOn(int table, int position) const;
  // The distinct positions holding shards of `table`, in the order of their first shard.
  std::vector<int> Holders(int table) const;
};

// Placement of a validated plan inside one MP group.
absl::StatusOr<GroupLayout> BuildGroupLayout(const ShardingPlanSpec& plan, const EmbeddingConfig& config,
                                             int world_size, int gpus_per_host);

}  // namespace gemtb

#endif  // GEMTB_MODEL_SHARDING_SHARD_LAYOUT_H_
