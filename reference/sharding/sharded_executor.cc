#include "reference/sharding/sharded_executor.h"

#include <oneapi/tbb/info.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <deque>
#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "model/sharding/sharding_plan_json.h"
#include "reference/collectives/virtual_collectives.h"
#include "reference/sharding/mp_group.h"
#include "reference/sharding/shard_layout.h"
#include "reference/sharding/shard_wire.h"

namespace gemtb::reference {
namespace {

absl::Status Bad(const std::string& m) { return absl::InvalidArgumentError(m); }

int64_t StorageBytes(ElementType t) { return t == ElementType::kFloat32 ? 4 : 2; }

KeyedJaggedTensor SliceKjt(const KeyedJaggedTensor& kjt, const KjtLayout& layout, int64_t b0, int64_t b1) {
  KeyedJaggedTensor out;
  out.keys = kjt.keys;
  out.stride = b1 - b0;
  const int64_t batch = kjt.stride;
  for (int64_t f = 0; f < kjt.NumKeys(); ++f) {
    for (int64_t b = b0; b < b1; ++b) out.lengths.push_back(kjt.lengths[f * batch + b]);
    const int64_t v0 = layout.offsets[f * batch + b0], v1 = layout.offsets[f * batch + b1];
    out.values.insert(out.values.end(), kjt.values.begin() + v0, kjt.values.begin() + v1);
    if (!kjt.weights.empty()) out.weights.insert(out.weights.end(), kjt.weights.begin() + v0, kjt.weights.begin() + v1);
  }
  return out;
}

absl::Status CheckState(const EmbeddingConfig& config, const EmbeddingState& s) {
  if (s.tables.size() != config.tables.size()) {
    return Bad(absl::StrCat("initial.tables: ", s.tables.size(), " tables, the config has ", config.tables.size()));
  }
  for (size_t t = 0; t < config.tables.size(); ++t) {
    const TableConfig& c = config.tables[t];
    const TableState& ts = s.tables[t];
    const std::string at = absl::StrCat("initial.tables[", t, "] ('", c.name, "')");
    const size_t elems = static_cast<size_t>(c.rows * c.dim);
    if (ts.weights.size() != elems)
      return Bad(absl::StrCat(at, ".weights: ", ts.weights.size(), " values, expected ", elems));
    if (c.optimizer.kind == OptimizerKind::kRowwiseAdagrad && ts.adagrad.size() != static_cast<size_t>(c.rows)) {
      return Bad(absl::StrCat(at, ".adagrad: ", ts.adagrad.size(), " values, expected ", c.rows));
    }
    if (c.optimizer.kind == OptimizerKind::kAdam && (ts.adam_m.size() != elems || ts.adam_v.size() != elems)) {
      return Bad(absl::StrCat(at, ".adam_m/adam_v: expected ", elems, " values each"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckGrads(const EmbeddingConfig& config, const KeyedJaggedTensor& kjt, const KjtLayout& layout,
                        int64_t width, const EmbeddingGrads& g) {
  if (static_cast<int64_t>(g.pooled.size()) != kjt.stride * width) {
    return Bad(absl::StrCat("grads.pooled: ", g.pooled.size(), " values, expected B*W = ", kjt.stride, "*", width));
  }
  size_t k = 0;
  for (int64_t f = 0; f < kjt.NumKeys(); ++f) {
    const FeatureConfig& fc = config.features[layout.feature[f]];
    if (fc.pooling != Pooling::kNone) continue;
    const int64_t want =
        (layout.offsets[(f + 1) * kjt.stride] - layout.offsets[f * kjt.stride]) * config.tables[fc.table].dim;
    if (k >= g.sequence.size() || static_cast<int64_t>(g.sequence[k].size()) != want) {
      return Bad(absl::StrCat("grads.sequence[", k, "] (key '", kjt.keys[f], "'): expected ", want, " values"));
    }
    ++k;
  }
  if (k != g.sequence.size()) return Bad(absl::StrCat("grads.sequence: ", g.sequence.size(), " entries, expected ", k));
  return absl::OkStatus();
}

// Copies rows [r0, r1) x columns [c0, c1) of a [rows][dim] table into a [r1-r0][c1-c0] block, or back.
void CopyRect(const std::vector<float>& from, int64_t dim, const Shard& s, int64_t r0, int64_t r1,
              std::vector<float>* to) {
  to->clear();
  for (int64_t r = r0; r < r1; ++r)
    to->insert(to->end(), from.begin() + r * dim + s.col_begin, from.begin() + r * dim + s.col_end);
}
void PasteRect(const std::vector<float>& block, int64_t dim, const Shard& s, int64_t r0, int64_t r1,
               std::vector<float>* to) {
  for (int64_t r = r0; r < r1; ++r) {
    std::copy(block.begin() + (r - r0) * s.cols(), block.begin() + (r - r0 + 1) * s.cols(),
              to->begin() + r * dim + s.col_begin);
  }
}

// One process's share of a sharded run: the ranks it holds (every rank in one process).
class Runner {
 public:
  Runner(const EmbeddingConfig& config, const ShardingPlanSpec& plan, GroupLayout layout, int world_size,
         Collectives* collectives)
      : config_(config),
        plan_(plan),
        layout_(std::move(layout)),
        world_(world_size),
        m_(layout_.size),
        n_(world_size / layout_.size),
        virtual_(&report_),
        coll_(collectives != nullptr ? collectives : &virtual_) {}

  bool Holds(int rank) const { return coll_->Holds(rank); }
  bool HoldsAll() const {
    for (int r = 0; r < world_; ++r)
      if (!Holds(r)) return false;
    return true;
  }

  // Places the initial tables: each held rank copies the shards the plan puts on it.
  void Place(const EmbeddingState& initial) {
    initial_step_ = initial.step;
    env_.config = &config_;
    env_.plan = &plan_;
    env_.layout = &layout_;
    ranks_.resize(world_);
    for (int r = 0; r < world_; ++r) {
      RankData& rd = ranks_[r];
      rd.rank = r;
      if (!Holds(r)) continue;
      rd.shards.resize(layout_.shards.size());
      const int position = r / n_, rho = r % n_;
      for (size_t id = 0; id < layout_.shards.size(); ++id) {
        const Shard& s = layout_.shards[id];
        if (s.position != position) continue;
        const TableConfig& tc = config_.tables[s.table];
        const TableState& ts = initial.tables[s.table];
        ShardState& ss = rd.shards[id];
        if (plan_.fully_sharded) {
          const auto [r0, r1] = SubBlock(s, rho);
          CopyRect(ts.weights, tc.dim, s, r0, r1, &ss.stored);
        } else {
          CopyRect(ts.weights, tc.dim, s, s.row_begin, s.row_end, &ss.weights);
        }
        if (!ts.adagrad.empty()) ss.adagrad.assign(ts.adagrad.begin() + s.row_begin, ts.adagrad.begin() + s.row_end);
        if (!ts.adam_m.empty()) {
          CopyRect(ts.adam_m, tc.dim, s, s.row_begin, s.row_end, &ss.adam_m);
          CopyRect(ts.adam_v, tc.dim, s, s.row_begin, s.row_end, &ss.adam_v);
        }
        ss.adam_step = ts.adam_step;
      }
    }
    for (int rho = 0; rho < n_; ++rho) {
      std::vector<RankData*> members;
      for (int m = 0; m < m_; ++m) members.push_back(&ranks_[m * n_ + rho]);
      groups_.push_back(std::make_unique<MpGroup>(env_, std::move(members), coll_));
    }
  }

  // The batch of the next step: each held rank takes its local batch.
  void SetBatch(const KeyedJaggedTensor& kjt, const KjtLayout& layout) {
    env_.features = CollectTableFeatures(config_, layout, &env_.pooled_width);
    env_.local_batch = kjt.stride / world_;
    env_.weighted = !kjt.weights.empty();
    batch_stride_ = kjt.stride;
    batch_layout_ = layout;
    const int64_t lb = env_.local_batch;
    for (int r = 0; r < world_; ++r) {
      RankData& rd = ranks_[r];
      if (!Holds(r)) continue;
      rd.kjt = SliceKjt(kjt, layout, r * lb, (r + 1) * lb);
      // The slice of a validated KJT is valid; its layout is derived here rather than re-validated
      // (a slice without ids would lose the "weighted" mark that empty weights cannot carry).
      rd.layout.feature = layout.feature;
      rd.layout.offsets.assign(rd.kjt.lengths.size() + 1, 0);
      for (size_t i = 0; i < rd.kjt.lengths.size(); ++i)
        rd.layout.offsets[i + 1] = rd.layout.offsets[i] + rd.kjt.lengths[i];
    }
  }

  // What a batch leaves between its forward and its backward: each rank's local batch and output,
  // each group's traffic, the batch's layout. With two batches outstanding, the runner holds one
  // and `aside` the other; SwapBatch exchanges them.
  struct BatchContext {
    std::vector<KeyedJaggedTensor> kjt;
    std::vector<KjtLayout> layout;
    std::vector<EmbeddingOutput> output;
    std::vector<std::vector<MpGroup::TableTraffic>> traffic;
    std::vector<TableFeatures> features;
    int64_t pooled_width = 0, local_batch = 0, batch_stride = 0;
    bool weighted = false;
    KjtLayout batch_layout;
  };
  void SwapBatch(BatchContext& aside) {
    aside.kjt.resize(world_);
    aside.layout.resize(world_);
    aside.output.resize(world_);
    aside.traffic.resize(groups_.size());
    for (int r = 0; r < world_; ++r) {
      std::swap(ranks_[r].kjt, aside.kjt[r]);
      std::swap(ranks_[r].layout, aside.layout[r]);
      std::swap(ranks_[r].output, aside.output[r]);
    }
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (aside.traffic[g].empty()) aside.traffic[g].resize(config_.tables.size());  // a group's is per table
      std::swap(groups_[g]->traffic(), aside.traffic[g]);
    }
    std::swap(env_.features, aside.features);
    std::swap(env_.pooled_width, aside.pooled_width);
    std::swap(env_.local_batch, aside.local_batch);
    std::swap(env_.weighted, aside.weighted);
    std::swap(batch_stride_, aside.batch_stride);
    std::swap(batch_layout_, aside.batch_layout);
  }

  // The upstream gradients of the batch (global layout): each held rank takes its local batch's.
  void SetGrads(const EmbeddingGrads& grads) {
    const KjtLayout& layout = batch_layout_;
    const int64_t lb = env_.local_batch;
    const int64_t stride = batch_stride_;
    for (int r = 0; r < world_; ++r) {
      if (!Holds(r)) continue;
      EmbeddingGrads& mine = ranks_[r].grads;
      mine = EmbeddingGrads{};
      mine.pooled.assign(grads.pooled.begin() + r * lb * env_.pooled_width,
                         grads.pooled.begin() + (r + 1) * lb * env_.pooled_width);
      size_t k = 0;
      for (size_t f = 0; f < layout.feature.size(); ++f) {
        const FeatureConfig& fc = config_.features[layout.feature[f]];
        if (fc.pooling != Pooling::kNone) continue;
        const int64_t dim = config_.tables[fc.table].dim;
        const int64_t base = layout.offsets[f * stride];
        const int64_t v0 = layout.offsets[f * stride + r * lb] - base;
        const int64_t v1 = layout.offsets[f * stride + (r + 1) * lb] - base;
        mine.sequence.emplace_back(grads.sequence[k].begin() + v0 * dim, grads.sequence[k].begin() + v1 * dim);
        ++k;
      }
    }
  }

  // The forward of step s (counted from 0 in this run). V3 keeps the gathered copy for Backward.
  absl::Status Forward(int64_t s) {
    coll_->SetStep(s);
    coll_->SetPhase(CommPhase::kForward);
    const bool v3 = plan_.fully_sharded;
    const bool touched = plan_.gather == GatherMode::kTouched;
    if (v3 && !touched) GEMTB_RETURN_IF_ERROR(Gather(false));
    for (auto& g : groups_) GEMTB_RETURN_IF_ERROR(g->ExchangeIds());
    if (v3 && touched) GEMTB_RETURN_IF_ERROR(Gather(true));
    for (auto& g : groups_) GEMTB_RETURN_IF_ERROR(g->LookupAndReturn());
    return absl::OkStatus();
  }

  // The backward of step s, after its Forward and SetGrads.
  absl::Status Backward(int64_t s) {
    coll_->SetPhase(CommPhase::kBackward);
    const bool v3 = plan_.fully_sharded;
    if (v3 && !plan_.keep_gathered) {
      FreeGathered();
      GEMTB_RETURN_IF_ERROR(Gather(plan_.gather == GatherMode::kTouched));
    }
    for (auto& g : groups_) GEMTB_RETURN_IF_ERROR(g->Backward(initial_step_ + s));
    if (v3) {
      GEMTB_RETURN_IF_ERROR(ScatterUpdated());
    } else if (n_ > 1 && (s + 1) % plan_.sync_period == 0) {
      coll_->SetPhase(CommPhase::kSync);
      GEMTB_RETURN_IF_ERROR(SyncReplicas());
    }
    return absl::OkStatus();
  }

  // The last forward's output in global layout: rank r's local batch is global samples
  // [r*B/R, (r+1)*B/R). Across processes, every rank's output is all-gathered first.
  absl::StatusOr<EmbeddingOutput> Output() {
    std::vector<EmbeddingOutput> outputs(world_);
    for (int r = 0; r < world_; ++r)
      if (Holds(r)) outputs[r] = ranks_[r].output;
    if (!HoldsAll()) GEMTB_RETURN_IF_ERROR(ShareOutputs(outputs));
    EmbeddingOutput out;
    out.pooled_width = env_.pooled_width;
    out.sequence_keys = outputs[0].sequence_keys;
    out.sequence.resize(out.sequence_keys.size());
    for (const EmbeddingOutput& o : outputs) {
      out.pooled.insert(out.pooled.end(), o.pooled.begin(), o.pooled.end());
      for (size_t k = 0; k < out.sequence.size(); ++k)
        out.sequence[k].insert(out.sequence[k].end(), o.sequence[k].begin(), o.sequence[k].end());
    }
    return out;
  }

  // Every replica's tables reassembled from the shards (gathered from the other processes first).
  absl::StatusOr<ShardedRun> Finish(int64_t steps_done) {
    if (!HoldsAll()) GEMTB_RETURN_IF_ERROR(ShareShards());
    ShardedRun run;
    for (int rho = 0; rho < n_; ++rho)
      run.replica_states.push_back(AssembleReplica(rho, steps_done, rho == 0 ? &run : nullptr));
    run.state = run.replica_states[0];
    if (!HoldsAll()) {
      for (int r = 0; r < world_; ++r)
        if (!Holds(r)) ranks_[r].shards.clear();
    }
    absl::StatusOr<EmbeddingOutput> out = Output();
    if (!out.ok()) return out.status();
    run.output = *std::move(out);
    run.report = report_;
    return run;
  }

 private:
  std::vector<int> World() const {
    std::vector<int> all(world_);
    for (int r = 0; r < world_; ++r) all[r] = r;
    return all;
  }

  // Across processes: every rank's output to every process, through an all-gather of the world.
  absl::Status ShareOutputs(std::vector<EmbeddingOutput>& outputs) {
    MemberBuffers<uint8_t> mine(world_);
    for (int r = 0; r < world_; ++r)
      if (Holds(r)) mine[r] = SerializeOutput(outputs[r]);
    absl::StatusOr<MemberBuffers<uint8_t>> all = GatherWorld(mine);
    if (!all.ok()) return all.status();
    for (int r = 0; r < world_; ++r) {
      if (Holds(r)) continue;
      absl::StatusOr<EmbeddingOutput> o = DeserializeOutput((*all)[r]);
      if (!o.ok()) return o.status();
      outputs[r] = *std::move(o);
    }
    return absl::OkStatus();
  }

  // Across processes: every rank's shards to every process (to reassemble the tables).
  absl::Status ShareShards() {
    MemberBuffers<uint8_t> mine(world_);
    for (int r = 0; r < world_; ++r)
      if (Holds(r)) mine[r] = SerializeShards(ranks_[r].shards);
    absl::StatusOr<MemberBuffers<uint8_t>> all = GatherWorld(mine);
    if (!all.ok()) return all.status();
    for (int r = 0; r < world_; ++r) {
      if (Holds(r)) continue;
      absl::StatusOr<std::vector<ShardState>> shards = DeserializeShards((*all)[r]);
      if (!shards.ok()) return shards.status();
      if (shards->size() != layout_.shards.size())
        return absl::DataLossError(
            absl::StrCat("rank ", r, " sent ", shards->size(), " shards, the plan has ", layout_.shards.size()));
      ranks_[r].shards = *std::move(shards);
    }
    return absl::OkStatus();
  }

  // An all-gather of the whole world's (variable-size) byte buffers; each member's buffer comes back
  // as its own entry.
  absl::StatusOr<MemberBuffers<uint8_t>> GatherWorld(const MemberBuffers<uint8_t>& mine) {
    ExchangeBuffers<uint8_t> send(world_, MemberBuffers<uint8_t>(world_));
    for (int r = 0; r < world_; ++r)
      if (Holds(r))
        for (int to = 0; to < world_; ++to) send[r][to] = mine[r];
    absl::StatusOr<ExchangeBuffers<uint8_t>> recv = coll_->AllToAll<uint8_t>(GroupClass::kSparseMp, World(), send, 1);
    if (!recv.ok()) return recv.status();
    MemberBuffers<uint8_t> all(world_);
    for (int r = 0; r < world_; ++r) {
      const int holder = Holds(r) ? r : -1;
      if (holder >= 0) {
        all[r] = mine[r];
        continue;
      }
      for (int to = 0; to < world_; ++to) {
        if (Holds(to)) {
          all[r] = (*recv)[to][r];
          break;
        }
      }
    }
    return all;
  }

  // Sub-block rho of a shard's rows (V3): ceil(rows/N) rows each, the last ones possibly short or empty.
  std::pair<int64_t, int64_t> SubBlock(const Shard& s, int rho) const {
    const int64_t size = (s.rows() + n_ - 1) / n_;
    return {std::min(s.row_end, s.row_begin + rho * size), std::min(s.row_end, s.row_begin + (rho + 1) * size)};
  }
  std::vector<int> ReplicaGroup(int position) const {
    std::vector<int> g;
    for (int rho = 0; rho < n_; ++rho) g.push_back(position * n_ + rho);
    return g;
  }

  // V3: every rank (m, rho) gathers its shards' sub-blocks from the replica group into a full copy;
  // `touched` moves only the rows some replica group's ids reference (other rows read NaN).
  absl::Status Gather(bool touched) {
    gathered_rows_.assign(layout_.shards.size(), {});
    for (size_t id = 0; id < layout_.shards.size(); ++id) {
      const Shard& s = layout_.shards[id];
      const int64_t e_w = StorageBytes(config_.tables[s.table].dtype);
      std::vector<int64_t>& rows = gathered_rows_[id];
      if (touched) {
        for (auto& g : groups_) {
          const std::vector<int64_t> need = g->NeededRows(static_cast<int>(id));
          rows.insert(rows.end(), need.begin(), need.end());
        }
        std::sort(rows.begin(), rows.end());
        rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
      } else {
        for (int64_t r = s.row_begin; r < s.row_end; ++r) rows.push_back(r);
      }
      MemberBuffers<float> chunks(n_);
      for (int rho = 0; rho < n_; ++rho) {
        if (!Holds(s.position * n_ + rho)) continue;
        const ShardState& ss = ranks_[s.position * n_ + rho].shards[id];
        const auto [r0, r1] = SubBlock(s, rho);
        for (int64_t r : rows) {
          if (r < r0 || r >= r1) continue;
          chunks[rho].insert(chunks[rho].end(), ss.stored.begin() + (r - r0) * s.cols(),
                             ss.stored.begin() + (r - r0 + 1) * s.cols());
        }
      }
      absl::StatusOr<MemberBuffers<float>> all_or =
          coll_->AllGather<float>(GroupClass::kSparseIntra, ReplicaGroup(s.position), chunks, e_w);
      if (!all_or.ok()) return all_or.status();
      const MemberBuffers<float>& all = *all_or;
      for (int rho = 0; rho < n_; ++rho) {
        if (!Holds(s.position * n_ + rho)) continue;
        ShardState& ss = ranks_[s.position * n_ + rho].shards[id];
        ss.weights.assign(static_cast<size_t>(s.rows() * s.cols()), std::numeric_limits<float>::quiet_NaN());
        // Rows arrive by sub-block (rho order), ascending inside each: the order of `rows`.
        for (size_t k = 0; k < rows.size(); ++k) {
          std::copy(all[rho].begin() + k * s.cols(), all[rho].begin() + (k + 1) * s.cols(),
                    ss.weights.begin() + (rows[k] - s.row_begin) * s.cols());
        }
      }
    }
    return absl::OkStatus();
  }

  void FreeGathered() {
    for (RankData& rd : ranks_) {
      for (ShardState& ss : rd.shards) std::vector<float>().swap(ss.weights);
    }
  }

  // V3: RS(N) of every updated copy; sub-block rho keeps seqsum over the replicas / N, stored RNE.
  absl::Status ScatterUpdated() {
    for (size_t id = 0; id < layout_.shards.size(); ++id) {
      const Shard& s = layout_.shards[id];
      const TableConfig& tc = config_.tables[s.table];
      const std::vector<int64_t>& rows = gathered_rows_[id];
      MemberBuffers<float> buffers(n_);
      std::vector<int64_t> chunk(n_, 0);
      for (int rho = 0; rho < n_; ++rho) {
        const auto [r0, r1] = SubBlock(s, rho);
        for (int64_t r : rows) chunk[rho] += (r >= r0 && r < r1) ? s.cols() : 0;
        if (!Holds(s.position * n_ + rho)) continue;
        const ShardState& ss = ranks_[s.position * n_ + rho].shards[id];
        for (int64_t r : rows) {
          buffers[rho].insert(buffers[rho].end(), ss.weights.begin() + (r - s.row_begin) * s.cols(),
                              ss.weights.begin() + (r - s.row_begin + 1) * s.cols());
        }
      }
      absl::StatusOr<MemberBuffers<float>> sums_or = coll_->ReduceScatter(
          GroupClass::kSparseIntra, ReplicaGroup(s.position), buffers, chunk, StorageBytes(tc.dtype));
      if (!sums_or.ok()) return sums_or.status();
      const MemberBuffers<float>& sums = *sums_or;
      for (int rho = 0; rho < n_; ++rho) {
        if (!Holds(s.position * n_ + rho)) continue;
        ShardState& ss = ranks_[s.position * n_ + rho].shards[id];
        const auto [r0, r1] = SubBlock(s, rho);
        int64_t k = 0;
        for (int64_t r : rows) {
          if (r < r0 || r >= r1) continue;
          for (int64_t j = 0; j < s.cols(); ++j) {
            ss.stored[(r - r0) * s.cols() + j] =
                embedding::StoreRne(embedding::DivRn(sums[rho][k * s.cols() + j], static_cast<float>(n_)), tc.dtype);
          }
          ++k;
        }
      }
    }
    FreeGathered();
    return absl::OkStatus();
  }

  // V2: per position, AR(N) of every shard's weights (and state) over the replicas, then / N.
  absl::Status SyncReplicas() {
    for (size_t id = 0; id < layout_.shards.size(); ++id) {
      const Shard& s = layout_.shards[id];
      const TableConfig& tc = config_.tables[s.table];
      const std::vector<int> group = ReplicaGroup(s.position);
      auto average = [&](auto field, int64_t element_bytes, bool round_to_storage) -> absl::Status {
        MemberBuffers<float> buffers(n_);
        for (int rho = 0; rho < n_; ++rho)
          if (Holds(group[rho])) buffers[rho] = field(ranks_[group[rho]].shards[id]);
        absl::StatusOr<MemberBuffers<float>> sum_or =
            coll_->AllReduce(GroupClass::kSparseReplica, group, buffers, element_bytes);
        if (!sum_or.ok()) return sum_or.status();
        const MemberBuffers<float>& sum = *sum_or;
        for (int rho = 0; rho < n_; ++rho) {
          if (!Holds(group[rho])) continue;
          std::vector<float> avg(sum[rho].size());
          for (size_t e = 0; e < avg.size(); ++e) {
            avg[e] = embedding::DivRn(sum[rho][e], static_cast<float>(n_));
            if (round_to_storage) avg[e] = embedding::StoreRne(avg[e], tc.dtype);
          }
          field(ranks_[group[rho]].shards[id]) = std::move(avg);
        }
        return absl::OkStatus();
      };
      GEMTB_RETURN_IF_ERROR(
          average([](ShardState& ss) -> std::vector<float>& { return ss.weights; }, StorageBytes(tc.dtype), true));
      if (!plan_.state_sync) continue;
      if (tc.optimizer.kind == OptimizerKind::kRowwiseAdagrad) {
        GEMTB_RETURN_IF_ERROR(average([](ShardState& ss) -> std::vector<float>& { return ss.adagrad; }, 4, false));
      }
      if (tc.optimizer.kind == OptimizerKind::kAdam) {
        // m and v travel as one buffer of 8 * rows * cols bytes.
        std::vector<std::vector<float>> joint(n_);
        for (int rho = 0; rho < n_; ++rho) {
          if (!Holds(group[rho])) continue;
          ShardState& ss = ranks_[group[rho]].shards[id];
          joint[rho] = ss.adam_m;
          joint[rho].insert(joint[rho].end(), ss.adam_v.begin(), ss.adam_v.end());
        }
        absl::StatusOr<MemberBuffers<float>> sum_or = coll_->AllReduce(GroupClass::kSparseReplica, group, joint, 4);
        if (!sum_or.ok()) return sum_or.status();
        const MemberBuffers<float>& sum = *sum_or;
        for (int rho = 0; rho < n_; ++rho) {
          if (!Holds(group[rho])) continue;
          ShardState& ss = ranks_[group[rho]].shards[id];
          const size_t half = ss.adam_m.size();
          for (size_t e = 0; e < half; ++e) {
            ss.adam_m[e] = embedding::DivRn(sum[rho][e], static_cast<float>(n_));
            ss.adam_v[e] = embedding::DivRn(sum[rho][half + e], static_cast<float>(n_));
          }
        }
      }
    }
    return absl::OkStatus();
  }

  EmbeddingState AssembleReplica(int rho, int64_t steps_done, ShardedRun* run) const {
    EmbeddingState st;
    st.step = initial_step_ + steps_done;
    if (run != nullptr) run->per_shard_adagrad.assign(config_.tables.size(), {});
    for (size_t t = 0; t < config_.tables.size(); ++t) {
      const TableConfig& tc = config_.tables[t];
      const TableLayout& tl = layout_.tables[t];
      TableState ts;
      const size_t elems = static_cast<size_t>(tc.rows * tc.dim);
      ts.weights.assign(elems, 0.0f);
      const bool adagrad = tc.optimizer.kind == OptimizerKind::kRowwiseAdagrad;
      const bool adam = tc.optimizer.kind == OptimizerKind::kAdam;
      if (adagrad) ts.adagrad.assign(static_cast<size_t>(tc.rows), 0.0f);
      if (adam) {
        ts.adam_m.assign(elems, 0.0f);
        ts.adam_v.assign(elems, 0.0f);
      }
      const bool per_shard = adagrad && plan_.cw_state == CwState::kPerShard && tl.col_shards > 1;
      if (per_shard && run != nullptr)
        run->per_shard_adagrad[t].assign(static_cast<size_t>(tl.col_shards * tc.rows), 0.0f);
      for (int id : tl.shards) {
        const Shard& s = layout_.shards[id];
        if (tl.type == ShardingType::kDataParallel && s.position != 0) continue;
        const ShardState& ss = ranks_[s.position * n_ + rho].shards[id];
        if (plan_.fully_sharded) {
          for (int r2 = 0; r2 < n_; ++r2) {
            const auto [r0, r1] = SubBlock(s, r2);
            PasteRect(ranks_[s.position * n_ + r2].shards[id].stored, tc.dim, s, r0, r1, &ts.weights);
          }
        } else {
          PasteRect(ss.weights, tc.dim, s, s.row_begin, s.row_end, &ts.weights);
        }
        if (adagrad && s.col_shard == 0)
          std::copy(ss.adagrad.begin(), ss.adagrad.end(), ts.adagrad.begin() + s.row_begin);
        if (per_shard && run != nullptr) {
          std::copy(ss.adagrad.begin(), ss.adagrad.end(),
                    run->per_shard_adagrad[t].begin() + s.col_shard * tc.rows + s.row_begin);
        }
        if (adam) {
          PasteRect(ss.adam_m, tc.dim, s, s.row_begin, s.row_end, &ts.adam_m);
          PasteRect(ss.adam_v, tc.dim, s, s.row_begin, s.row_end, &ts.adam_v);
        }
        ts.adam_step = ss.adam_step;
      }
      st.tables.push_back(std::move(ts));
    }
    return st;
  }

  const EmbeddingConfig& config_;
  const ShardingPlanSpec& plan_;
  GroupLayout layout_;
  int world_, m_, n_;
  CommReport report_;
  VirtualCollectives virtual_;
  Collectives* coll_;
  GroupEnv env_;
  std::vector<RankData> ranks_;
  std::vector<std::unique_ptr<MpGroup>> groups_;
  std::vector<std::vector<int64_t>> gathered_rows_;
  int64_t initial_step_ = 0;
  int64_t batch_stride_ = 0;
  KjtLayout batch_layout_;
};

}  // namespace

struct ShardedExecutor::Impl {
  const EmbeddingConfig* config = nullptr;
  const ShardingPlanSpec* plan = nullptr;
  int world_size = 0;
  std::unique_ptr<Runner> runner;
  int64_t forwards = 0;  // Forward calls so far: the step of the next one
  int64_t updates = 0;   // Backward calls so far: the step of the oldest outstanding forward
  // The outstanding forwards' batches, oldest first (at most two); the runner holds the newest's
  // context and `aside` the older one's.
  std::deque<std::pair<KeyedJaggedTensor, KjtLayout>> outstanding;
  Runner::BatchContext aside;
};

ShardedExecutor::~ShardedExecutor() = default;

absl::StatusOr<std::unique_ptr<ShardedExecutor>> ShardedExecutor::Create(const EmbeddingConfig& config,
                                                                         const ShardingPlanSpec& plan, int world_size,
                                                                         int gpus_per_host,
                                                                         const EmbeddingState& initial,
                                                                         Collectives* collectives) {
  GEMTB_RETURN_IF_ERROR(ValidateEmbeddingConfig(config));
  GEMTB_RETURN_IF_ERROR(ValidateShardingPlan(plan, PlanTablesOf(config), world_size, gpus_per_host));
  GEMTB_RETURN_IF_ERROR(CheckState(config, initial));
  if (collectives != nullptr && plan.fully_sharded && plan.gather == GatherMode::kTouched) {
    return Bad(
        "plan.gather: 'touched' runs in one process only (each replica group's ids would have to reach "
        "every rank); use 'all' across processes");
  }
  absl::StatusOr<GroupLayout> group = BuildGroupLayout(plan, config, world_size, gpus_per_host);
  if (!group.ok()) return group.status();
  std::unique_ptr<ShardedExecutor> e(new ShardedExecutor());
  e->impl_ = std::make_unique<Impl>();
  e->impl_->config = &config;
  e->impl_->plan = &plan;
  e->impl_->world_size = world_size;
  e->impl_->runner = std::make_unique<Runner>(config, plan, *std::move(group), world_size, collectives);
  e->impl_->runner->Place(initial);
  return e;
}

absl::StatusOr<EmbeddingOutput> ShardedExecutor::Forward(const KeyedJaggedTensor& global_kjt) {
  Impl& im = *impl_;
  KjtLayout layout;
  GEMTB_RETURN_IF_ERROR(ValidateKjt(global_kjt, *im.config, &layout));
  if (global_kjt.stride % im.world_size != 0) {
    return Bad(absl::StrCat("kjt.stride: B=", global_kjt.stride, " is not divisible by world_size ", im.world_size));
  }
  if (im.outstanding.size() == 2)
    return absl::FailedPreconditionError("sharded executor: a third Forward before the first one's Backward");
  if (im.outstanding.size() == 1) {
    if (im.plan->fully_sharded)
      return absl::FailedPreconditionError(
          "sharded executor: a second Forward before a Backward under a fully sharded plan (its backward would "
          "update a gathered copy of the newer batch's rows)");
    im.runner->SwapBatch(im.aside);
  }
  im.runner->SetBatch(global_kjt, layout);
  im.outstanding.emplace_back(global_kjt, std::move(layout));
  GEMTB_RETURN_IF_ERROR(im.runner->Forward(im.forwards));
  ++im.forwards;
  return im.runner->Output();
}

absl::Status ShardedExecutor::Backward(const EmbeddingGrads& global_grads) {
  Impl& im = *impl_;
  if (im.outstanding.empty())
    return absl::FailedPreconditionError("sharded executor: Backward without a Forward before it");
  const auto& [kjt, layout] = im.outstanding.front();
  int64_t width = 0;
  CollectTableFeatures(*im.config, layout, &width);
  GEMTB_RETURN_IF_ERROR(CheckGrads(*im.config, kjt, layout, width, global_grads));
  const bool older = im.outstanding.size() == 2;
  if (older) im.runner->SwapBatch(im.aside);  // the runner holds the oldest batch
  im.runner->SetGrads(global_grads);
  absl::Status s = im.runner->Backward(im.updates);
  if (older) im.runner->SwapBatch(im.aside);  // and the newest again
  GEMTB_RETURN_IF_ERROR(s);
  ++im.updates;
  im.outstanding.pop_front();
  return absl::OkStatus();
}

absl::StatusOr<ShardedRun> ShardedExecutor::Result() { return impl_->runner->Finish(impl_->updates); }

absl::StatusOr<ShardedRun> RunSharded(const EmbeddingConfig& config, const ShardingPlanSpec& plan, int world_size,
                                      int gpus_per_host, const EmbeddingState& initial,
                                      const KeyedJaggedTensor& global_kjt, const EmbeddingGrads* global_grads,
                                      int steps, int threads) {
  if (steps < 1) return Bad(absl::StrCat("steps=", steps, " must be >= 1"));
  if (threads < 0) return Bad(absl::StrCat("threads=", threads, " must be >= 0"));
  absl::StatusOr<std::unique_ptr<ShardedExecutor>> executor =
      ShardedExecutor::Create(config, plan, world_size, gpus_per_host, initial);
  if (!executor.ok()) return executor.status();
  absl::StatusOr<ShardedRun> run;
  tbb::task_arena arena(threads > 0 ? threads : tbb::info::default_concurrency());
  arena.execute([&] {
    for (int s = 0; s < steps; ++s) {
      absl::StatusOr<EmbeddingOutput> out = (*executor)->Forward(global_kjt);
      if (!out.ok()) {
        run = out.status();
        return;
      }
      if (global_grads == nullptr) continue;
      if (absl::Status st = (*executor)->Backward(*global_grads); !st.ok()) {
        run = st;
        return;
      }
    }
    run = (*executor)->Result();
  });
  return run;
}

}  // namespace gemtb::reference
