// MpGroup: the backward (gradients to the holders, G_r, fused optimizer).
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>

#include "reference/sharding/mp_group.h"

namespace gemtb::reference {
namespace {

template <typename F>
void ForEach(int n, F&& body) {
  tbb::parallel_for(0, n, [&](int i) { body(i); });
}

int64_t KeyOfValue(const RankData& r, int64_t v) {
  const auto& off = r.layout.offsets;
  const int64_t bag = static_cast<int64_t>(std::upper_bound(off.begin(), off.end(), v) - off.begin()) - 1;
  return bag / r.kjt.stride;
}

// Columns [c0, c1) of a [rows][dim] array.
std::vector<float> SliceCols(const std::vector<float>& a, int64_t dim, int64_t c0, int64_t c1) {
  std::vector<float> out;
  for (size_t at = 0; at < a.size(); at += static_cast<size_t>(dim)) {
    out.insert(out.end(), a.begin() + at + c0, a.begin() + at + c1);
  }
  return out;
}

void Append(std::vector<float>& dst, const std::vector<float>& src) { dst.insert(dst.end(), src.begin(), src.end()); }

}  // namespace

std::vector<float> MpGroup::PooledGrads(int position, int table) const {
  const RankData& r = *members_[position];
  const TableFeatures& tf = env_.features[table];
  const TableConfig& tc = env_.config->tables[table];
  std::vector<float> out(static_cast<size_t>(env_.local_batch * tf.num_pooled * tc.dim));
  for (int64_t b = 0; b < env_.local_batch; ++b) {
    for (int fi = 0; fi < tf.size(); ++fi) {
      if (tf.pooled_index[fi] < 0) continue;
      const int64_t bag = tf.keys[fi] * r.kjt.stride + b;
      int64_t n = 0;
      for (int64_t v = r.layout.offsets[bag]; v < r.layout.offsets[bag + 1]; ++v)
        n += RowOfId(tc, r.kjt.values[v]) >= 0;
      const float* src = r.grads.pooled.data() + b * env_.pooled_width + tf.output_col[fi];
      float* dst = out.data() + (b * tf.num_pooled + tf.pooled_index[fi]) * tc.dim;
      for (int64_t j = 0; j < tc.dim; ++j) {
        dst[j] = tf.pooling[fi] == Pooling::kMean && n > 0 ? embedding::DivRn(src[j], static_cast<float>(n)) : src[j];
      }
    }
  }
  return out;
}

std::vector<float> MpGroup::SequenceGrads(int position, int table, int holder, const Shard& shard) const {
  const RankData& r = *members_[position];
  const TableFeatures& tf = env_.features[table];
  const int64_t dim = env_.config->tables[table].dim;
  std::vector<float> out;
  for (int64_t v : traffic_[table].sent[position][holder]) {
    const int64_t key = KeyOfValue(r, v);
    const int fi = static_cast<int>(std::find(tf.keys.begin(), tf.keys.end(), key) - tf.keys.begin());
    if (tf.pooling[fi] != Pooling::kNone) continue;
    const float* src =
        r.grads.sequence[tf.output_sequence[fi]].data() + (v - r.layout.offsets[key * r.kjt.stride]) * dim;
    out.insert(out.end(), src + shard.col_begin, src + shard.col_end);
  }
  return out;
}

absl::Status MpGroup::UpdateShards(int table, std::vector<RowGradients>& grads, int64_t step) {
  const GroupLayout& layout = *env_.layout;
  const TableLayout& tl = layout.tables[table];
  const TableConfig& tc = env_.config->tables[table];
  const OptimizerConfig& o = tc.optimizer;
  const int shards = static_cast<int>(tl.shards.size());
  auto state = [&](int si) -> ShardState& {
    const int id = tl.shards[si];
    return members_[layout.shards[id].position]->shards[id];
  };
  std::vector<std::vector<float>> sums(shards);
  int64_t norm_dim = tc.dim;
  if (o.kind == OptimizerKind::kRowwiseAdagrad) {
    ForEach(shards, [&](int si) {
      if (Mine(layout.shards[tl.shards[si]].position))
        sums[si] = ShardSquareSums(o, layout.shards[tl.shards[si]], state(si), grads[si]);
    });
    const bool shared = env_.plan->cw_state == CwState::kShared;
    if (!shared) norm_dim = tc.dim / tl.col_shards;
    if (shared && tl.col_shards > 1) {
      // Per row block: all-gather the column shards' partial sums among their holders, then each
      // holder adds them up in column-shard order.
      for (int k = 0; k < tl.row_blocks; ++k) {
        std::vector<int> in_block, positions;
        for (int si = 0; si < shards; ++si) {
          const Shard& s = layout.shards[tl.shards[si]];
          if (s.row_block != k) continue;
          in_block.push_back(si);
          if (std::find(positions.begin(), positions.end(), s.position) == positions.end())
            positions.push_back(s.position);
        }
        MemberBuffers<float> chunks(positions.size());
        for (size_t mi = 0; mi < positions.size(); ++mi) {
          if (!Mine(positions[mi])) continue;
          for (int si : in_block) {
            if (layout.shards[tl.shards[si]].position == positions[mi]) Append(chunks[mi], sums[si]);
          }
        }
        absl::StatusOr<MemberBuffers<float>> gathered_or =
            coll_->AllGather<float>(GroupClass::kSparseMp, Ranks(positions), chunks, 4);
        if (!gathered_or.ok()) return gathered_or.status();
        const MemberBuffers<float>& gathered = *gathered_or;
        for (size_t mi = 0; mi < positions.size(); ++mi) {
          if (!Mine(positions[mi])) continue;
          // Every shard of the row block has the same touched rows.
          size_t rows = 0;
          for (int si : in_block)
            if (layout.shards[tl.shards[si]].position == positions[mi]) rows = grads[si].rows.size();
          // The gathered buffer lists members in group order, each member's shards in shard order.
          std::vector<const float*> partial(static_cast<size_t>(tl.col_shards), nullptr);
          size_t at = 0;
          for (int pos : positions) {
            for (int si : in_block) {
              if (layout.shards[tl.shards[si]].position != pos) continue;
              partial[layout.shards[tl.shards[si]].col_shard] = gathered[mi].data() + at;
              at += rows;
            }
          }
          std::vector<float> total(rows);
          for (size_t u = 0; u < rows; ++u) {
            SeqSum sum;
            for (const float* part : partial) sum.Add(part[u]);
            total[u] = sum.Get();
          }
          for (int si : in_block) {
            if (layout.shards[tl.shards[si]].position == positions[mi]) sums[si] = total;
          }
        }
      }
    }
  }
  ForEach(shards, [&](int si) {
    if (!Mine(layout.shards[tl.shards[si]].position)) return;
    ShardState& st = state(si);
    if (o.kind == OptimizerKind::kAdam) st.adam_step = embedding::NextAdamStep(st.adam_step, o);
    ApplyShardOptimizer(*env_.config, layout.shards[tl.shards[si]], st, grads[si], sums[si], norm_dim, step);
  });
  return absl::OkStatus();
}

absl::Status MpGroup::BackwardDataParallel(int table, int64_t step) {
  const GroupLayout& layout = *env_.layout;
  const TableLayout& tl = layout.tables[table];
  const TableConfig& tc = env_.config->tables[table];
  const int m = static_cast<int>(members_.size());
  std::vector<int> all(m);
  for (int p = 0; p < m; ++p) all[p] = p;
  MemberBuffers<float> dense(m), touched(m);
  ForEach(m, [&](int p) {
    if (!Mine(p)) return;
    const Shard& shard = layout.shards[tl.shards[p]];
    SourceGrads own{PooledGrads(p, table), SequenceGrads(p, table, p, shard)};
    const RowGradients local =
        ShardRowGradients(tc, env_.features[table], shard, {&traffic_[table].received[p][p], 1}, {&own, 1});
    dense[p].assign(static_cast<size_t>(tc.rows * tc.dim), 0.0f);
    touched[p].assign(static_cast<size_t>(tc.rows), 0.0f);
    for (size_t k = 0; k < local.rows.size(); ++k) {
      std::copy(local.grads.begin() + k * tc.dim, local.grads.begin() + (k + 1) * tc.dim,
                dense[p].begin() + local.rows[k] * tc.dim);
      touched[p][local.rows[k]] = 1.0f;
    }
  });
  absl::StatusOr<MemberBuffers<float>> sum_or = coll_->AllReduce(GroupClass::kSparseMp, Ranks(all), dense, 4);
  if (!sum_or.ok()) return sum_or.status();
  const MemberBuffers<float>& sum = *sum_or;
  absl::StatusOr<MemberBuffers<float>> count_or = coll_->AllReduce(GroupClass::kSparseMp, Ranks(all), touched, 4);
  if (!count_or.ok()) return count_or.status();
  const MemberBuffers<float>& count = *count_or;
  std::vector<RowGradients> grads(m);
  ForEach(m, [&](int p) {
    if (!Mine(p)) return;
    for (int64_t r = 0; r < tc.rows; ++r) {
      if (count[p][r] == 0.0f) continue;
      grads[p].rows.push_back(r);
      grads[p].grads.insert(grads[p].grads.end(), sum[p].begin() + r * tc.dim, sum[p].begin() + (r + 1) * tc.dim);
    }
  });
  return UpdateShards(table, grads, step);
}

absl::Status MpGroup::Backward(int64_t step) {
  const GroupLayout& layout = *env_.layout;
  const int m = static_cast<int>(members_.size());
  std::vector<int> all(m);
  for (int p = 0; p < m; ++p) all[p] = p;
  for (int t = 0; t < static_cast<int>(env_.features.size()); ++t) {
    const TableFeatures& tf = env_.features[t];
    const TableLayout& tl = layout.tables[t];
    const TableConfig& tc = env_.config->tables[t];
    const TableTraffic& tr = traffic_[t];
    const int shards = static_cast<int>(tl.shards.size());
    std::vector<RowGradients> grads(shards);
    if (tf.size() == 0) {  // no ids: nothing moves, only Adam's products advance
      absl::Status s = UpdateShards(t, grads, step);
      if (!s.ok()) return s;
      continue;
    }
    if (tl.type == ShardingType::kDataParallel) {
      absl::Status s = BackwardDataParallel(t, step);
      if (!s.ok()) return s;
      continue;
    }
    auto ordinal = [&](int id) {
      return static_cast<int>(std::find(tl.shards.begin(), tl.shards.end(), id) - tl.shards.begin());
    };
    // Holder side: each table shard's gradients from each source position.
    std::vector<std::vector<SourceGrads>> from(shards, std::vector<SourceGrads>(m));
    if (tf.num_pooled > 0) {
      std::vector<std::vector<float>> g(m);
      ForEach(m, [&](int p) {
        if (Mine(p)) g[p] = PooledGrads(p, t);
      });
      const int64_t per_col = env_.local_batch * tf.num_pooled;
      switch (tl.type) {
        case ShardingType::kTableWise:
        case ShardingType::kColumnWise: {
          ExchangeBuffers<float> send(m, std::vector<std::vector<float>>(m));
          for (int p = 0; p < m; ++p) {
            if (!Mine(p)) continue;
            for (int q : tr.holders) {
              for (int id : layout.ShardsOn(t, q)) {
                Append(send[p][q], SliceCols(g[p], tc.dim, layout.shards[id].col_begin, layout.shards[id].col_end));
              }
            }
          }
          absl::StatusOr<ExchangeBuffers<float>> recv_or =
              coll_->AllToAll<float>(GroupClass::kSparseMp, Ranks(all), send, env_.activation_bytes);
          if (!recv_or.ok()) return recv_or.status();
          const ExchangeBuffers<float>& recv = *recv_or;
          for (int q : tr.holders) {
            if (!Mine(q)) continue;
            for (int p = 0; p < m; ++p) {
              int64_t at = 0;
              for (int id : layout.ShardsOn(t, q)) {
                const int64_t n = per_col * layout.shards[id].cols();
                from[ordinal(id)][p].pooled.assign(recv[q][p].begin() + at, recv[q][p].begin() + at + n);
                at += n;
              }
            }
          }
          break;
        }
        case ShardingType::kRowWise: {
          absl::StatusOr<MemberBuffers<float>> gathered_or =
              coll_->AllGather<float>(GroupClass::kSparseMp, Ranks(all), g, env_.activation_bytes);
          if (!gathered_or.ok()) return gathered_or.status();
          const MemberBuffers<float>& gathered = *gathered_or;
          const int64_t n = per_col * tc.dim;
          for (int q = 0; q < m; ++q) {
            if (!Mine(q)) continue;
            const int si = ordinal(layout.ShardsOn(t, q)[0]);
            for (int p = 0; p < m; ++p) {
              from[si][p].pooled.assign(gathered[q].begin() + p * n, gathered[q].begin() + (p + 1) * n);
            }
          }
          break;
        }
        case ShardingType::kTableRowWise:
        case ShardingType::kGrid: {
          const int gp = layout.host_positions;
          const int hosts = layout.hosts();
          for (int i = 0; i < tl.col_shards; ++i) {
            const int host = tl.col_shard_host[i];
            const Shard& cs = layout.shards[tl.shards[i * gp]];
            const int64_t pi = per_col * cs.cols();
            // A2A per local index k: every requester h2*g + k sends its slice to the table's host.
            MemberBuffers<float> chunks(gp);
            for (int k = 0; k < gp; ++k) {
              std::vector<int> same_index(hosts);
              ExchangeBuffers<float> send(hosts, std::vector<std::vector<float>>(hosts));
              for (int h2 = 0; h2 < hosts; ++h2) {
                same_index[h2] = h2 * gp + k;
                if (Mine(h2 * gp + k)) send[h2][host] = SliceCols(g[h2 * gp + k], tc.dim, cs.col_begin, cs.col_end);
              }
              absl::StatusOr<ExchangeBuffers<float>> recv_or =
                  coll_->AllToAll<float>(GroupClass::kSparseMp, Ranks(same_index), send, env_.activation_bytes);
              if (!recv_or.ok()) return recv_or.status();
              const ExchangeBuffers<float>& recv = *recv_or;
              if (Mine(host * gp + k))
                for (int h2 = 0; h2 < hosts; ++h2) Append(chunks[k], recv[host][h2]);
            }
            // AG(g) inside the host: every row block's holder gets every requester's gradients.
            std::vector<int> host_positions(gp);
            for (int k = 0; k < gp; ++k) host_positions[k] = host * gp + k;
            absl::StatusOr<MemberBuffers<float>> gathered_or =
                coll_->AllGather<float>(GroupClass::kSparseMp, Ranks(host_positions), chunks, env_.activation_bytes);
            if (!gathered_or.ok()) return gathered_or.status();
            const MemberBuffers<float>& gathered = *gathered_or;
            for (int k = 0; k < gp; ++k) {
              const int si = i * gp + k;  // shard (i, k) sits on host_positions[k]
              if (!Mine(host_positions[k])) continue;
              for (int k2 = 0; k2 < gp; ++k2) {
                for (int h2 = 0; h2 < hosts; ++h2) {
                  const int64_t at = (k2 * hosts + h2) * pi;
                  from[si][h2 * gp + k2].pooled.assign(gathered[k].begin() + at, gathered[k].begin() + at + pi);
                }
              }
            }
          }
          break;
        }
        case ShardingType::kDataParallel:
          break;
      }
    }
    if (tf.num_sequence > 0) {
      ExchangeBuffers<float> send(m, std::vector<std::vector<float>>(m));
      ForEach(m, [&](int p) {
        if (!Mine(p)) return;
        for (int h = 0; h < static_cast<int>(tr.holders.size()); ++h) {
          for (int id : layout.ShardsOn(t, tr.holders[h])) {
            Append(send[p][tr.holders[h]], SequenceGrads(p, t, h, layout.shards[id]));
          }
        }
      });
      absl::StatusOr<ExchangeBuffers<float>> recv_or =
          coll_->AllToAll<float>(GroupClass::kSparseMp, Ranks(all), send, env_.activation_bytes);
      if (!recv_or.ok()) return recv_or.status();
      const ExchangeBuffers<float>& recv = *recv_or;
      for (int h = 0; h < static_cast<int>(tr.holders.size()); ++h) {
        const int q = tr.holders[h];
        if (!Mine(q)) continue;
        for (int p = 0; p < m; ++p) {
          int64_t at = 0;
          for (int id : layout.ShardsOn(t, q)) {
            const int64_t n = SequenceIdCount(tf, tr.received[h][p]) * layout.shards[id].cols();
            from[ordinal(id)][p].sequence.assign(recv[q][p].begin() + at, recv[q][p].begin() + at + n);
            at += n;
          }
        }
      }
    }
    ForEach(shards, [&](int si) {
      const Shard& s = layout.shards[tl.shards[si]];
      if (!Mine(s.position)) return;
      grads[si] = ShardRowGradients(tc, tf, s, tr.received[HolderIndex(t, s.position)], from[si]);
    });
    absl::Status s = UpdateShards(t, grads, step);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace gemtb::reference
