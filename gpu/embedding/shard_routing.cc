#include "gpu/embedding/shard_routing.h"

#include <algorithm>
#include <cstring>

#include <oneapi/tbb/parallel_for.h>

#include "absl/strings/str_cat.h"
#include "model/embedding/embedding_math.h"

namespace gemtb::gpu::embedding {
namespace {

absl::Status Bad(const std::string& m) { return absl::InvalidArgumentError(m); }

// The row an id reads, or -1 when it reads nothing: the oracle's rule (bounds error ids never get
// here: the requester's KJT was validated).
int64_t RowOf(const TableConfig& t, int64_t id) {
  int64_t row = 0;
  if (gemtb::embedding::IdToRow(id, t.hashing, t.rows, t.hash_seed, &row)) return row;
  return t.bounds == BoundsMode::kRemap0 ? 0 : -1;
}

// Copies `data`'s bytes to `out`; returns the end of what it wrote.
template <typename T>
uint8_t* WriteRaw(uint8_t* out, const std::vector<T>& data) {
  if (!data.empty()) std::memcpy(out, data.data(), data.size() * sizeof(T));
  return out + data.size() * sizeof(T);
}

// `rows` rows of `width` floats, dense on both sides, from array `array` at `src` to the exchange
// buffer (array 0) at `dst`.
CopyRun Rows(int32_t array, int64_t src, int64_t dst, int64_t width, int64_t rows) {
  CopyRun r;
  r.src_array = array;
  r.dst_array = 0;
  r.src = src;
  r.dst = dst;
  r.count = width;
  r.rows = rows;
  r.src_stride = width;
  r.dst_stride = width;
  return r;
}

// One table's ids from one source, as the wire carries them.
struct TableIds {
  std::vector<int32_t> lengths;  // [F_t * b], feature-major
  std::vector<int64_t> values;
  std::vector<float> weights;

