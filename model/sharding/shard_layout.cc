#include "model/sharding/shard_layout.h"

#include <algorithm>

#include "model/common/status_macros.h"
#include "model/sharding/placement.h"
#include "model/sharding/sharding_plan_json.h"

namespace gemtb {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

std::vector<int> GroupLayout::ShardsOn(int table, int position) const {
  std::vector<int> out;
  for (int s : tables[table].shards) {
    if (shards[s].position == position) out.push_back(s);
  }
  return out;
}

std::vector<int> GroupLayout::Holders(int table) const {
  std::vector<int> out;
  for (int s : tables[table].shards) {
    if (std::find(out.begin(), out.end(), shards[s].position) == out.end()) out.push_back(shards[s].position);
  }
  return out;
}

absl::StatusOr<GroupLayout> BuildGroupLayout(const ShardingPlanSpec& plan, const EmbeddingConfig& config,
                                             int world_size, int gpus_per_host) {
  GEMTB_RETURN_IF_ERROR(ValidateShardingPlan(plan, PlanTablesOf(config), world_size, gpus_per_host));
  GroupLayout g;
  g.size = MpGroupSize(plan, world_size);
  bool hosts_needed = false;
  for (const TableSharding& s : plan.tables) {
    hosts_needed |= s.type == ShardingType::kTableRowWise || s.type == ShardingType::kGrid;
  }
  if (hosts_needed) {
    absl::StatusOr<int> per_host = HostGroupPositions(g.size, ReplicaCount(plan, world_size), gpus_per_host);
    if (!per_host.ok()) return per_host.status();
    g.host_positions = *per_host;
  }
  const int m = g.size;
  for (size_t t = 0; t < config.tables.size(); ++t) {
    const TableConfig& tc = config.tables[t];
    const TableSharding& ts = plan.tables[t];
    TableLayout tl;
    tl.type = ts.type;
    const int ti = static_cast<int>(t);
    auto add = [&](int position, int col_shard, int row_block, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
      tl.shards.push_back(static_cast<int>(g.shards.size()));
      g.shards.push_back(
          Shard{ti, position, col_shard, row_block, std::min(r0, tc.rows), std::min(r1, tc.rows), c0, c1});
    };
    switch (ts.type) {
      case ShardingType::kDataParallel:
        for (int p = 0; p < m; ++p) add(p, 0, 0, 0, tc.rows, 0, tc.dim);
        break;
      case ShardingType::kTableWise:
        add(TableWisePosition(ts, ti, m), 0, 0, 0, tc.rows, 0, tc.dim);
        break;
      case ShardingType::kColumnWise: {
        tl.col_shards = ts.shards;
        const int64_t w = tc.dim / ts.shards;
        for (int i = 0; i < ts.shards; ++i) add(ColumnShardPosition(ti, i, m), i, 0, 0, tc.rows, i * w, (i + 1) * w);
        break;
      }
      case ShardingType::kRowWise:
        tl.row_blocks = m;
        tl.block_rows = CeilDiv(tc.rows, m);
        for (int s = 0; s < m; ++s) add(s, 0, s, s * tl.block_rows, (s + 1) * tl.block_rows, 0, tc.dim);
        break;
      case ShardingType::kTableRowWise:
      case ShardingType::kGrid: {
        const int per_host = g.host_positions;
        const int c = ts.type == ShardingType::kGrid ? ts.shards : 1;
        const int64_t w = tc.dim / c;
        tl.col_shards = c;
        tl.row_blocks = per_host;
        tl.block_rows = CeilDiv(tc.rows, per_host);
        for (int i = 0; i < c; ++i) {
          const int host = ColumnShardHost(ti, i, g.hosts());
          tl.col_shard_host.push_back(host);
          for (int k = 0; k < per_host; ++k) {
            add(HostBlockPosition(host, k, per_host), i, k, k * tl.block_rows, (k + 1) * tl.block_rows, i * w,
                (i + 1) * w);
          }
        }
        break;
      }
    }
    g.tables.push_back(std::move(tl));
  }
  return g;
}

}  // namespace gemtb
