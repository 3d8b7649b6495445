#include "gpu/embedding/sharded_tbe.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <deque>

#include "absl/strings/str_cat.h"
#include "gpu/common/device_buffer.h"
#include "gpu/embedding/host_tables.h"
#include "gpu/embedding/shard_launch.h"
#include "model/common/status_macros.h"

namespace gemtb::gpu::embedding {
namespace {

std::vector<int64_t> Offsets(const std::vector<int64_t>& counts) {
  std::vector<int64_t> out(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) out[i] = out[i - 1] + counts[i - 1];
  return out;
}

int64_t Total(const std::vector<int64_t>& counts) {
  int64_t t = 0;
  for (int64_t c : counts) t += c;
  return t;
}

std::vector<int64_t> Scaled(const std::vector<int64_t>& counts, int64_t factor) {
  std::vector<int64_t> out(counts);
  for (int64_t& c : out) c *= factor;
  return out;
}

}  // namespace

struct ShardedDeviceTbe::State {
  EmbeddingConfig config;
  ShardingPlanSpec plan;
  ShardRouting routing;
  ShardExchange* exchange = nullptr;
  int64_t local_batch = 0;
  int replicas = 1;                // N
  int rho = 0;                     // this rank's replica
  std::vector<int> mp_ranks;       // the MP group's ranks by position: m*N + rho
  std::vector<int> replica_ranks;  // this position's replicas: m*N + r
  int64_t steps_run = 0;           // updates since Create (V2's sync period counts them)
  // V3: per held shard, this rank's sub-block of the weights in storage bytes.
  std::deque<DeviceArray<uint8_t>> stored;
  // V3 gather=touched: per held shard, this step's rows that any replica reads or updates (the
  // replicas' union, ascending), on the host and the device.
  bool touched_mode = false;
  std::vector<std::vector<int64_t>> touched_rows;
  std::deque<DeviceArray<int64_t>> d_touched_rows;
  std::vector<std::unique_ptr<DeviceTbe>> shards;  // one per held shard
  // A forward's plans and buffers, which its backward uses: the last Forward's (`batch`), and a
  // second one between its forward and backward (the semi-synchronous pipeline's) held `aside`.
  struct Batch {
    bool has_output = false;
    RequesterStep req;
    HolderStep hold;
    DeviceArray<CopyRun> d_req_runs, d_hold_runs;
    DeviceArray<int64_t> d_req_row_offsets;
    DeviceArray<PooledSegment> d_segments;
    DeviceArray<PooledPiece> d_pieces;
    DeviceArray<int32_t> d_bag_counts;
    DeviceArray<float> pooled;                // [b, W]
    std::deque<DeviceArray<float>> sequence;  // per NONE key [len, D]
    void Swap(Batch& o) {
      std::swap(has_output, o.has_output);
      std::swap(req, o.req);
      std::swap(hold, o.hold);
      d_req_runs.Swap(o.d_req_runs);
      d_hold_runs.Swap(o.d_hold_runs);
      d_req_row_offsets.Swap(o.d_req_row_offsets);
      d_segments.Swap(o.d_segments);
      d_pieces.Swap(o.d_pieces);
      d_bag_counts.Swap(o.d_bag_counts);
      pooled.Swap(o.pooled);
      sequence.swap(o.sequence);
    }
  } batch, aside;
  // Exchanges the two, with every held shard's input.
  void SwapBatch() {
    batch.Swap(aside);
    for (const std::unique_ptr<DeviceTbe>& t : shards) t->SwapInput();
  }
  // The backward's holder-side gradients (alive until the next step).
  std::deque<DeviceArray<float>> shard_grads;
  // The copy kernels' tables of array pointers (alive until the step's last launch has run).
  std::deque<DeviceArray<float*>> pointer_tables;

  explicit State(ShardRouting r) : routing(std::move(r)) {}

  ShardedDeviceTbe::CollectiveHook hook;
  absl::Status Collective(const char* name, const char* group, const std::function<absl::Status()>& call) {
    return hook ? hook(name, group, call) : call();
  }

  const Shard& ShardOf(size_t i) const { return routing.layout().shards[static_cast<size_t>(routing.held()[i].shard)]; }
  int64_t SubRows(size_t i) const { return (ShardOf(i).rows() + replicas - 1) / replicas; }
  // Rows [first, end) of held shard i's sub-block r (the last ones may be short or empty).
  std::pair<int64_t, int64_t> SubBlock(size_t i, int r) const {
    const int64_t rows = ShardOf(i).rows(), sub = SubRows(i);
    return {std::min(rows, r * sub), std::min(rows, (r + 1) * sub)};
  }
  int64_t ElementSize(size_t i) const { return ElementBytes(routing.held()[i].config.tables[0].dtype); }

  // The rows of held shard i the replicas move this step (V3 touched: touched_rows[i]; else every
  // row, by index): the range [lo, hi) of them that lies in replica r's sub-block.
  std::pair<int64_t, int64_t> MovedRange(size_t i, int r) const {
    const auto [r0, r1] = SubBlock(i, r);
    if (!touched_mode) return {r0, r1};
    const std::vector<int64_t>& u = touched_rows[i];
    return {std::lower_bound(u.begin(), u.end(), r0) - u.begin(), std::lower_bound(u.begin(), u.end(), r1) - u.begin()};
  }
  int64_t MovedRows(size_t i) const {
    return touched_mode ? static_cast<int64_t>(touched_rows[i].size()) : ShardOf(i).rows();
  }

