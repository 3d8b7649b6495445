// Which MP-group positions serve each table's lookups, as shares of the table's id and embedding
// traffic. The placement rules below are defined here once; reference/sharding's layout places its
// shards with the same functions:
//   DP    every position holds a copy and serves its own lookups: no traffic;
//   TW    the whole table on `owner` (default: table index mod M);
//   CW    c column shards, shard i on position (t + i) mod M, each serving 1/c of the table's bytes;
//   RW    M row blocks, block s on position s;
//   TWRW  the table on host t mod H (H = M / g), its rows in g blocks on that host's g positions;
//   GRID  c column shards, shard i placed TWRW on host (t + i) mod H.
// A TorchRec plan's ranks (TableSharding::ranks) replace the default position: CW's shard i on
// ranks[i], TWRW on the host of ranks[0].
// Row-split types (RW, TWRW, GRID) see hot ids: ids spread over the rows by a keyed bijection of
// their popularity rank (the data generator's rule), so every block gets an even share of the cold
// ids and one block also holds the hottest id. Its mass under Zipf(s) on `rows` ranks (the
// generator's continuous law) is p1 = (2^(1-s) - 1) / ((rows + 1)^(1-s) - 1), ln 2 / ln(rows + 1) at
// s = 1, 1/rows at s = 0; that block is the table's first (position t mod M for RW). This is a lower
// bound on the hottest block's share (the next ids may land there too).
#ifndef GEMTB_MODEL_SHARDING_PLACEMENT_H_
#define GEMTB_MODEL_SHARDING_PLACEMENT_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "model/sharding/sharding_types.h"

namespace gemtb {

// The placement rules, for table `table_index` in an MP group of `mp_group` positions, `host_positions`
// of them per host (hosts = mp_group / host_positions):
// TW: the owner position (`sharding.owner` when set, else table index mod M).
int TableWisePosition(const TableSharding& sharding, int table_index, int mp_group);
// CW: the position of column shard `shard`, (t + shard) mod M.
int ColumnShardPosition(int table_index, int shard, int mp_group);
// TWRW and GRID: the host of column shard `shard` (0 for TWRW), (t + shard) mod hosts.
int ColumnShardHost(int table_index, int shard, int hosts);
// TWRW and GRID: the position of row block `block` on host `host`. (RW's block s is on position s.)
int HostBlockPosition(int host, int block, int host_positions);

// A table's traffic over the M positions of its MP group: `spread` of it evenly over all positions,
// the rest in point masses. spread + sum of the points = 1 (0 for DP: no traffic).
struct PositionShares {
  double spread = 0;
  std::vector<std::pair<int, double>> points;  // (position, share)
};

// The share of the table's lookups its hottest id draws under Zipf(zipf_s) on `rows` ranks.
double HottestIdShare(int64_t rows, double zipf_s);

// Where table `table_index`'s traffic goes in an MP group of `mp_group` positions, `host_positions`
// (g) of them per host; `hot_share` is HottestIdShare of the table (row-split types only).
PositionShares TablePositionShares(const TableSharding& sharding, int table_index, int mp_group, int host_positions,
                                   double hot_share);

// The per-position load of a set of tables, each with its traffic (bytes) and shares: the maximum
// position's load over the mean position's (>= 1; 1 when there is no traffic). This is the factor by
// which the slowest member of an all-to-allv exceeds the uniform share.
double MaxOverMeanLoad(const std::vector<std::pair<double, const PositionShares*>>& tables, int mp_group);

}  // namespace gemtb

#endif  // GEMTB_MODEL_SHARDING_PLACEMENT_H_
