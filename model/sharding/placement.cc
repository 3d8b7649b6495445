#include "model/sharding/placement.h"

#include <algorithm>
#include <cmath>

namespace gemtb {

double HottestIdShare(int64_t rows, double zipf_s) {
  const double n = static_cast<double>(std::max<int64_t>(rows, 1));
  if (n <= 1) return 1.0;
  if (std::fabs(zipf_s - 1.0) < 1e-12) return std::log(2.0) / std::log(n + 1.0);
  const double a = 1.0 - zipf_s;
  return std::expm1(a * std::log(2.0)) / std::expm1(a * std::log(n + 1.0));
}

int TableWisePosition(const TableSharding& sharding, int table_index, int mp_group) {
  return sharding.owner >= 0 ? sharding.owner % mp_group : table_index % mp_group;
}

int ColumnShardPosition(int table_index, int shard, int mp_group) { return (table_index + shard) % mp_group; }

int ColumnShardHost(int table_index, int shard, int hosts) { return (table_index + shard) % hosts; }

int HostBlockPosition(int host, int block, int host_positions) { return host * host_positions + block; }

namespace {

// Table-row-wise placement of `share` of a table on host `host`: g row blocks on its positions, the
// hot id's block first.
void AddTableRowWise(double share, int host, int g, double hot_share, PositionShares& out) {
  for (int k = 0; k < g; ++k) {
    const double cold = share * (1.0 - hot_share) / g;
    out.points.emplace_back(HostBlockPosition(host, k, g), cold + (k == 0 ? share * hot_share : 0.0));
  }
}

}  // namespace

PositionShares TablePositionShares(const TableSharding& sharding, int table_index, int mp_group, int host_positions,
                                   double hot_share) {
  const int M = std::max(1, mp_group);
  const int g = std::max(1, host_positions);
  const int H = std::max(1, M / g);
  const int t = std::max(0, table_index);
  PositionShares s;
  switch (sharding.type) {
    case ShardingType::kDataParallel:
      break;
    case ShardingType::kTableWise:
      s.points.emplace_back(TableWisePosition(sharding, t, M), 1.0);
      break;
    case ShardingType::kColumnWise: {
      const int c = std::max(1, sharding.shards);
      for (int i = 0; i < c; ++i) {
        const size_t k = static_cast<size_t>(i);
        s.points.emplace_back(k < sharding.ranks.size() ? sharding.ranks[k] % M : ColumnShardPosition(t, i, M), 1.0 / c);
      }
      break;
    }
    case ShardingType::kRowWise:
      s.spread = 1.0 - hot_share;
      s.points.emplace_back(t % M, hot_share);
      break;
    case ShardingType::kTableRowWise:
      AddTableRowWise(1.0, sharding.ranks.empty() ? ColumnShardHost(t, 0, H) : (sharding.ranks.front() % M) / g, g,
                      hot_share, s);
      break;
    case ShardingType::kGrid: {
      const int c = std::max(1, sharding.shards);
      for (int i = 0; i < c; ++i) AddTableRowWise(1.0 / c, ColumnShardHost(t, i, H), g, hot_share, s);
      break;
    }
  }
  return s;
}

double MaxOverMeanLoad(const std::vector<std::pair<double, const PositionShares*>>& tables, int mp_group) {
  const int M = std::max(1, mp_group);
  std::vector<double> load(static_cast<size_t>(M), 0.0);
  double spread = 0, total = 0;
  for (const auto& [bytes, shares] : tables) {
    spread += bytes * shares->spread;
    total += bytes * shares->spread;
    for (const auto& [position, share] : shares->points) {
      load[static_cast<size_t>(position)] += bytes * share;
      total += bytes * share;
    }
  }
  if (!(total > 0)) return 1.0;
  const double mean = total / M;
  const double max = *std::max_element(load.begin(), load.end()) + spread / M;
  return std::max(1.0, max / mean);
}

}  // namespace gemtb