  // V3 gather=touched: the replicas' union of the rows this step's ids reach in each held shard.
  absl::Status UnionTouched() {
    const size_t h = shards.size();
    std::vector<std::vector<int64_t>> mine(h);
    std::vector<int64_t> counts(h);
    for (size_t i = 0; i < h; ++i) {
      for (int64_t v : batch.hold.inputs[i].values)
        if (v >= 0) mine[i].push_back(v);
      std::sort(mine[i].begin(), mine[i].end());
      mine[i].erase(std::unique(mine[i].begin(), mine[i].end()), mine[i].end());
      counts[i] = static_cast<int64_t>(mine[i].size());
    }
    DeviceArray<int64_t> d_counts, d_all_counts;
    GEMTB_RETURN_IF_ERROR(d_counts.Upload(counts, "touched row counts"));
    GEMTB_RETURN_IF_ERROR(
        d_all_counts.Allocate(std::max<size_t>(h * static_cast<size_t>(replicas), 1), "every replica's counts"));
    GEMTB_RETURN_IF_ERROR(Collective("touched_rows.counts_all_gather", "sparse-intra", [&] {
      return exchange->AllGatherAmong(replica_ranks, d_counts.get(), static_cast<int64_t>(h) * 8, d_all_counts.get(),
                                      nullptr);
    }));
    GEMTB_RETURN_IF_ERROR(exchange->Synchronize(nullptr, "the touched rows' counts"));
    std::vector<int64_t> all_counts;
    GEMTB_RETURN_IF_ERROR(d_all_counts.Download(all_counts, "every replica's counts"));
    int64_t widest = 1;
    for (int r = 0; r < replicas; ++r) {
      int64_t total = 0;
      for (size_t i = 0; i < h; ++i) total += all_counts[static_cast<size_t>(r) * h + i];
      widest = std::max(widest, total);
    }
    std::vector<int64_t> packed(static_cast<size_t>(widest), -1);
    size_t at = 0;
    for (size_t i = 0; i < h; ++i) {
      std::copy(mine[i].begin(), mine[i].end(), packed.begin() + static_cast<int64_t>(at));
      at += mine[i].size();
    }
    DeviceArray<int64_t> d_packed, d_all;
    GEMTB_RETURN_IF_ERROR(d_packed.Upload(packed, "touched rows"));
    GEMTB_RETURN_IF_ERROR(d_all.Allocate(static_cast<size_t>(widest * replicas), "every replica's touched rows"));
    GEMTB_RETURN_IF_ERROR(Collective("touched_rows.all_gather", "sparse-intra", [&] {
      return exchange->AllGatherAmong(replica_ranks, d_packed.get(), widest * 8, d_all.get(), nullptr);
    }));
    GEMTB_RETURN_IF_ERROR(exchange->Synchronize(nullptr, "the touched rows"));
    std::vector<int64_t> all;
    GEMTB_RETURN_IF_ERROR(d_all.Download(all, "every replica's touched rows"));
    touched_rows.assign(h, {});
    d_touched_rows.clear();
    for (int r = 0; r < replicas; ++r) {
      int64_t k = static_cast<int64_t>(r) * widest;
      for (size_t i = 0; i < h; ++i) {
        const int64_t n = all_counts[static_cast<size_t>(r) * h + i];
        touched_rows[i].insert(touched_rows[i].end(), all.begin() + k, all.begin() + k + n);
        k += n;
      }
    }
    for (size_t i = 0; i < h; ++i) {
      std::vector<int64_t>& u = touched_rows[i];
      std::sort(u.begin(), u.end());
      u.erase(std::unique(u.begin(), u.end()), u.end());
      GEMTB_RETURN_IF_ERROR(
          d_touched_rows.emplace_back().Upload(u.empty() ? std::vector<int64_t>{0} : u, "touched rows"));
    }
    return absl::OkStatus();
  }

  // V3: every held shard's sub-blocks gathered from the replicas into its DeviceTbe (`touched`: only
  // this step's touched rows; the others keep what they held, which no id reads).
  absl::Status GatherShards(bool touched) {
    for (size_t i = 0; i < shards.size(); ++i) {
      const int64_t cols = ShardOf(i).cols(), rows = ShardOf(i).rows(), row_bytes = cols * ElementSize(i);
      absl::StatusOr<void*> weights = shards[i]->DeviceWeights(0);
      if (!weights.ok()) return weights.status();
      if (!touched) {
        const int64_t bytes = SubRows(i) * row_bytes;
        DeviceArray<uint8_t> all;
        GEMTB_RETURN_IF_ERROR(
            all.Allocate(static_cast<size_t>(std::max<int64_t>(bytes * replicas, 1)), "gathered sub-blocks"));
        GEMTB_RETURN_IF_ERROR(Collective("shards.all_gather", "sparse-intra", [&] {
          return exchange->AllGatherAmong(replica_ranks, stored[i].get(), bytes, all.get(), nullptr);
        }));
        GEMTB_RETURN_IF_ERROR(exchange->Synchronize(nullptr, "the shards' all-gather"));
        // Sub-blocks are consecutive rows in replica order: the first rows*cols values are the shard.
        GEMTB_RETURN_IF_ERROR(
            CudaOk(cudaMemcpy(*weights, all.get(), static_cast<size_t>(rows * row_bytes), cudaMemcpyDeviceToDevice),
                   "the gathered shard into its table"));
        continue;
      }
      // Each replica sends every other its touched rows (those in its sub-block), in row order.
      const auto [lo, hi] = MovedRange(i, rho);
      const int64_t r0 = SubBlock(i, rho).first;
      DeviceArray<uint8_t> send, recv;
      GEMTB_RETURN_IF_ERROR(
          send.Allocate(static_cast<size_t>(std::max<int64_t>((hi - lo) * row_bytes, 1)), "touched rows to send"));
      GEMTB_RETURN_IF_ERROR(
          recv.Allocate(static_cast<size_t>(std::max<int64_t>(MovedRows(i) * row_bytes, 1)), "touched rows"));
      GEMTB_RETURN_IF_ERROR(LaunchCopyRows(stored[i].get(), d_touched_rows[i].get() + lo, r0, send.get(), nullptr, 0,
                                           hi - lo, row_bytes));
      std::vector<int64_t> send_counts(static_cast<size_t>(replicas), (hi - lo) * row_bytes),
          send_offsets(static_cast<size_t>(replicas), 0), recv_counts(static_cast<size_t>(replicas)),
          recv_offsets(static_cast<size_t>(replicas));
      for (int r = 0; r < replicas; ++r) {
        const auto [a, z] = MovedRange(i, r);
        recv_counts[static_cast<size_t>(r)] = (z - a) * row_bytes;
        recv_offsets[static_cast<size_t>(r)] = a * row_bytes;
      }
      GEMTB_RETURN_IF_ERROR(Collective("shards.gather_touched", "sparse-intra", [&] {
        return exchange->AllToAllV(replica_ranks, send.get(), send_counts, send_offsets, recv.get(), recv_counts,
                                   recv_offsets, nullptr);
      }));
      GEMTB_RETURN_IF_ERROR(
          LaunchCopyRows(recv.get(), nullptr, 0, *weights, d_touched_rows[i].get(), 0, MovedRows(i), row_bytes));
      GEMTB_RETURN_IF_ERROR(exchange->Synchronize(nullptr, "the touched rows' gather"));
    }
    return absl::OkStatus();
  }

