// MpGroup: construction, requester-side helpers and the forward (ids out, embeddings back).
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>

#include "reference/sharding/mp_group.h"

namespace gemtb::reference {
namespace {

template <typename F>
void ForEach(int n, F&& body) {
  tbb::parallel_for(0, n, [&](int i) { body(i); });
}

// The KJT key of local value index v.
int64_t KeyOfValue(const RankData& r, int64_t v) {
  const auto& off = r.layout.offsets;
  const int64_t bag = static_cast<int64_t>(std::upper_bound(off.begin(), off.end(), v) - off.begin()) - 1;
  return bag / r.kjt.stride;
}

int FeatureIndex(const TableFeatures& f, int64_t key) {
  return static_cast<int>(std::find(f.keys.begin(), f.keys.end(), key) - f.keys.begin());
}

}  // namespace

MpGroup::MpGroup(const GroupEnv& env, std::vector<RankData*> members, Collectives* collectives)
    : env_(env), members_(std::move(members)), coll_(collectives), traffic_(env.config->tables.size()) {}

std::vector<int> MpGroup::Ranks(const std::vector<int>& positions) const {
  std::vector<int> ranks;
  for (int p : positions) ranks.push_back(members_[p]->rank);
  return ranks;
}

int MpGroup::HolderIndex(int table, int position) const {
  const std::vector<int>& h = traffic_[table].holders;
  return static_cast<int>(std::find(h.begin(), h.end(), position) - h.begin());
}

void MpGroup::PlacePooled(int position, int table, const Shard& shard, const float* values) {
  const TableFeatures& tf = env_.features[table];
  EmbeddingOutput& out = members_[position]->output;
  const int64_t cols = shard.cols();
  for (int64_t b = 0; b < env_.local_batch; ++b) {
    for (int fi = 0; fi < tf.size(); ++fi) {
      if (tf.pooled_index[fi] < 0) continue;
      const float* src = values + (b * tf.num_pooled + tf.pooled_index[fi]) * cols;
      float* dst = out.pooled.data() + b * out.pooled_width + tf.output_col[fi] + shard.col_begin;
      std::copy(src, src + cols, dst);
    }
  }
}

int64_t MpGroup::PlaceSequence(int position, int table, int holder, const Shard& shard, const float* rows) {
  const TableFeatures& tf = env_.features[table];
  const RankData& r = *members_[position];
  EmbeddingOutput& out = members_[position]->output;
  const int64_t dim = env_.config->tables[table].dim;
  const int64_t cols = shard.cols();
  int64_t k = 0;
  for (int64_t v : traffic_[table].sent[position][holder]) {
    const int64_t key = KeyOfValue(r, v);
    const int fi = FeatureIndex(tf, key);
    if (tf.pooling[fi] != Pooling::kNone) continue;
    float* dst = out.sequence[tf.output_sequence[fi]].data() + (v - r.layout.offsets[key * r.kjt.stride]) * dim;
    std::copy(rows + k * cols, rows + (k + 1) * cols, dst + shard.col_begin);
    ++k;
  }
  return k;
}

void MpGroup::ApplyMean(int position) {
  RankData& r = *members_[position];
  for (size_t t = 0; t < env_.features.size(); ++t) {
    const TableFeatures& tf = env_.features[t];
    const TableConfig& tc = env_.config->tables[t];
    for (int fi = 0; fi < tf.size(); ++fi) {
      if (tf.pooling[fi] != Pooling::kMean) continue;
      for (int64_t b = 0; b < r.kjt.stride; ++b) {
        const int64_t bag = tf.keys[fi] * r.kjt.stride + b;
        int64_t n = 0;
        for (int64_t v = r.layout.offsets[bag]; v < r.layout.offsets[bag + 1]; ++v)
          n += RowOfId(tc, r.kjt.values[v]) >= 0;
        float* dst = r.output.pooled.data() + b * r.output.pooled_width + tf.output_col[fi];
        for (int64_t j = 0; j < tc.dim; ++j) dst[j] = n == 0 ? 0.0f : embedding::DivRn(dst[j], static_cast<float>(n));
      }
    }
  }
}

absl::Status MpGroup::ExchangeIds() {
  const GroupLayout& layout = *env_.layout;
  const int m = static_cast<int>(members_.size());
  std::vector<int> all(m);
  for (int p = 0; p < m; ++p) all[p] = p;
  for (size_t t = 0; t < env_.features.size(); ++t) {
    const TableFeatures& tf = env_.features[t];
    const TableLayout& tl = layout.tables[t];
    const TableConfig& tc = env_.config->tables[t];
    TableTraffic& tr = traffic_[t];
    tr = TableTraffic{};
    if (tf.size() == 0) continue;
    if (tl.type == ShardingType::kDataParallel) {
      tr.holders = all;
      tr.sent.assign(m, std::vector<std::vector<int64_t>>(m));
      tr.received.assign(m, std::vector<TableIds>(m));
      ForEach(m, [&](int p) {
        if (!Mine(p)) return;
        tr.received[p][p] = SelectTableIds(members_[p]->kjt, members_[p]->layout, tc, tf, RowFilter{}, &tr.sent[p][p]);
      });
      continue;
    }
    tr.holders = layout.Holders(static_cast<int>(t));
    const int holders = static_cast<int>(tr.holders.size());
    std::vector<RowFilter> filter(holders);
    for (int h = 0; h < holders; ++h) {
      if (tl.block_rows == 0) continue;
      const Shard& s = layout.shards[layout.ShardsOn(static_cast<int>(t), tr.holders[h])[0]];
      filter[h] = RowFilter{false, s.row_begin, s.row_end};
    }
    tr.sent.assign(m, std::vector<std::vector<int64_t>>(holders));
    ExchangeBuffers<uint8_t> send(m, std::vector<std::vector<uint8_t>>(m));
    ForEach(m, [&](int p) {
      if (!Mine(p)) return;
      for (int h = 0; h < holders; ++h) {
        send[p][tr.holders[h]] =
            SerializeTableIds(SelectTableIds(members_[p]->kjt, members_[p]->layout, tc, tf, filter[h], &tr.sent[p][h]));
      }
    });
    absl::StatusOr<ExchangeBuffers<uint8_t>> recv_or =
        coll_->AllToAll<uint8_t>(GroupClass::kSparseMp, Ranks(all), send, 1);
    if (!recv_or.ok()) return recv_or.status();
    const ExchangeBuffers<uint8_t>& recv = *recv_or;
    tr.received.assign(holders, std::vector<TableIds>(m));
    for (int h = 0; h < holders; ++h) {
      if (!Mine(tr.holders[h])) continue;
      for (int p = 0; p < m; ++p) {
        absl::StatusOr<TableIds> ids =
            DeserializeTableIds(recv[tr.holders[h]][p], tf.size(), env_.local_batch, env_.weighted);
        if (!ids.ok()) return ids.status();
        tr.received[h][p] = *std::move(ids);
      }
    }
  }
  return absl::OkStatus();
}

void MpGroup::ForwardDataParallel(int table) {
  const GroupLayout& layout = *env_.layout;
  const TableConfig& tc = env_.config->tables[table];
  ForEach(static_cast<int>(members_.size()), [&](int p) {
    if (!Mine(p)) return;
    const int id = layout.tables[table].shards[p];
    const Shard& shard = layout.shards[id];
    std::vector<float> pooled, sequence;
    LookupShard(tc, env_.features[table], shard, members_[p]->shards[id].weights, traffic_[table].received[p][p],
                &pooled, &sequence);
    PlacePooled(p, table, shard, pooled.data());
    PlaceSequence(p, table, p, shard, sequence.data());
  });
}

absl::Status MpGroup::ReturnPooledToRequesters(int table, std::vector<std::vector<std::vector<float>>>& pooled) {
  const GroupLayout& layout = *env_.layout;
  const TableLayout& tl = layout.tables[table];
  const TableTraffic& tr = traffic_[table];
  const int m = static_cast<int>(members_.size());
  const int64_t per_col = env_.local_batch * env_.features[table].num_pooled;  // pi / (D * e_a)
  std::vector<int> all(m);
  for (int p = 0; p < m; ++p) all[p] = p;
  auto table_shard = [&](int si) -> const Shard& { return layout.shards[tl.shards[si]]; };
  auto ordinal = [&](int id) {
    return static_cast<int>(std::find(tl.shards.begin(), tl.shards.end(), id) - tl.shards.begin());
  };
  switch (tl.type) {
    case ShardingType::kTableWise:
    case ShardingType::kColumnWise: {
      ExchangeBuffers<float> send(m, std::vector<std::vector<float>>(m));
      for (int q : tr.holders) {
        if (!Mine(q)) continue;
        for (int id : layout.ShardsOn(table, q)) {
          for (int p = 0; p < m; ++p) {
            const std::vector<float>& v = pooled[ordinal(id)][p];
            send[q][p].insert(send[q][p].end(), v.begin(), v.end());
          }
        }
      }
      absl::StatusOr<ExchangeBuffers<float>> recv_or =
          coll_->AllToAll<float>(GroupClass::kSparseMp, Ranks(all), send, env_.activation_bytes);
      if (!recv_or.ok()) return recv_or.status();
      const ExchangeBuffers<float>& recv = *recv_or;
      ForEach(m, [&](int p) {
        if (!Mine(p)) return;
        for (int q : tr.holders) {
          int64_t at = 0;
          for (int id : layout.ShardsOn(table, q)) {
            PlacePooled(p, table, layout.shards[id], recv[p][q].data() + at);
            at += per_col * layout.shards[id].cols();
          }
        }
      });
      break;
    }
    case ShardingType::kRowWise: {
      MemberBuffers<float> buffers(m);
      for (int q = 0; q < m; ++q) {
        if (!Mine(q)) continue;
        const int si = ordinal(layout.ShardsOn(table, q)[0]);
        for (int p = 0; p < m; ++p) buffers[q].insert(buffers[q].end(), pooled[si][p].begin(), pooled[si][p].end());
      }
      const int64_t chunk = per_col * env_.config->tables[table].dim;
      absl::StatusOr<MemberBuffers<float>> reduced_or = coll_->ReduceScatter(
          GroupClass::kSparseMp, Ranks(all), buffers, std::vector<int64_t>(m, chunk), env_.activation_bytes);
      if (!reduced_or.ok()) return reduced_or.status();
      const MemberBuffers<float>& reduced = *reduced_or;
      ForEach(m, [&](int p) {
        if (Mine(p)) PlacePooled(p, table, table_shard(0), reduced[p].data());
      });
      break;
    }
    case ShardingType::kTableRowWise:
    case ShardingType::kGrid: {
      const int g = layout.host_positions;
      const int hosts = layout.hosts();
      for (int i = 0; i < tl.col_shards; ++i) {
        const int host = tl.col_shard_host[i];
        const Shard& cs = table_shard(i * g);
        const int64_t pi = per_col * cs.cols();
        // RS(g) inside the host: member k's buffer lists requesters by local index, then host.
        std::vector<int> host_positions(g);
        MemberBuffers<float> buffers(g);
        for (int k = 0; k < g; ++k) {
          host_positions[k] = host * g + k;
          if (!Mine(host_positions[k])) continue;
          for (int k2 = 0; k2 < g; ++k2) {
            for (int h2 = 0; h2 < hosts; ++h2) {
              const std::vector<float>& v = pooled[i * g + k][h2 * g + k2];
              buffers[k].insert(buffers[k].end(), v.begin(), v.end());
            }
          }
        }
        absl::StatusOr<MemberBuffers<float>> reduced_or =
            coll_->ReduceScatter(GroupClass::kSparseMp, Ranks(host_positions), buffers,
                                 std::vector<int64_t>(g, hosts * pi), env_.activation_bytes);
        if (!reduced_or.ok()) return reduced_or.status();
        const MemberBuffers<float>& reduced = *reduced_or;
        // A2A over the ranks of one local index: the table's host sends each requester its part.
        for (int k2 = 0; k2 < g; ++k2) {
          std::vector<int> same_index(hosts);
          ExchangeBuffers<float> send(hosts, std::vector<std::vector<float>>(hosts));
          for (int h2 = 0; h2 < hosts; ++h2) {
            same_index[h2] = h2 * g + k2;
            if (Mine(host * g + k2))
              send[host][h2].assign(reduced[k2].begin() + h2 * pi, reduced[k2].begin() + (h2 + 1) * pi);
          }
          absl::StatusOr<ExchangeBuffers<float>> recv_or =
              coll_->AllToAll<float>(GroupClass::kSparseMp, Ranks(same_index), send, env_.activation_bytes);
          if (!recv_or.ok()) return recv_or.status();
          const ExchangeBuffers<float>& recv = *recv_or;
          for (int h2 = 0; h2 < hosts; ++h2)
            if (Mine(h2 * g + k2)) PlacePooled(h2 * g + k2, table, cs, recv[h2][host].data());
        }
      }
      break;
    }
    case ShardingType::kDataParallel:
      break;
  }
  return absl::OkStatus();
}

absl::Status MpGroup::LookupAndReturn() {
  const GroupLayout& layout = *env_.layout;
  const int m = static_cast<int>(members_.size());
  std::vector<int> all(m);
  for (int p = 0; p < m; ++p) all[p] = p;
  ForEach(m, [&](int p) {
    if (!Mine(p)) return;
    RankData& r = *members_[p];
    EmbeddingOutput out;
    out.pooled_width = env_.pooled_width;
    out.pooled.assign(static_cast<size_t>(env_.local_batch * env_.pooled_width), 0.0f);
    for (int64_t f = 0; f < r.kjt.NumKeys(); ++f) {
      const FeatureConfig& fc = env_.config->features[r.layout.feature[f]];
      if (fc.pooling != Pooling::kNone) continue;
      out.sequence_keys.push_back(static_cast<int>(f));
      const int64_t n = r.layout.offsets[(f + 1) * r.kjt.stride] - r.layout.offsets[f * r.kjt.stride];
      out.sequence.emplace_back(static_cast<size_t>(n * env_.config->tables[fc.table].dim), 0.0f);
    }
    r.output = std::move(out);
  });
  for (int t = 0; t < static_cast<int>(env_.features.size()); ++t) {
    const TableFeatures& tf = env_.features[t];
    const TableLayout& tl = layout.tables[t];
    if (tf.size() == 0) continue;
    if (tl.type == ShardingType::kDataParallel) {
      ForwardDataParallel(t);
      continue;
    }
    const TableTraffic& tr = traffic_[t];
    const int shards = static_cast<int>(tl.shards.size());
    std::vector<std::vector<std::vector<float>>> pooled(shards, std::vector<std::vector<float>>(m));
    std::vector<std::vector<std::vector<float>>> sequence(shards, std::vector<std::vector<float>>(m));
    ForEach(shards, [&](int si) {
      const Shard& s = layout.shards[tl.shards[si]];
      if (!Mine(s.position)) return;
      const int h = HolderIndex(t, s.position);
      for (int p = 0; p < m; ++p) {
        LookupShard(env_.config->tables[t], tf, s, members_[s.position]->shards[tl.shards[si]].weights,
                    tr.received[h][p], &pooled[si][p], &sequence[si][p]);
      }
    });
    if (tf.num_pooled > 0) {
      absl::Status s = ReturnPooledToRequesters(t, pooled);
      if (!s.ok()) return s;
    }
    if (tf.num_sequence > 0) {
      ExchangeBuffers<float> send(m, std::vector<std::vector<float>>(m));
      for (int si = 0; si < shards; ++si) {
        const int q = layout.shards[tl.shards[si]].position;
        if (!Mine(q)) continue;
        for (int p = 0; p < m; ++p) send[q][p].insert(send[q][p].end(), sequence[si][p].begin(), sequence[si][p].end());
      }
      absl::StatusOr<ExchangeBuffers<float>> recv_or =
          coll_->AllToAll<float>(GroupClass::kSparseMp, Ranks(all), send, env_.activation_bytes);
      if (!recv_or.ok()) return recv_or.status();
      const ExchangeBuffers<float>& recv = *recv_or;
      ForEach(m, [&](int p) {
        if (!Mine(p)) return;
        for (int h = 0; h < static_cast<int>(tr.holders.size()); ++h) {
          const int q = tr.holders[h];
          int64_t at = 0;
          for (int id : layout.ShardsOn(t, q))
            at += PlaceSequence(p, t, h, layout.shards[id], recv[p][q].data() + at) * layout.shards[id].cols();
        }
      });
    }
  }
  ForEach(m, [&](int p) {
    if (Mine(p)) ApplyMean(p);
  });
  return absl::OkStatus();
}

std::vector<int64_t> MpGroup::NeededRows(int shard) const {
  const Shard& s = env_.layout->shards[shard];
  const TableTraffic& tr = traffic_[s.table];
  std::vector<int64_t> rows;
  if (tr.holders.empty()) return rows;
  const TableConfig& tc = env_.config->tables[s.table];
  auto add = [&](const TableIds& ids) {
    for (int64_t id : ids.values) {
      const int64_t row = RowOfId(tc, id);
      if (row >= s.row_begin && row < s.row_end) rows.push_back(row);
    }
  };
  if (env_.layout->tables[s.table].type == ShardingType::kDataParallel) {
    // Every copy applies the group's all-reduced gradient: it needs the rows of every member's ids.
    for (size_t p = 0; p < members_.size(); ++p) add(tr.received[p][p]);
  } else {
    for (const TableIds& ids : tr.received[HolderIndex(s.table, s.position)]) add(ids);
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

}  // namespace gemtb::reference