  int64_t bytes() const {
    return static_cast<int64_t>(lengths.size() * sizeof(int32_t) + values.size() * sizeof(int64_t) +
                                weights.size() * sizeof(float));
  }
};

}  // namespace

absl::Span<const uint8_t> RequesterStep::IdBytesTo(int q) const {
  int64_t at = 0;
  for (int p = 0; p < q; ++p) at += id_counts[static_cast<size_t>(p)];
  return absl::MakeConstSpan(id_bytes).subspan(static_cast<size_t>(at),
                                               static_cast<size_t>(id_counts[static_cast<size_t>(q)]));
}

int64_t NumberRows(std::vector<CopyRun>& runs) {
  int64_t rows = 0;
  for (CopyRun& r : runs) {
    r.first_row = rows;
    rows += r.rows;
  }
  return rows;
}

absl::StatusOr<GroupLayout> ShardRouting::CheckedLayout(const EmbeddingConfig& config, const ShardingPlanSpec& plan,
                                                        int world_size, int gpus_per_host) {
  absl::StatusOr<GroupLayout> layout = BuildGroupLayout(plan, config, world_size, gpus_per_host);
  if (!layout.ok()) return layout.status();
  for (size_t t = 0; t < config.tables.size(); ++t) {
    const TableLayout& tl = layout->tables[t];
    if (tl.type == ShardingType::kDataParallel) {
      return absl::UnimplementedError(absl::StrCat("plan.tables[", t, "] (table '", config.tables[t].name,
                                                   "'): DP tables are not run by the GPU's sharded module"));
    }
    const int64_t cols = config.tables[t].dim / tl.col_shards;
    if (cols % 4 != 0) {
      return Bad(absl::StrCat("plan.tables[", t, "] (table '", config.tables[t].name, "'): ", tl.col_shards,
                              " column shards of ", cols, " columns; the GPU kernels take multiples of 4"));
    }
    // Column shards sharing Adagrad state meet once per row block; one rank holding two of them would
    // have to send two partial sums in that one meeting (every rank checks every table, so all fail alike).
    if (plan.cw_state == CwState::kShared && tl.col_shards > 1 &&
        config.tables[t].optimizer.kind == OptimizerKind::kRowwiseAdagrad) {
      for (size_t i = 0; i < tl.shards.size(); ++i) {
        for (size_t j = 0; j < i; ++j) {
          const Shard& a = layout->shards[static_cast<size_t>(tl.shards[i])];
          const Shard& c = layout->shards[static_cast<size_t>(tl.shards[j])];
          if (a.row_block == c.row_block && a.position == c.position) {
            return absl::UnimplementedError(absl::StrCat("plan.tables[", t, "] (table '", config.tables[t].name,
                                                         "'): position ", a.position,
                                                         " holds two column shards of one row block with shared "
                                                         "rowwise-Adagrad state (use fewer shards or cw_state "
                                                         "per_shard)"));
          }
        }
      }
    }
  }
  return layout;
}

std::vector<HeldShardShape> ShardRouting::HeldShapes(const GroupLayout& layout, int position) {
  std::vector<HeldShardShape> held;
  for (size_t s = 0; s < layout.shards.size(); ++s) {
    const Shard& sh = layout.shards[s];
    if (sh.position != position) continue;
    // A trailing empty row block holds no rows: one placeholder row that no id reads.
    held.push_back({static_cast<int>(s), sh.table, std::max<int64_t>(sh.rows(), 1), sh.cols()});
  }
  return held;
}

absl::StatusOr<ShardRouting> ShardRouting::Create(const EmbeddingConfig& config, const ShardingPlanSpec& plan,
                                                  int world_size, int gpus_per_host, int position,
                                                  int64_t local_batch) {
  if (local_batch < 1) return Bad(absl::StrCat("local_batch=", local_batch, ": must be >= 1"));
  absl::StatusOr<GroupLayout> layout = CheckedLayout(config, plan, world_size, gpus_per_host);
  if (!layout.ok()) return layout.status();
  if (position < 0 || position >= layout->size) {
    return Bad(absl::StrCat("position=", position, ": the MP group has ", layout->size, " positions"));
  }
  ShardRouting r;
  r.config_ = config;
  r.layout_ = *std::move(layout);
  r.position_ = position;
  r.local_batch_ = local_batch;
  const size_t num_tables = config.tables.size();
  r.tables_.resize(num_tables);
  r.holders_.resize(num_tables);
  for (size_t f = 0; f < config.features.size(); ++f) {
    const FeatureConfig& fc = config.features[f];
    RoutedTable& t = r.tables_[static_cast<size_t>(fc.table)];
    t.keys.push_back(static_cast<int>(f));
    r.weighted_ |= fc.pooling == Pooling::kWeightedSum;
    if (fc.pooling == Pooling::kNone) {
      t.pooled_index.push_back(-1);
      t.output_col.push_back(-1);
      t.output_sequence.push_back(static_cast<int>(r.sequence_keys_.size()));
      r.sequence_keys_.push_back(static_cast<int>(f));
      r.sequence_dim_.push_back(config.tables[static_cast<size_t>(fc.table)].dim);
    } else {
      t.pooled_index.push_back(t.num_pooled++);
      t.output_col.push_back(r.pooled_width_);
      t.output_sequence.push_back(-1);
      r.pooled_width_ += config.tables[static_cast<size_t>(fc.table)].dim;
    }
  }
  for (size_t t = 0; t < num_tables; ++t) r.holders_[t] = r.layout_.Holders(static_cast<int>(t));
  // The shards this position holds, in group order, each a one-table module.
  for (const HeldShardShape& shape : HeldShapes(r.layout_, position)) {
    const Shard& sh = r.layout_.shards[static_cast<size_t>(shape.shard)];
    const TableConfig& tc = config.tables[static_cast<size_t>(sh.table)];
    const TableLayout& tl = r.layout_.tables[static_cast<size_t>(sh.table)];
    HeldShard h;
    h.shard = shape.shard;
    h.table = sh.table;
    TableConfig shard_table = tc;
    shard_table.name = absl::StrCat(tc.name, "#", shape.shard);
    shard_table.rows = shape.rows;
    shard_table.dim = shape.cols;
    shard_table.hashing = Hashing::kIdentity;
    shard_table.bounds = BoundsMode::kZero;
    h.config.tables.push_back(shard_table);
    h.config.seed = config.seed;
    for (int f : r.tables_[static_cast<size_t>(sh.table)].keys) {
      FeatureConfig fc = config.features[static_cast<size_t>(f)];
      fc.table = 0;
      if (fc.pooling == Pooling::kMean) fc.pooling = Pooling::kSum;
      h.config.features.push_back(fc);
    }
    const bool shared =
        plan.cw_state == CwState::kShared && tl.col_shards > 1 && tc.optimizer.kind == OptimizerKind::kRowwiseAdagrad;
    h.placement = {sh.table, tc.rows, tc.dim, sh.row_begin, sh.col_begin, shared ? tc.dim : sh.cols()};
    if (sh.rows() == 0) {
      // An empty row block (rows < M blocks): one placeholder row that no id reads.
      h.placement.row_begin = 0;
    }
    if (shared) {
      h.split_update = true;
      for (int other : tl.shards) {
        const Shard& o = r.layout_.shards[static_cast<size_t>(other)];
        if (o.row_block == sh.row_block) h.norm_group.push_back(o.position);
      }
    }
    r.held_.push_back(std::move(h));
  }
  return r;
}

absl::StatusOr<RequesterStep> ShardRouting::RouteIds(const KjtView& kjt, const KjtLayout& kl) const {
  const int64_t b = local_batch_;
  const int m = layout_.size;
  if (kjt.batch != b) return Bad(absl::StrCat("kjt.batch=", kjt.batch, ": the module's local batch is ", b));
  if (kl.feature.size() != config_.features.size()) {
    return Bad(
        absl::StrCat("kjt: ", kl.feature.size(), " keys, the module has ", config_.features.size(), " features"));
  }
  for (size_t f = 0; f < kl.feature.size(); ++f) {
    if (kl.feature[f] != static_cast<int>(f)) {
      return Bad(absl::StrCat("kjt.keys[", f, "]='", kjt.keys[f], "': the module's key ", f, " is '",
                              config_.features[f].key, "'"));
    }
  }
  if (weighted_ && kjt.weights.size() != kjt.values.size()) {
    return Bad(absl::StrCat("kjt.weights: ", kjt.weights.size(), " for ", kjt.values.size(),
                            " ids (weighted features need one each)"));
  }
  RequesterStep out;
  out.exchange_counts.assign(static_cast<size_t>(m), 0);
  const int64_t num_keys = static_cast<int64_t>(config_.features.size());
  // Every id's row once where needed: MEAN's counts n (bag_counts, 0 for other keys) and the
  // row-wise types' buckets.
  std::vector<int64_t> row_of(kjt.values.size());
  out.bag_counts.assign(static_cast<size_t>(num_keys * b), 0);
  tbb::parallel_for(int64_t{0}, num_keys * b, [&](int64_t bag) {
    const int64_t f = bag / b;
    const FeatureConfig& fc = config_.features[static_cast<size_t>(f)];
    // Rows only where used (a division each under mod hashing): MEAN's n, and row-split buckets.
    if (fc.pooling != Pooling::kMean && layout_.tables[static_cast<size_t>(fc.table)].block_rows == 0) return;
    const TableConfig& tc = config_.tables[static_cast<size_t>(fc.table)];
    int32_t n = 0;
    for (int64_t v = kl.offsets[bag]; v < kl.offsets[bag + 1]; ++v) {
      row_of[static_cast<size_t>(v)] = RowOf(tc, kjt.values[v]);
      n += row_of[static_cast<size_t>(v)] >= 0 ? 1 : 0;
    }
    out.bag_counts[static_cast<size_t>(bag)] = n;
  });
  // Ids per (table, holder): the wire's bytes and, for the NONE rows coming back, which ids went.
  // A table split by rows sends each holder its block's valid ids (none_sent[q][f]: the value indices
  // of NONE key f sent to q); one not split sends every id of its keys to each holder.
  std::vector<std::vector<std::vector<int64_t>>> none_sent(
      static_cast<size_t>(m), std::vector<std::vector<int64_t>>(static_cast<size_t>(num_keys)));
  std::vector<std::pair<int, int>> pairs;  // (table, holder), each built on its own
  for (size_t t = 0; t < config_.tables.size(); ++t) {
    if (tables_[t].keys.empty()) continue;
    for (int q : holders_[t]) pairs.emplace_back(static_cast<int>(t), q);
  }
  std::vector<TableIds> pair_ids(pairs.size());
  tbb::parallel_for(size_t{0}, pairs.size(), [&](size_t k) {
    const auto [t, q] = pairs[k];
    const RoutedTable& rt = tables_[static_cast<size_t>(t)];
    const TableLayout& tl = layout_.tables[static_cast<size_t>(t)];
    const Shard& first = layout_.shards[static_cast<size_t>(layout_.ShardsOn(t, q)[0])];
    TableIds& ids = pair_ids[k];
    for (size_t fi = 0; fi < rt.keys.size(); ++fi) {
      const int f = rt.keys[fi];
      const int64_t v0 = kl.offsets[f * b], v1 = kl.offsets[(f + 1) * b];
      if (tl.block_rows == 0) {
        ids.lengths.insert(ids.lengths.end(), kjt.lengths.begin() + f * b, kjt.lengths.begin() + (f + 1) * b);
        ids.values.insert(ids.values.end(), kjt.values.begin() + v0, kjt.values.begin() + v1);
        if (weighted_) ids.weights.insert(ids.weights.end(), kjt.weights.begin() + v0, kjt.weights.begin() + v1);
        continue;
      }
      // (table, holder) pairs are distinct, so each key's list has one writer.
      std::vector<int64_t>* sent =
          rt.output_sequence[fi] >= 0 ? &none_sent[static_cast<size_t>(q)][static_cast<size_t>(f)] : nullptr;
      for (int64_t i = 0; i < b; ++i) {
        const int64_t bag = f * b + i;
        int32_t len = 0;
        for (int64_t v = kl.offsets[bag]; v < kl.offsets[bag + 1]; ++v) {
          const int64_t row = row_of[static_cast<size_t>(v)];
          if (row < first.row_begin || row >= first.row_end) continue;
          ids.values.push_back(kjt.values[v]);
          if (weighted_) ids.weights.push_back(kjt.weights[v]);
          if (sent != nullptr) sent->push_back(v);
          ++len;
        }
        ids.lengths.push_back(len);
      }
    }
  });
  // The wire's bytes: holders in position order, tables in config order within each holder's bytes.
  out.id_counts.assign(static_cast<size_t>(m), 0);
  for (size_t k = 0; k < pairs.size(); ++k) out.id_counts[static_cast<size_t>(pairs[k].second)] += pair_ids[k].bytes();
  std::vector<int64_t> id_at(static_cast<size_t>(m), 0);  // where each holder's next table goes
  int64_t id_total = 0;
  for (size_t q = 0; q < id_at.size(); ++q) {
    id_at[q] = id_total;
    id_total += out.id_counts[q];
  }
  out.id_bytes.resize(static_cast<size_t>(id_total));
  for (size_t k = 0; k < pairs.size(); ++k) {
    const TableIds& ids = pair_ids[k];
    int64_t& at = id_at[static_cast<size_t>(pairs[k].second)];
    uint8_t* end = WriteRaw(WriteRaw(WriteRaw(out.id_bytes.data() + at, ids.lengths), ids.values), ids.weights);
    at = end - out.id_bytes.data();
  }
  // The rows of NONE key f that a holder q returns: every id (tables not split by rows) or those sent.
  auto none_rows = [&](int t, int q, int f) {
    return layout_.tables[static_cast<size_t>(t)].block_rows == 0
               ? kl.offsets[(f + 1) * b] - kl.offsets[f * b]
               : static_cast<int64_t>(none_sent[static_cast<size_t>(q)][static_cast<size_t>(f)].size());
  };
  // The embeddings' message from each holder q: its shards' pooled rows, then their NONE rows.
  std::vector<int64_t> pooled_at(layout_.shards.size(), 0);  // a shard's pooled part in its holder's message
  std::vector<int64_t> pooled_size(static_cast<size_t>(m), 0), none_size(static_cast<size_t>(m), 0);
  for (size_t s = 0; s < layout_.shards.size(); ++s) {
    const Shard& sh = layout_.shards[s];
    const RoutedTable& rt = tables_[static_cast<size_t>(sh.table)];
    const size_t q = static_cast<size_t>(sh.position);
    pooled_at[s] = pooled_size[q];
    pooled_size[q] += b * rt.num_pooled * sh.cols();
    for (size_t fi = 0; fi < rt.keys.size(); ++fi) {
      if (rt.output_sequence[fi] >= 0) none_size[q] += none_rows(sh.table, sh.position, rt.keys[fi]) * sh.cols();
    }
  }
  std::vector<int64_t> message_begin(static_cast<size_t>(m), 0), sequence_at(static_cast<size_t>(m), 0);
  for (int q = 0; q < m; ++q) {
    const size_t qq = static_cast<size_t>(q);
    out.exchange_counts[qq] = pooled_size[qq] + none_size[qq];
    if (q > 0) message_begin[qq] = message_begin[qq - 1] + out.exchange_counts[qq - 1];
    sequence_at[qq] = message_begin[qq] + pooled_size[qq];
  }
  // One run per (shard, NONE key): a key's every row (consecutive rows of the output), or the rows
  // of the ids a row block got, placed through sequence_row_offsets.
  for (size_t s = 0; s < layout_.shards.size(); ++s) {
    const Shard& sh = layout_.shards[s];
    const RoutedTable& rt = tables_[static_cast<size_t>(sh.table)];
    for (size_t fi = 0; fi < rt.keys.size(); ++fi) {
      const int seq = rt.output_sequence[fi];
      if (seq < 0) continue;
      const int f = rt.keys[fi];
      const int64_t dim = sequence_dim_[static_cast<size_t>(seq)];
      const int64_t rows = none_rows(sh.table, sh.position, f);
      int64_t& at = sequence_at[static_cast<size_t>(sh.position)];
      if (rows == 0) continue;
      CopyRun run;
      run.src_array = 0;
      run.dst_array = 1 + seq;
      run.src = at;
      run.count = sh.cols();
      run.rows = rows;
      run.src_stride = sh.cols();
      run.dst_stride = dim;
      if (layout_.tables[static_cast<size_t>(sh.table)].block_rows == 0) {
        run.dst = sh.col_begin;
      } else {
        run.dst_rows = static_cast<int64_t>(out.sequence_row_offsets.size());
        for (int64_t v : none_sent[static_cast<size_t>(sh.position)][static_cast<size_t>(f)]) {
          out.sequence_row_offsets.push_back((v - kl.offsets[f * b]) * dim + sh.col_begin);
        }
      }
      out.sequence_runs.push_back(run);
      at += rows * sh.cols();
    }
  }
  // Pooled segments: per pooled feature and column shard, one piece per row block in order.
  for (size_t t = 0; t < config_.tables.size(); ++t) {
    const RoutedTable& rt = tables_[t];
    if (rt.num_pooled == 0) continue;
    const TableLayout& tl = layout_.tables[t];
    for (size_t fi = 0; fi < rt.keys.size(); ++fi) {
      if (rt.pooled_index[fi] < 0) continue;
      const int f = rt.keys[fi];
      for (int i = 0; i < tl.col_shards; ++i) {
        PooledSegment seg;
        const Shard& first = layout_.shards[static_cast<size_t>(tl.shards[static_cast<size_t>(i * tl.row_blocks)])];
        seg.out_col = rt.output_col[fi] + first.col_begin;
        seg.width = first.cols();
        seg.mean_key = config_.features[static_cast<size_t>(f)].pooling == Pooling::kMean ? f : -1;
        seg.first_piece = static_cast<int>(out.pieces.size());
        for (int k = 0; k < tl.row_blocks; ++k) {
          const int s = tl.shards[static_cast<size_t>(i * tl.row_blocks + k)];
          const Shard& sh = layout_.shards[static_cast<size_t>(s)];
          const int64_t stride = rt.num_pooled * sh.cols();
          out.pieces.push_back({message_begin[static_cast<size_t>(sh.position)] + pooled_at[static_cast<size_t>(s)] +
                                    rt.pooled_index[fi] * sh.cols(),
                                stride});
        }
        seg.num_pieces = tl.row_blocks;
        out.segments.push_back(seg);
      }
    }
  }
  out.sequence_rows = NumberRows(out.sequence_runs);
  return out;
}

absl::StatusOr<HolderStep> ShardRouting::ReceiveIds(absl::Span<const absl::Span<const uint8_t>> received) const {
  const int m = layout_.size;
  const int64_t b = local_batch_;
  if (static_cast<int>(received.size()) != m) {
    return Bad(absl::StrCat("received: ", received.size(), " messages, the MP group has ", m, " positions"));
  }
  // Parse every source's message: the tables this position holds, in config order.
  std::vector<std::vector<TableIds>> ids(static_cast<size_t>(m), std::vector<TableIds>(config_.tables.size()));
  for (int p = 0; p < m; ++p) {
    const absl::Span<const uint8_t> msg = received[static_cast<size_t>(p)];
    size_t at = 0;
    auto take = [&](void* dst, size_t bytes, size_t t, const char* what) -> absl::Status {
      if (at + bytes > msg.size()) {
        return absl::DataLossError(absl::StrCat("ids from position ", p, ", table '", config_.tables[t].name,
                                                "': ", what, " end past the message's ", msg.size(), " bytes"));
      }
      if (bytes > 0) std::memcpy(dst, msg.data() + at, bytes);
      at += bytes;
      return absl::OkStatus();
    };
    for (size_t t = 0; t < config_.tables.size(); ++t) {
      const RoutedTable& rt = tables_[t];
      const std::vector<int>& h = holders_[t];
      if (rt.keys.empty() || std::find(h.begin(), h.end(), position_) == h.end()) continue;
      TableIds& ti = ids[static_cast<size_t>(p)][t];
      ti.lengths.resize(rt.keys.size() * static_cast<size_t>(b));
      if (absl::Status s = take(ti.lengths.data(), ti.lengths.size() * sizeof(int32_t), t, "lengths"); !s.ok())
        return s;
      int64_t nu = 0;
      for (int32_t len : ti.lengths) {
        if (len < 0)
          return absl::DataLossError(
              absl::StrCat("ids from position ", p, ", table '", config_.tables[t].name, "': negative length ", len));
        nu += len;
      }
      ti.values.resize(static_cast<size_t>(nu));
      if (absl::Status s = take(ti.values.data(), ti.values.size() * sizeof(int64_t), t, "ids"); !s.ok()) return s;
      if (weighted_) {
        ti.weights.resize(static_cast<size_t>(nu));
        if (absl::Status s = take(ti.weights.data(), ti.weights.size() * sizeof(float), t, "weights"); !s.ok())
          return s;
      }
    }
    if (at != msg.size()) {
      return absl::DataLossError(absl::StrCat("ids from position ", p, ": ", msg.size() - at, " bytes left over"));
    }
  }
  HolderStep out;
  out.exchange_counts.assign(static_cast<size_t>(m), 0);
  // Per held shard (each built on its own): its KJT, and where each source's NONE rows start in its
  // NONE arrays. none_rows[i][j][p]: first row of source p in held shard i's j-th NONE feature, then
  // the count.
  std::vector<std::vector<std::vector<std::pair<int64_t, int64_t>>>> none_rows(held_.size());
  std::vector<int> first_none_array(held_.size());
  int next_array = 1 + static_cast<int>(held_.size());
  for (size_t i = 0; i < held_.size(); ++i) {
    first_none_array[i] = next_array;
    const RoutedTable& rt = tables_[static_cast<size_t>(held_[i].table)];
    for (int seq : rt.output_sequence) next_array += seq >= 0 ? 1 : 0;
  }
  out.inputs.resize(held_.size());
  tbb::parallel_for(size_t{0}, held_.size(), [&](size_t i) {
    const HeldShard& h = held_[i];
    const Shard& sh = layout_.shards[static_cast<size_t>(h.shard)];
    const TableConfig& tc = config_.tables[static_cast<size_t>(h.table)];
    const RoutedTable& rt = tables_[static_cast<size_t>(h.table)];
    HolderStep::ShardInput& in = out.inputs[i];
    in.weighted = weighted_;
    // Per source: where the current feature's ids start among the table's ids it sent (key order).
    std::vector<int64_t> value_at(static_cast<size_t>(m), 0);
    for (size_t fi = 0; fi < rt.keys.size(); ++fi) {
      in.keys.push_back(config_.features[static_cast<size_t>(rt.keys[fi])].key);
      const bool none = rt.output_sequence[fi] >= 0;
      if (none) none_rows[i].emplace_back(static_cast<size_t>(m));
      int64_t rows_of_feature = 0;
      for (int p = 0; p < m; ++p) {
        const TableIds& ti = ids[static_cast<size_t>(p)][static_cast<size_t>(h.table)];
        int64_t& v = value_at[static_cast<size_t>(p)];
        const int64_t first_row = rows_of_feature;
        for (int64_t smp = 0; smp < b; ++smp) {
          const int32_t len = ti.lengths[fi * static_cast<size_t>(b) + static_cast<size_t>(smp)];
          in.lengths.push_back(len);
          for (int32_t k = 0; k < len; ++k, ++v) {
            const int64_t row = RowOf(tc, ti.values[static_cast<size_t>(v)]);
            in.values.push_back(row >= sh.row_begin && row < sh.row_end ? row - sh.row_begin : -1);
            if (weighted_) in.weights.push_back(ti.weights[static_cast<size_t>(v)]);
          }
          rows_of_feature += len;
        }
        if (none) none_rows[i].back()[static_cast<size_t>(p)] = {first_row, rows_of_feature - first_row};
      }
    }
  });
  // The embeddings' message to each source p: every held shard's pooled rows of p, then every held
  // shard's NONE rows of p (features in key order).
  int64_t begin = 0;
  for (int p = 0; p < m; ++p) {
    int64_t at = begin;
    for (size_t i = 0; i < held_.size(); ++i) {
      const HeldShard& h = held_[i];
      const RoutedTable& rt = tables_[static_cast<size_t>(h.table)];
      if (rt.keys.empty()) continue;
      const int64_t width = rt.num_pooled * layout_.shards[static_cast<size_t>(h.shard)].cols();
      if (width > 0) out.runs.push_back(Rows(1 + static_cast<int32_t>(i), p * b * width, at, width, b));
      at += b * width;
    }
    for (size_t i = 0; i < held_.size(); ++i) {
      const int64_t cols = layout_.shards[static_cast<size_t>(held_[i].shard)].cols();
      for (size_t j = 0; j < none_rows[i].size(); ++j) {
        const auto [first, count] = none_rows[i][j][static_cast<size_t>(p)];
        if (count > 0) {
          out.runs.push_back(Rows(first_none_array[i] + static_cast<int32_t>(j), first * cols, at, cols, count));
        }
        at += count * cols;
      }
    }
    out.exchange_counts[static_cast<size_t>(p)] = at - begin;
    begin = at;
  }
  out.run_rows = NumberRows(out.runs);
  return out;
}

}  // namespace gemtb::gpu::embedding