  // The replicas' mean of held shard i's moved rows (`values`: [MovedRows(i), width] fp32): each rank
  // receives every replica's rows of its own sub-block and adds them in replica order (an
  // all-to-all); `mean` gets its sub-block's moved rows' mean, rounded to `dtype` when `round`.
  absl::Status SubBlockMean(size_t i, const float* values, int64_t width, bool round, ElementType dtype,
                            DeviceArray<float>& mean) {
    std::vector<int64_t> send_counts(static_cast<size_t>(replicas)), send_offsets(static_cast<size_t>(replicas));
    for (int r = 0; r < replicas; ++r) {
      const auto [r0, r1] = MovedRange(i, r);
      send_counts[static_cast<size_t>(r)] = (r1 - r0) * width * 4;
      send_offsets[static_cast<size_t>(r)] = r0 * width * 4;
    }
    const auto [m0, m1] = MovedRange(i, rho);
    const int64_t mine = (m1 - m0) * width;
    std::vector<int64_t> recv_counts(static_cast<size_t>(replicas), mine * 4),
        recv_offsets(static_cast<size_t>(replicas));
    for (int r = 0; r < replicas; ++r) recv_offsets[static_cast<size_t>(r)] = r * mine * 4;
    DeviceArray<float> pieces;
    GEMTB_RETURN_IF_ERROR(
        pieces.Allocate(static_cast<size_t>(std::max<int64_t>(mine * replicas, 1)), "replicas' sub-blocks"));
    GEMTB_RETURN_IF_ERROR(mean.Allocate(static_cast<size_t>(std::max<int64_t>(mine, 1)), "replicas' mean"));
    GEMTB_RETURN_IF_ERROR(Collective("replicas.sub_block_all_to_all", "sparse-intra", [&] {
      return exchange->AllToAllV(replica_ranks, values, send_counts, send_offsets, pieces.get(), recv_counts,
                                 recv_offsets, nullptr);
    }));
    GEMTB_RETURN_IF_ERROR(LaunchReplicaMean(pieces.get(), replicas, mine, round, dtype, mean.get()));
    return exchange->Synchronize(nullptr, "the replicas' sub-block all-to-all");
  }

  // V3 after an update: each rank keeps the replicas' mean of its sub-block, rounded to storage.
  absl::Status ScatterUpdated() {
    for (size_t i = 0; i < shards.size(); ++i) {
      const int64_t cols = ShardOf(i).cols(), rows = ShardOf(i).rows();
      const ElementType dtype = routing.held()[i].config.tables[0].dtype;
      absl::StatusOr<void*> weights = shards[i]->DeviceWeights(0);
      if (!weights.ok()) return weights.status();
      DeviceArray<float> wide;
      GEMTB_RETURN_IF_ERROR(wide.Allocate(static_cast<size_t>(std::max<int64_t>(rows * cols, 1)), "updated copy"));
      GEMTB_RETURN_IF_ERROR(LaunchWiden(*weights, dtype, rows * cols, wide.get()));
      DeviceArray<float> mean;
      const auto [m0, m1] = MovedRange(i, rho);
      if (!touched_mode) {
        GEMTB_RETURN_IF_ERROR(SubBlockMean(i, wide.get(), cols, true, dtype, mean));
        GEMTB_RETURN_IF_ERROR(LaunchNarrow(mean.get(), (m1 - m0) * cols, dtype, stored[i].get()));
        continue;
      }
      // Touched rows only: packed in row order, averaged, and put back at their places in the sub-block.
      DeviceArray<float> packed;
      DeviceArray<uint8_t> narrow;
      GEMTB_RETURN_IF_ERROR(
          packed.Allocate(static_cast<size_t>(std::max<int64_t>(MovedRows(i) * cols, 1)), "touched rows"));
      GEMTB_RETURN_IF_ERROR(
          LaunchCopyRows(wide.get(), d_touched_rows[i].get(), 0, packed.get(), nullptr, 0, MovedRows(i), cols * 4));
      GEMTB_RETURN_IF_ERROR(SubBlockMean(i, packed.get(), cols, true, dtype, mean));
      GEMTB_RETURN_IF_ERROR(narrow.Allocate(
          static_cast<size_t>(std::max<int64_t>((m1 - m0) * cols * ElementSize(i), 1)), "touched means"));
      GEMTB_RETURN_IF_ERROR(LaunchNarrow(mean.get(), (m1 - m0) * cols, dtype, narrow.get()));
      GEMTB_RETURN_IF_ERROR(LaunchCopyRows(narrow.get(), nullptr, 0, stored[i].get(), d_touched_rows[i].get() + m0,
                                           SubBlock(i, rho).first, m1 - m0, cols * ElementSize(i)));
    }
    return absl::OkStatus();
  }

  // V2 every sync_period-th update: the replicas' mean of every shard (and of its rowwise-Adagrad or
  // Adam state with state_sync) on every replica.
  absl::Status SyncReplicas() {
    for (size_t i = 0; i < shards.size(); ++i) {
      const int64_t cols = ShardOf(i).cols(), rows = ShardOf(i).rows();
      if (rows == 0) continue;
      const TableConfig& tc = routing.held()[i].config.tables[0];
      absl::StatusOr<void*> weights = shards[i]->DeviceWeights(0);
      if (!weights.ok()) return weights.status();
      DeviceArray<float> wide;
      GEMTB_RETURN_IF_ERROR(wide.Allocate(static_cast<size_t>(rows * cols), "shard copy"));
      GEMTB_RETURN_IF_ERROR(LaunchWiden(*weights, tc.dtype, rows * cols, wide.get()));
      GEMTB_RETURN_IF_ERROR(AverageInPlace(i, wide.get(), cols, true, tc.dtype));
      GEMTB_RETURN_IF_ERROR(LaunchNarrow(wide.get(), rows * cols, tc.dtype, *weights));
      if (!plan.state_sync) continue;
      absl::StatusOr<std::vector<float*>> states = shards[i]->DeviceOptimizerState(0);
      if (!states.ok()) return states.status();
      const int64_t widths[3] = {1, cols, cols};  // rowwise Adagrad [rows]; Adam m, v [rows, cols]
      for (size_t k = 0; k < states->size(); ++k) {
        if ((*states)[k] == nullptr) continue;
        GEMTB_RETURN_IF_ERROR(AverageInPlace(i, (*states)[k], widths[k], false, ElementType::kFloat32));
      }
    }
    return absl::OkStatus();
  }

  // `values` [rows, width] fp32 becomes the replicas' mean: the sub-blocks' means, all-gathered.
  absl::Status AverageInPlace(size_t i, float* values, int64_t width, bool round, ElementType dtype) {
    DeviceArray<float> mean;
    GEMTB_RETURN_IF_ERROR(SubBlockMean(i, values, width, round, dtype, mean));
    const int64_t sub = SubRows(i) * width;
    DeviceArray<float> padded, all;
    GEMTB_RETURN_IF_ERROR(padded.Allocate(static_cast<size_t>(std::max<int64_t>(sub, 1)), "padded mean"));
    GEMTB_RETURN_IF_ERROR(all.Allocate(static_cast<size_t>(std::max<int64_t>(sub * replicas, 1)), "gathered means"));
    const auto [m0, m1] = SubBlock(i, rho);
    if (m1 > m0) {
      GEMTB_RETURN_IF_ERROR(CudaOk(
          cudaMemcpy(padded.get(), mean.get(), static_cast<size_t>((m1 - m0) * width) * 4, cudaMemcpyDeviceToDevice),
          "the mean into its padded block"));
    }
    GEMTB_RETURN_IF_ERROR(Collective("replicas.mean_all_gather", "sparse-replica", [&] {
      return exchange->AllGatherAmong(replica_ranks, padded.get(), sub * 4, all.get(), nullptr);
    }));
    GEMTB_RETURN_IF_ERROR(exchange->Synchronize(nullptr, "the replicas' means"));
    return CudaOk(
        cudaMemcpy(values, all.get(), static_cast<size_t>(ShardOf(i).rows() * width) * 4, cudaMemcpyDeviceToDevice),
        "the gathered means");
  }

  absl::StatusOr<DeviceArray<float*>*> PointerTable(const std::vector<float*>& ptrs) {
    pointer_tables.emplace_back();
    GEMTB_RETURN_IF_ERROR(pointer_tables.back().Upload(ptrs, "array table"));
    return &pointer_tables.back();
  }
};

ShardedDeviceTbe::ShardedDeviceTbe(std::unique_ptr<State> state) : s_(std::move(state)) {}
ShardedDeviceTbe::~ShardedDeviceTbe() = default;
const ShardRouting& ShardedDeviceTbe::routing() const { return s_->routing; }

absl::StatusOr<std::unique_ptr<ShardedDeviceTbe>> ShardedDeviceTbe::Create(
    const EmbeddingConfig& config, const ShardingPlanSpec& plan, int gpus_per_host, int64_t local_batch,
    ShardExchange* exchange, absl::Span<const HostTable> held_tables, int64_t step) {
  if (exchange == nullptr) return absl::InvalidArgumentError("exchange: null");
  GEMTB_RETURN_IF_ERROR(CanRun(config));
  const int world = exchange->world_size(), m = MpGroupSize(plan, world);
  if (m < 1 || world % m != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan.mp_group=", plan.mp_group, ": does not divide the world of ", world));
  }
  const int n = world / m, position = exchange->rank() / n;
  absl::StatusOr<ShardRouting> routing =
      ShardRouting::Create(config, plan, world, gpus_per_host, position, local_batch);
  if (!routing.ok()) return routing.status();
  auto s = std::make_unique<State>(*std::move(routing));
  s->config = config;
  s->plan = plan;
  s->exchange = exchange;
  s->local_batch = local_batch;
  s->replicas = n;
  s->rho = exchange->rank() % n;
  s->touched_mode = plan.fully_sharded && plan.gather == GatherMode::kTouched;
  for (int q = 0; q < m; ++q) s->mp_ranks.push_back(q * n + s->rho);
  for (int r = 0; r < n; ++r) s->replica_ranks.push_back(position * n + r);
  if (!held_tables.empty() && held_tables.size() != s->routing.held().size()) {
    return absl::InvalidArgumentError(absl::StrCat("held_tables: ", held_tables.size(), " given, position ",
                                                   exchange->rank(), " holds ", s->routing.held().size(), " shards"));
  }
  for (size_t i = 0; i < s->routing.held().size(); ++i) {
    const HeldShard& h = s->routing.held()[i];
    TbeOptions options;
    options.placement = {h.placement};
    options.batch_block = local_batch;
    options.split_update = h.split_update;
    absl::StatusOr<std::unique_ptr<DeviceTbe>> tbe = DeviceTbe::Create(
        h.config, held_tables.empty() ? absl::Span<const HostTable>{} : held_tables.subspan(i, 1), step, options);
    if (!tbe.ok()) return tbe.status();
    s->shards.push_back(*std::move(tbe));
  }
  if (plan.fully_sharded) {
    // V3: this rank keeps its sub-block of each shard (cut from the full copy it starts with).
    for (size_t i = 0; i < s->shards.size(); ++i) {
      const int64_t cols = s->ShardOf(i).cols(), e = s->ElementSize(i);
      const auto [r0, r1] = s->SubBlock(i, s->rho);
      DeviceArray<uint8_t>& stored = s->stored.emplace_back();
      GEMTB_RETURN_IF_ERROR(
          stored.Allocate(static_cast<size_t>(std::max<int64_t>(s->SubRows(i) * cols * e, 1)), "stored sub-block"));
      GEMTB_RETURN_IF_ERROR(stored.Zero("stored sub-block"));
      absl::StatusOr<void*> weights = s->shards[i]->DeviceWeights(0);
      if (!weights.ok()) return weights.status();
      if (r1 > r0) {
        GEMTB_RETURN_IF_ERROR(CudaOk(cudaMemcpy(stored.get(), static_cast<const uint8_t*>(*weights) + r0 * cols * e,
                                                static_cast<size_t>((r1 - r0) * cols * e), cudaMemcpyDeviceToDevice),
                                     "the stored sub-block"));
      }
    }
  }
  return std::unique_ptr<ShardedDeviceTbe>(new ShardedDeviceTbe(std::move(s)));
}

absl::StatusOr<ShardedDeviceTbe::RoutedBatch> ShardedDeviceTbe::Route(const KjtView& kjt) const {
  RoutedBatch routed;
  absl::StatusOr<KjtLayout> layout = CheckKjt(s_->config, kjt);
  if (!layout.ok()) return layout.status();
  routed.layout = *std::move(layout);
  absl::StatusOr<RequesterStep> step = s_->routing.RouteIds(kjt, routed.layout);
  if (!step.ok()) return step.status();
  routed.step = *std::move(step);
  return routed;
}

absl::Status ShardedDeviceTbe::Forward(const KjtView& kjt) {
  absl::StatusOr<RoutedBatch> routed = Route(kjt);
  if (!routed.ok()) return routed.status();
  return Forward(*std::move(routed));
}

absl::Status ShardedDeviceTbe::Forward(RoutedBatch routed) {
  State& s = *s_;
  s.batch.has_output = false;
  if (routed.step.id_counts.size() != static_cast<size_t>(s.routing.group_size())) {
    return absl::InvalidArgumentError("routed: not a batch routed by this module");
  }
  const KjtLayout* layout = &routed.layout;
  s.batch.req = std::move(routed.step);
  const int m = s.routing.group_size();
  if (s.plan.fully_sharded && !s.touched_mode) GEMTB_RETURN_IF_ERROR(s.GatherShards(false));
  // Ids: the byte counts first (each holder learns what every source sends), then the bytes.
  const std::vector<int64_t>& send_bytes = s.batch.req.id_counts;
  DeviceArray<int64_t> d_counts_send, d_counts_recv;
  GEMTB_RETURN_IF_ERROR(d_counts_send.Upload(send_bytes, "id byte counts"));
  GEMTB_RETURN_IF_ERROR(d_counts_recv.Allocate(static_cast<size_t>(m), "received id byte counts"));
  const std::vector<int64_t> eight(static_cast<size_t>(m), 8);
  const std::vector<int64_t> eight_offsets = Offsets(eight);
  GEMTB_RETURN_IF_ERROR(s.Collective("ids.counts_all_to_all", "sparse-mp", [&] {
    return s.exchange->AllToAllV(s.mp_ranks, d_counts_send.get(), eight, eight_offsets, d_counts_recv.get(), eight,
                                 eight_offsets, nullptr);
  }));
  GEMTB_RETURN_IF_ERROR(s.exchange->Synchronize(nullptr, "the ids' counts all-to-all"));
  std::vector<int64_t> recv_bytes;
  GEMTB_RETURN_IF_ERROR(d_counts_recv.Download(recv_bytes, "received id byte counts"));
  DeviceArray<uint8_t> d_ids_send, d_ids_recv;
  GEMTB_RETURN_IF_ERROR(d_ids_send.Upload(s.batch.req.id_bytes, "ids to send"));
  GEMTB_RETURN_IF_ERROR(d_ids_recv.Allocate(static_cast<size_t>(Total(recv_bytes)), "received ids"));
  GEMTB_RETURN_IF_ERROR(s.Collective("ids.all_to_all", "sparse-mp", [&] {
    return s.exchange->AllToAllV(s.mp_ranks, d_ids_send.get(), send_bytes, Offsets(send_bytes), d_ids_recv.get(),
                                 recv_bytes, Offsets(recv_bytes), nullptr);
  }));
  GEMTB_RETURN_IF_ERROR(s.exchange->Synchronize(nullptr, "the ids all-to-all"));
  std::vector<uint8_t> received_flat;
  GEMTB_RETURN_IF_ERROR(d_ids_recv.Download(received_flat, "received ids"));
  std::vector<absl::Span<const uint8_t>> received(static_cast<size_t>(m));  // each source's bytes
  {
    size_t at = 0;
    for (int p = 0; p < m; ++p) {
      const size_t n = static_cast<size_t>(recv_bytes[static_cast<size_t>(p)]);
      received[static_cast<size_t>(p)] = absl::MakeConstSpan(received_flat).subspan(at, n);
      at += n;
    }
  }
  absl::StatusOr<HolderStep> hold = s.routing.ReceiveIds(received);
  if (!hold.ok()) return hold.status();
  s.batch.hold = *std::move(hold);
  if (s.touched_mode) {
    // V3 gather=touched: the ids first, then the rows they reach.
    GEMTB_RETURN_IF_ERROR(s.UnionTouched());
    GEMTB_RETURN_IF_ERROR(s.GatherShards(true));
  }
  // Lookups on every held shard, then the embeddings' message to each requester.
  std::vector<float*> holder_arrays = {nullptr};
  std::vector<float*> holder_none;
  for (size_t i = 0; i < s.shards.size(); ++i) {
    const HolderStep::ShardInput& in = s.batch.hold.inputs[i];
    KjtView v;
    v.keys = in.keys;
    v.batch = static_cast<int64_t>(m) * s.local_batch;
    v.lengths = in.lengths;
    v.values = in.values;
    v.weights = in.weights;
    v.has_weights = in.weighted;
    GEMTB_RETURN_IF_ERROR(s.shards[i]->SetInput(v));
    GEMTB_RETURN_IF_ERROR(s.shards[i]->Forward());
    absl::StatusOr<DeviceOutputView> out = s.shards[i]->DeviceOutput();
    if (!out.ok()) return out.status();
    holder_arrays.push_back(const_cast<float*>(out->pooled));
    for (const float* seq : out->sequence) holder_none.push_back(const_cast<float*>(seq));
  }
  holder_arrays.insert(holder_arrays.end(), holder_none.begin(), holder_none.end());
  DeviceArray<float> embed_send, embed_recv;
  GEMTB_RETURN_IF_ERROR(embed_send.Allocate(static_cast<size_t>(std::max<int64_t>(Total(s.batch.hold.exchange_counts), 1)),
                                            "embeddings to send"));
  GEMTB_RETURN_IF_ERROR(embed_recv.Allocate(static_cast<size_t>(std::max<int64_t>(Total(s.batch.req.exchange_counts), 1)),
                                            "embeddings received"));
  holder_arrays[0] = embed_send.get();
  absl::StatusOr<DeviceArray<float*>*> holder_table = s.PointerTable(holder_arrays);
  if (!holder_table.ok()) return holder_table.status();
  GEMTB_RETURN_IF_ERROR(s.batch.d_hold_runs.Upload(s.batch.hold.runs, "holder copy runs"));
  GEMTB_RETURN_IF_ERROR(LaunchCopyRuns((*holder_table)->get(), s.batch.d_hold_runs.get(),
                                       static_cast<int64_t>(s.batch.hold.runs.size()), s.batch.hold.run_rows, nullptr, false));
  GEMTB_RETURN_IF_ERROR(s.Collective("embeddings.all_to_all", "sparse-mp", [&] {
    return s.exchange->AllToAllV(s.mp_ranks, embed_send.get(), Scaled(s.batch.hold.exchange_counts, 4),
                                 Scaled(Offsets(s.batch.hold.exchange_counts), 4), embed_recv.get(),
                                 Scaled(s.batch.req.exchange_counts, 4), Scaled(Offsets(s.batch.req.exchange_counts), 4), nullptr);
  }));
  // A bounded wait before anything that could block the host behind the all-to-all (a dead rank
  // must end this one with a named error, not hang a copy).
  GEMTB_RETURN_IF_ERROR(s.exchange->Synchronize(nullptr, "the embeddings all-to-all"));
  // The requester's output: pooled sums of the row blocks, NONE rows placed (+0 where no holder
  // sends one: ids that read nothing).
  const int64_t b = s.local_batch, w = s.routing.pooled_width();
  GEMTB_RETURN_IF_ERROR(s.batch.pooled.Allocate(static_cast<size_t>(b * w), "pooled output"));
  s.batch.sequence.clear();
  std::vector<float*> req_arrays = {embed_recv.get()};
  for (size_t k = 0; k < s.routing.sequence_keys().size(); ++k) {
    const int key = s.routing.sequence_keys()[k];
    const int64_t dim = s.config.tables[static_cast<size_t>(s.config.features[static_cast<size_t>(key)].table)].dim;
    const int64_t n =
        layout->offsets[static_cast<size_t>((key + 1) * b)] - layout->offsets[static_cast<size_t>(key * b)];
    s.batch.sequence.emplace_back();
    GEMTB_RETURN_IF_ERROR(
        s.batch.sequence.back().Allocate(static_cast<size_t>(std::max<int64_t>(n * dim, 1)), "sequence output"));
    GEMTB_RETURN_IF_ERROR(s.batch.sequence.back().Zero("sequence output"));
    req_arrays.push_back(s.batch.sequence.back().get());
  }
  GEMTB_RETURN_IF_ERROR(s.batch.d_segments.Upload(s.batch.req.segments, "pooled segments"));
  GEMTB_RETURN_IF_ERROR(s.batch.d_pieces.Upload(s.batch.req.pieces, "pooled pieces"));
  GEMTB_RETURN_IF_ERROR(s.batch.d_bag_counts.Upload(s.batch.req.bag_counts, "bag counts"));
  GEMTB_RETURN_IF_ERROR(LaunchPooledGather(s.batch.d_segments.get(), static_cast<int64_t>(s.batch.req.segments.size()),
                                           s.batch.d_pieces.get(), embed_recv.get(), s.batch.d_bag_counts.get(), b, w,
                                           s.batch.pooled.get()));
  absl::StatusOr<DeviceArray<float*>*> req_table = s.PointerTable(req_arrays);
  if (!req_table.ok()) return req_table.status();
  GEMTB_RETURN_IF_ERROR(s.batch.d_req_runs.Upload(s.batch.req.sequence_runs, "requester copy runs"));
  GEMTB_RETURN_IF_ERROR(s.batch.d_req_row_offsets.Upload(s.batch.req.sequence_row_offsets, "requester row offsets"));
  GEMTB_RETURN_IF_ERROR(LaunchCopyRuns((*req_table)->get(), s.batch.d_req_runs.get(),
                                       static_cast<int64_t>(s.batch.req.sequence_runs.size()), s.batch.req.sequence_rows,
                                       s.batch.d_req_row_offsets.get(), false));
  GEMTB_RETURN_IF_ERROR(s.exchange->Synchronize(nullptr, "the embeddings' assembly"));
  s.pointer_tables.clear();
  s.batch.has_output = true;
  return absl::OkStatus();
}

absl::StatusOr<DeviceOutputView> ShardedDeviceTbe::DeviceOutput() const {
  if (!s_->batch.has_output) return absl::FailedPreconditionError("DeviceOutput: no forward has run");
  DeviceOutputView out;
  out.pooled = s_->batch.pooled.get();
  out.pooled_width = s_->routing.pooled_width();
  out.sequence_keys = s_->routing.sequence_keys();
  for (const DeviceArray<float>& a : s_->batch.sequence) {
    out.sequence.push_back(a.get());
    out.sequence_size.push_back(static_cast<int64_t>(a.size()));
  }
  return out;
}

absl::Status ShardedDeviceTbe::Backward(const float* pooled_grad, absl::Span<const float* const> sequence_grads) {
  State& s = *s_;
  if (!s.batch.has_output) return absl::FailedPreconditionError("Backward: no forward has run");
  if (sequence_grads.size() != s.batch.sequence.size()) {
    return absl::InvalidArgumentError(absl::StrCat("sequence_grads: ", sequence_grads.size(),
                                                   " arrays, expected one per NONE key (", s.batch.sequence.size(), ")"));
  }
  const int64_t b = s.local_batch, w = s.routing.pooled_width();
  if (pooled_grad == nullptr && b * w > 0) return absl::InvalidArgumentError("pooled_grad: null");
  // The requester's gradients into the exchange layout.
  DeviceArray<float> grad_send, grad_recv;
  GEMTB_RETURN_IF_ERROR(
      grad_send.Allocate(static_cast<size_t>(std::max<int64_t>(Total(s.batch.req.exchange_counts), 1)), "gradients to send"));
  GEMTB_RETURN_IF_ERROR(grad_recv.Allocate(static_cast<size_t>(std::max<int64_t>(Total(s.batch.hold.exchange_counts), 1)),
                                           "gradients received"));
  GEMTB_RETURN_IF_ERROR(LaunchPooledScatter(s.batch.d_segments.get(), static_cast<int64_t>(s.batch.req.segments.size()),
                                            s.batch.d_pieces.get(), pooled_grad, s.batch.d_bag_counts.get(), b, w,
                                            grad_send.get()));
  std::vector<float*> req_arrays = {grad_send.get()};
  for (const float* g : sequence_grads) req_arrays.push_back(const_cast<float*>(g));
  absl::StatusOr<DeviceArray<float*>*> req_table = s.PointerTable(req_arrays);
  if (!req_table.ok()) return req_table.status();
  GEMTB_RETURN_IF_ERROR(LaunchCopyRuns((*req_table)->get(), s.batch.d_req_runs.get(),
                                       static_cast<int64_t>(s.batch.req.sequence_runs.size()), s.batch.req.sequence_rows,
                                       s.batch.d_req_row_offsets.get(), true));
  GEMTB_RETURN_IF_ERROR(s.Collective("embedding_grads.all_to_all", "sparse-mp", [&] {
    return s.exchange->AllToAllV(
        s.mp_ranks, grad_send.get(), Scaled(s.batch.req.exchange_counts, 4), Scaled(Offsets(s.batch.req.exchange_counts), 4),
        grad_recv.get(), Scaled(s.batch.hold.exchange_counts, 4), Scaled(Offsets(s.batch.hold.exchange_counts), 4), nullptr);
  }));
  GEMTB_RETURN_IF_ERROR(s.exchange->Synchronize(nullptr, "the embedding gradients' all-to-all"));
  // The holder's gradients per held shard, in its output's shapes.
  s.shard_grads.clear();
  std::vector<float*> holder_arrays = {grad_recv.get()};
  std::vector<std::vector<const float*>> shard_none(s.shards.size());
  std::vector<float*> holder_none;
  for (size_t i = 0; i < s.shards.size(); ++i) {
    absl::StatusOr<DeviceOutputView> out = s.shards[i]->DeviceOutput();
    if (!out.ok()) return out.status();
    s.shard_grads.emplace_back();
    const int64_t pooled_size = static_cast<int64_t>(s.routing.group_size()) * b * out->pooled_width;
    GEMTB_RETURN_IF_ERROR(
        s.shard_grads.back().Allocate(static_cast<size_t>(std::max<int64_t>(pooled_size, 1)), "shard pooled gradient"));
    holder_arrays.push_back(s.shard_grads.back().get());
    for (int64_t n : out->sequence_size) {
      s.shard_grads.emplace_back();
      GEMTB_RETURN_IF_ERROR(
          s.shard_grads.back().Allocate(static_cast<size_t>(std::max<int64_t>(n, 1)), "shard sequence gradient"));
      holder_none.push_back(s.shard_grads.back().get());
      shard_none[i].push_back(s.shard_grads.back().get());
    }
  }
  holder_arrays.insert(holder_arrays.end(), holder_none.begin(), holder_none.end());
  absl::StatusOr<DeviceArray<float*>*> holder_table = s.PointerTable(holder_arrays);
  if (!holder_table.ok()) return holder_table.status();
  GEMTB_RETURN_IF_ERROR(LaunchCopyRuns((*holder_table)->get(), s.batch.d_hold_runs.get(),
                                       static_cast<int64_t>(s.batch.hold.runs.size()), s.batch.hold.run_rows, nullptr, true));
  // V3 gathers the shards again for the update (the forward's copy is not kept unless asked).
  if (s.plan.fully_sharded && !s.plan.keep_gathered) GEMTB_RETURN_IF_ERROR(s.GatherShards(s.touched_mode));
  for (size_t i = 0; i < s.shards.size(); ++i) {
    GEMTB_RETURN_IF_ERROR(s.shards[i]->SetDeviceGrads(holder_arrays[1 + i], shard_none[i]));
    GEMTB_RETURN_IF_ERROR(s.shards[i]->BackwardStep());
  }
  // Column shards sharing rowwise-Adagrad state: the whole rows' square sums, then the update.
  // Every member of a norm group calls in the same (held-shard) order: shards are numbered table
  // by table, so the groups' order is the tables' on every member.
  for (size_t i = 0; i < s.shards.size(); ++i) {
    const HeldShard& h = s.routing.held()[i];
    if (!h.split_update) continue;
    absl::StatusOr<const float*> partial = s.shards[i]->RunSquareSums();
    if (!partial.ok()) return partial.status();
    const int64_t cap = s.shards[i]->RunCapacity();
    DeviceArray<float>& gathered = s.shard_grads.emplace_back();
    GEMTB_RETURN_IF_ERROR(gathered.Allocate(static_cast<size_t>(cap) * h.norm_group.size(), "gathered square sums"));
    DeviceArray<float>& total = s.shard_grads.emplace_back();
    GEMTB_RETURN_IF_ERROR(total.Allocate(static_cast<size_t>(cap), "whole-row square sums"));
    std::vector<int> norm_ranks;
    for (int q : h.norm_group) norm_ranks.push_back(s.mp_ranks[static_cast<size_t>(q)]);
    GEMTB_RETURN_IF_ERROR(s.Collective("adagrad_norms.all_gather", "sparse-mp", [&] {
      return s.exchange->AllGatherAmong(norm_ranks, *partial, cap * 4, gathered.get(), nullptr);
    }));
    GEMTB_RETURN_IF_ERROR(LaunchSumPartials(gathered.get(), static_cast<int>(h.norm_group.size()), cap, total.get()));
    GEMTB_RETURN_IF_ERROR(s.shards[i]->ApplyRows(total.get()));
  }
  GEMTB_RETURN_IF_ERROR(s.exchange->Synchronize(nullptr, "the sharded embeddings' backward"));
  s.pointer_tables.clear();
  ++s.steps_run;
  if (s.plan.fully_sharded) return s.ScatterUpdated();
  if (s.replicas > 1 && s.steps_run % s.plan.sync_period == 0) return s.SyncReplicas();
  return absl::OkStatus();
}

absl::Status ShardedDeviceTbe::SwapBatch() {
  if (s_->plan.fully_sharded)
    return absl::FailedPreconditionError(
        "SwapBatch: a fully sharded plan's backward updates the copy its forward gathered; a second batch between "
        "them is not run");
  s_->SwapBatch();
  return absl::OkStatus();
}

void ShardedDeviceTbe::SetCollectiveHook(CollectiveHook hook) { s_->hook = std::move(hook); }

absl::Status ShardedDeviceTbe::SetLearningRate(float lr) {
  for (auto& t : s_->shards) GEMTB_RETURN_IF_ERROR(t->SetLearningRate(lr));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<HostTable>> ShardedDeviceTbe::DownloadShards() {
  if (s_->plan.fully_sharded) GEMTB_RETURN_IF_ERROR(s_->GatherShards(false));
  std::vector<HostTable> out;
  for (const auto& t : s_->shards) {
    absl::StatusOr<std::vector<HostTable>> one = t->DownloadTables();
    if (!one.ok()) return one.status();
    out.push_back(std::move((*one)[0]));
  }
  return out;
}

}  // namespace gemtb::gpu::embedding
