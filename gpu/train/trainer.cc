#include "gpu/train/trainer.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <future>
#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "gpu/common/device_buffer.h"
#include "gpu/embedding/kjt_of_batch.h"
#include "gpu/train/dense_adam.h"
#include "gpu/train/gem_model.h"
#include "gpu/train/model_kernels.h"
#include "model/common/status_macros.h"
#include "model/data/batch.h"
#include "model/data/generator.h"
#include "model/data/parallel_batch.h"
#include "model/data/shape_from_config.h"
#include "model/description/expert_params.h"
#include "model/description/gem_geometry.h"
#include "model/description/train_schedule.h"
#include "model/embedding/embedding_math.h"

namespace gemtb::gpu::train {
namespace {

template <typename T>
using Array = std::unique_ptr<DeviceArray<T>>;

template <typename T>
absl::StatusOr<Array<T>> Upload(absl::Span<const T> host, const char* what) {
  auto a = std::make_unique<DeviceArray<T>>();
  GEMTB_RETURN_IF_ERROR(a->Upload(host, what));
  return a;
}
template <typename T>
absl::StatusOr<Array<T>> Allocate(size_t n, const char* what) {
  auto a = std::make_unique<DeviceArray<T>>();
  GEMTB_RETURN_IF_ERROR(a->Allocate(n, what));
  return a;
}

absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

std::vector<float> ToFloat(const std::vector<uint8_t>& v) { return std::vector<float>(v.begin(), v.end()); }

}  // namespace

struct GpuTrainer::Impl {
  gemtb::model::ModelConfig config;
  TrainerOptions options;
  data::Generator generator;
  EmbeddingConfig emb;
  std::unique_ptr<embedding::DeviceTbe> tbe;
  std::unique_ptr<embedding::ShardedDeviceTbe> sharded;  // a job's tables sharded by a plan, else null
  std::unique_ptr<GemModelGpu> model;
  int64_t step = 0;
  float adam_b1 = 1.0f, adam_b2 = 1.0f;
  int64_t num_params = 0;  // P of the layout
  // One GPU: params, adam_m, adam_v and grad hold all P values. In a job (`dist`): params, adam_m,
  // adam_v and grad_shard hold this rank's shard (shard_count values), grad the rank's whole
  // gradient (shard_group_size * shard_count, zeros past P), and the model reads the parameters
  // gathered into the collectives' buffer. Under expert parallelism (ep_params) the dense array is
  // the parameters that are no expert's, packed in layout order, and this rank's EP member's
  // experts' parameters (packed) are a second array: its shard (expert_shard_count values) follows
  // the dense shard in params, adam_m, adam_v and grad_shard, and its gathered values
  // (expert_shard_group_size * expert_shard_count) follow the dense ones in the model's buffer and
  // in grad, where the model's layout (GemModelPlacement) puts them.
  Array<float> params, grad, adam_m, adam_v, grad_shard;
  Array<double> loss;
  TrainerCollectives* dist = nullptr;
  JobOptions job;
  int64_t shard_count = 0;
  int shard_member = 0;                // q: this rank's place in its shard group
  float* gathered = nullptr;  // in a job: the collectives' buffer the parameters are gathered into
  // What the model reads: one GPU's params (wherever LoadState's upload put them), or the gathered buffer.
  float* ModelParams() const { return dist != nullptr ? gathered : params->get(); }
  std::optional<gemtb::model::MemberParams> ep_params;
  int64_t expert_shard_count = 0;
  int expert_member = 0;  // this rank's place in its expert shard group

  // Where the experts' gathered values start in the model's buffer and in grad.
  int64_t ExpertsAt() const { return shard_count * dist->shard_group_size(); }
  // Piece q of `count` values of `a` (zeros past its end).
  static std::vector<float> Piece(const std::vector<float>& a, int q, int64_t count) {
    std::vector<float> piece(static_cast<size_t>(count), 0.0f);
    const int64_t first = q * count;
    for (int64_t k = 0; k < count && first + k < static_cast<int64_t>(a.size()); ++k) piece[k] = a[first + k];
    return piece;
  }
  // This rank's shard of a whole array of P values (in layout order).
  std::vector<float> Shard(const std::vector<float>& whole) const {
    if (!ep_params) return Piece(whole, shard_member, shard_count);
    std::vector<float> shard = Piece(gemtb::model::PackRanges(whole, ep_params->dense), shard_member, shard_count);
    const std::vector<float> experts =
        Piece(gemtb::model::PackRanges(whole, ep_params->experts), expert_member, expert_shard_count);
    shard.insert(shard.end(), experts.begin(), experts.end());
    return shard;
  }
  // A whole array of P values from every member's shard (a collective in the shard group; under
  // expert parallelism also in the expert shard group and the EP group).
  absl::StatusOr<std::vector<float>> Whole(const DeviceArray<float>& shard, const char* what) const {
    std::vector<float> whole;
    if (dist == nullptr) {
      GEMTB_RETURN_IF_ERROR(shard.Download(whole, what));
      return whole;
    }
    Array<float> full;
    GEMTB_ASSIGN_OR_RETURN(full, Allocate<float>(static_cast<size_t>(shard_count * dist->shard_group_size()), what));
    GEMTB_RETURN_IF_ERROR(dist->GatherShards(shard.get(), full->get(), shard_count, nullptr));
    if (!ep_params) {
      GEMTB_RETURN_IF_ERROR(dist->Synchronize(nullptr, what));
      GEMTB_RETURN_IF_ERROR(full->Download(whole, what));
      whole.resize(static_cast<size_t>(num_params));
      return whole;
    }
    // Every EP member's experts: its expert shard group's gather, then the members' arrays side by side.
    ExpertExchange& ep = *dist->expert_exchange();
    const int64_t per_member = expert_shard_count * dist->expert_shard_group_size();
    Array<float> experts, members;
    GEMTB_ASSIGN_OR_RETURN(experts, Allocate<float>(static_cast<size_t>(per_member), what));
    GEMTB_ASSIGN_OR_RETURN(members, Allocate<float>(static_cast<size_t>(per_member * ep.degree()), what));
    GEMTB_RETURN_IF_ERROR(dist->GatherExpertShards(shard.get() + shard_count, experts->get(), expert_shard_count, nullptr));
    GEMTB_RETURN_IF_ERROR(ep.AllGather(experts->get(), members->get(), per_member, nullptr));
    GEMTB_RETURN_IF_ERROR(dist->Synchronize(nullptr, what));
    std::vector<float> dense, all;
    GEMTB_RETURN_IF_ERROR(full->Download(dense, what));
    GEMTB_RETURN_IF_ERROR(members->Download(all, what));
    whole.assign(static_cast<size_t>(num_params), 0.0f);
    dense.resize(static_cast<size_t>(ep_params->dense_count()));
    gemtb::model::UnpackRanges(dense, ep_params->dense, whole);
    for (int i = 0; i < ep.degree(); ++i) {
      const gemtb::model::MemberParams held = gemtb::model::MemberParamsOf(model->geometry(), ep.degree(), i);
      const auto from = all.begin() + static_cast<long>(i * per_member);
      gemtb::model::UnpackRanges(std::vector<float>(from, from + held.expert_count()), held.experts, whole);
    }
    return whole;
  }

  // A job step's collectives, each between two events on the stream it runs on. The events are made
  // once and serve every step (the k-th collective of a step takes the k-th pair).
  std::vector<CollectiveTime> timed;
  std::vector<std::array<cudaEvent_t, 2>> timing_events;
  using Where = CollectivePlace;
  template <typename Fn>
  absl::Status Timed(const char* name, const char* group, Where where, Fn&& fn, cudaStream_t stream = nullptr) {
    if (timed.size() == timing_events.size()) {
      std::array<cudaEvent_t, 2> pair{};
      GEMTB_RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&pair[0]), "cudaEventCreate"));
      GEMTB_RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&pair[1]), "cudaEventCreate"));
      timing_events.push_back(pair);
    }
    const std::array<cudaEvent_t, 2>& pair = timing_events[timed.size()];
    timed.push_back({name, group, 0, where, std::nullopt});
    GEMTB_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(pair[0], stream), "cudaEventRecord"));
    GEMTB_RETURN_IF_ERROR(fn());
    return CudaStatus(cudaEventRecord(pair[1], stream), "cudaEventRecord");
  }
  // The step's collective times (after the streams are done); with the model's region timer, the
  // start of those inside the model or beside compute relative to its first region's.
  absl::StatusOr<std::vector<CollectiveTime>> TakeCollectiveTimes(const RegionTimer* timer = nullptr) {
    for (size_t k = 0; k < timed.size(); ++k) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, timing_events[k][0], timing_events[k][1]) == cudaSuccess) timed[k].ms = ms;
      if ((timed[k].place == Where::kInModel || timed[k].place == Where::kBesideCompute) && timer != nullptr)
        GEMTB_ASSIGN_OR_RETURN(timed[k].model_start_ms, timer->Since(timing_events[k][0]));
    }
    return std::exchange(timed, {});
  }

  // The EP group's collectives as the model calls them, timed on the model's stream.
  class TimedExperts : public ExpertExchange {
   public:
    TimedExperts(Impl* m, ExpertExchange* inner) : m_(m), inner_(inner) {}
    int degree() const override { return inner_->degree(); }
    int member() const override { return inner_->member(); }
    absl::Status AllGather(const float* mine, float* all, int64_t count, cudaStream_t stream) override {
      return m_->Timed("experts.all_gather", "ep", Where::kInModel,
                       [&] { return inner_->AllGather(mine, all, count, stream); }, stream);
    }
    absl::Status ReduceScatter(const float* all, float* mine, int64_t count, cudaStream_t stream) override {
      return m_->Timed("experts.reduce_scatter", "ep", Where::kInModel,
                       [&] { return inner_->ReduceScatter(all, mine, count, stream); }, stream);
    }

   private:
    Impl* m_;
    ExpertExchange* inner_;
  };
  std::optional<TimedExperts> timed_experts;  // a job under expert parallelism
  ~Impl() {
    for (const std::array<cudaEvent_t, 2>& pair : timing_events) {
      cudaEventDestroy(pair[0]);
      cudaEventDestroy(pair[1]);
    }
    for (cudaEvent_t e : unit_ready) cudaEventDestroy(e);
    if (shards_current != nullptr) cudaEventDestroy(shards_current);
    if (grads_ready != nullptr) cudaEventDestroy(grads_ready);
    if (param_stream != nullptr) cudaStreamDestroy(param_stream);
    if (model_done != nullptr) cudaEventDestroy(model_done);
    if (lookups_ready != nullptr) cudaEventDestroy(lookups_ready);
    if (model_stream != nullptr) cudaStreamDestroy(model_stream);
  }

  // The sharded tables' collectives join the step's timed ones (before the model in the forward,
  // after it in the update; beside the model for the semi-synchronous pipeline's next lookups).
  bool sparse_before_model = true;
  bool sparse_beside_model = false;
  void TimeSparseCollectives() {
    sharded->SetCollectiveHook([this](const char* name, const char* group, const std::function<absl::Status()>& call) {
      if (sparse_beside_model) return Timed(name, group, Where::kBesideCompute, call);
      return Timed(name, group, sparse_before_model ? Where::kBeforeModel : Where::kInUpdate, call);
    });
  }

  // Per-unit gathers (JobOptions::param_prefetch): the units, their stream, an event per unit
  // marking it gathered, the unit of each region, and the mark that the shards are current.
  std::vector<gemtb::model::ParamUnit> units;
  std::map<std::string, size_t> unit_of_region;
  cudaStream_t param_stream = nullptr;
  std::vector<cudaEvent_t> unit_ready;
  cudaEvent_t shards_current = nullptr;
  bool waited_all_units = false;
  // The backward's side of the units: the mark on the model's stream that a unit's gradient is
  // final, and the unit whose region's backward the model is running.
  cudaEvent_t grads_ready = nullptr;
  std::optional<size_t> unit_in_backward;

  // Unit u's gradient is final on the model's `stream`: its reduce-scatter in the shard group on
  // the parameter stream, beside the rest of the backward.
  absl::Status ReduceScatterUnit(size_t u, cudaStream_t stream) {
    GEMTB_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(grads_ready, stream), "cudaEventRecord"));
    GEMTB_RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(param_stream, grads_ready, 0), "cudaStreamWaitEvent"));
    return Timed(
        "grads.reduce_scatter", "dense-shard", Where::kBesideCompute,
        [&] {
          return dist->ReduceScatterGradRange(grad->get(), grad_shard->get(), shard_count, units[u].first,
                                              units[u].count, param_stream);
        },
        param_stream);
  }

  // The whole parameter array is current in ModelParams() (a collective in a job); with per-unit
  // gathers, once each unit's event has passed.
  absl::Status GatherParams() {
    if (dist == nullptr) return absl::OkStatus();
    // Under expert parallelism the experts' parameters are gathered whole, in their own group.
    auto gather_experts = [&](Where where, cudaStream_t stream) {
      return Timed(
          "expert_params.all_gather", "expert-shard", where,
          [&] {
            return dist->GatherExpertShards(params->get() + shard_count, gathered + ExpertsAt(),
                                            expert_shard_count, stream);
          },
          stream);
    };
    if (units.empty()) {
      GEMTB_RETURN_IF_ERROR(Timed("params.all_gather", "dense-shard", Where::kBeforeModel,
                                  [&] { return dist->GatherParams(params->get(), shard_count, nullptr); }));
      return ep_params ? gather_experts(Where::kBeforeModel, nullptr) : absl::OkStatus();
    }
    // After the last step's optimizer (and the model's last reads of the gathered array).
    GEMTB_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(shards_current, nullptr), "cudaEventRecord"));
    GEMTB_RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(param_stream, shards_current, 0), "cudaStreamWaitEvent"));
    waited_all_units = false;
    unit_in_backward.reset();
    // The experts' parameters first, on the same stream: every unit's event then marks them
    // gathered too.
    if (ep_params) GEMTB_RETURN_IF_ERROR(gather_experts(Where::kBesideCompute, param_stream));
    return Timed(
        "params.all_gather", "dense-shard", Where::kBesideCompute,
        [&]() -> absl::Status {
          for (size_t u = 0; u < units.size(); ++u) {
            GEMTB_RETURN_IF_ERROR(
                dist->GatherParamRange(params->get(), shard_count, units[u].first, units[u].count, param_stream));
            GEMTB_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(unit_ready[u], param_stream), "cudaEventRecord"));
          }
          return absl::OkStatus();
        },
        param_stream);
  }
  // The model's region hook under per-unit gathers: a region's forward waits for its unit; the
  // first backward region for all of them (the backward reads every unit; the optimizer after it
  // rewrites the shards the gathers read).
  absl::Status WaitForUnit(const std::string& region, bool backward, cudaStream_t stream) {
    if (backward) {
      if (!waited_all_units) {
        waited_all_units = true;
        GEMTB_RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(stream, unit_ready.back(), 0), "cudaStreamWaitEvent"));
      }
      // The region whose backward just ended has its unit's gradient.
      if (unit_in_backward) GEMTB_RETURN_IF_ERROR(ReduceScatterUnit(*unit_in_backward, stream));
      const auto it = unit_of_region.find(region);
      unit_in_backward = it == unit_of_region.end() ? std::nullopt : std::optional<size_t>(it->second);
      return absl::OkStatus();
    }
    const auto it = unit_of_region.find(region);
    if (it == unit_of_region.end()) return absl::OkStatus();  // a region without parameters
    return CudaStatus(cudaStreamWaitEvent(stream, unit_ready[it->second], 0), "cudaStreamWaitEvent");
  }
  // Waits for the device; in a job first for the collectives, within the job's timeout (the device-wide
  // wait after it then cannot hang on a rank that is gone).
  absl::Status Synchronize(const char* what) {
    if (dist != nullptr) GEMTB_RETURN_IF_ERROR(dist->Synchronize(nullptr, what));
    return CudaStatus(cudaDeviceSynchronize(), what);
  }

  StepTimes times;  // of the current step's phases, filled as they finish
  bool time_regions = false;

  explicit Impl(data::Generator g) : generator(std::move(g)) {}

  using Clock = std::chrono::steady_clock;
  static double Ms(Clock::time_point since) {
    return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
  }

  // A training batch after the forward and backward, waiting for the optimizers: the dense
  // gradient is in `grad`, the embedding outputs' gradients in these device arrays.
  struct Backward {
    TrainerStep result;
    Array<float> pooled_grad;               // [B, W]
    std::vector<Array<float>> events_grad;  // per sequence, [events, d]
  };

  // Step s's samples [s B, (s + 1) B) of the data seed; in a job, ordered by its batch split.
  data::Batch BatchOf(int64_t s) const {
    const int64_t B = options.batch;
    data::Batch batch = data::GenerateBatchParallel(generator, options.data_seed, s * B, B);
    if (dist == nullptr || job.split == data::RankSplit::kContiguous) return batch;
    absl::StatusOr<std::vector<int64_t>> order =
        data::RankSampleOrder(batch, job.split, dist->world_size(), job.sub_batch);
    if (!order.ok()) {  // an invariant: Create checked that the batch splits this way
      std::fprintf(stderr, "GpuTrainer: %s\n", std::string(order.status().message()).c_str());
      std::abort();
    }
    return data::SelectSamples(batch, *order);
  }
  // `v` [B, w] of a batch taken in the job's order, back in generator order (sample b of the batch is
  // the data seed's sample indices[b], the step's first being step * B).
  template <typename T>
  std::vector<T> GeneratorOrder(const data::Batch& batch, const std::vector<T>& v, int64_t w, int64_t first) const {
    if (dist == nullptr || job.split == data::RankSplit::kContiguous) return v;
    std::vector<T> out(v.size());
    for (int64_t b = 0; b < batch.size; ++b) {
      const int64_t p = batch.indices[static_cast<size_t>(b)] - first;
      std::copy(v.begin() + b * w, v.begin() + (b + 1) * w, out.begin() + p * w);
    }
    return out;
  }
  data::Batch StepBatch() const { return BatchOf(step); }

  // The next step's batch, generated on a host thread while this step runs on the GPU (a batch
  // depends only on the seed and its sample indices, so where it is made changes no bit); with
  // sharded tables, this rank's samples' ids routed there too (Route reads only the batch).
  struct Prefetched {
    data::Batch batch;
    std::optional<embedding::ShardedDeviceTbe::RoutedBatch> routed;
    // One GPU's replicated tables: the batch's KJT validated on the data thread, so the step's
    // lookup phase only uploads it.
    std::optional<embedding::CheckedKjt> checked;
  };
  std::optional<std::pair<int64_t, std::future<absl::StatusOr<Prefetched>>>> prefetch;
  // The routing of the batch TakeStepBatch returned last (used by that step's Pass), or its checked KJT.
  std::optional<embedding::ShardedDeviceTbe::RoutedBatch> step_routed;
  std::optional<embedding::CheckedKjt> step_checked;

  // The semi-synchronous pipeline (options.pipeline): step `step`'s lookups of this trainer's
  // samples (a job's rank: its own), made during the step before, ahead of its table update.
  struct Lookups {
    int64_t step = 0;
    Array<float> pooled;                  // [b, W]
    std::vector<Array<float>> sequence;   // per NONE key, [ids, D]
    embedding::DeviceOutputView view;     // of the arrays above
  };
  std::optional<Lookups> pending;
  bool semi_sync() const { return options.pipeline == gemtb::model::SparsePipeline::kSemiSync; }
  // The model's stream under the semi-synchronous pipeline: non-blocking, so that the next step's
  // lookups on the TBE's (legacy) stream run beside this step's model; null otherwise.
  cudaStream_t model_stream = nullptr;
  cudaEvent_t model_done = nullptr, lookups_ready = nullptr;

  // Lookups of step `s` for `b` samples in the shapes of `shape` (a TBE output), unfilled.
  static absl::StatusOr<Lookups> AllocateLookups(int64_t s, int64_t b, const embedding::DeviceOutputView& shape) {
    Lookups l;
    l.step = s;
    GEMTB_ASSIGN_OR_RETURN(l.pooled, Allocate<float>(static_cast<size_t>(shape.pooled_width * b), "pending pooled lookups"));
    l.view.pooled = l.pooled->get();
    l.view.pooled_width = shape.pooled_width;
    l.view.sequence_keys = shape.sequence_keys;
    l.view.sequence_size = shape.sequence_size;
    for (int64_t n : shape.sequence_size) {
      l.sequence.emplace_back();
      GEMTB_ASSIGN_OR_RETURN(l.sequence.back(), Allocate<float>(static_cast<size_t>(n), "pending sequence lookups"));
      l.view.sequence.push_back(l.sequence.back()->get());
    }
    return l;
  }

  // Copies the TBE's current output (this trainer's `b` samples of step `s`) into a pending Lookups,
  // which the model may read while the TBE takes its next input.
  absl::Status KeepLookups(int64_t s, int64_t b) {
    absl::StatusOr<embedding::DeviceOutputView> out = TbeOutput();
    if (!out.ok()) return out.status();
    absl::StatusOr<Lookups> l = AllocateLookups(s, b, *out);
    if (!l.ok()) return l.status();
    GEMTB_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(l->pooled->get(), out->pooled, l->pooled->size() * sizeof(float),
                                                     cudaMemcpyDeviceToDevice, nullptr),
                                     "pending pooled lookups"));
    for (size_t k = 0; k < out->sequence.size(); ++k) {
      GEMTB_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(l->sequence[k]->get(), out->sequence[k],
                                                       l->sequence[k]->size() * sizeof(float),
                                                       cudaMemcpyDeviceToDevice, nullptr),
                                       "pending sequence lookups"));
    }
    pending = *std::move(l);
    return absl::OkStatus();
  }

  // Under the semi-synchronous pipeline, while the model of step `step` runs on model_stream: the
  // next step's batch (from the prefetch thread, kept for it) and its lookups on the TBE's stream,
  // before this step's table update.
  absl::Status LookAhead() {
    const int64_t next = step + 1;
    absl::StatusOr<Prefetched> p = prefetch && prefetch->first == next ? prefetch->second.get() : MakeStep(next);
    if (!p.ok()) return p.status();
    const data::Batch mine = dist != nullptr ? RankSamples(p->batch) : p->batch;
    if (sharded != nullptr) {
      // The next batch's exchanges and lookups beside this step's model; this step's batch stays
      // aside in the module for its backward, and comes back after.
      if (!p->routed) return absl::InternalError("LookAhead: the next batch was not routed");
      GEMTB_RETURN_IF_ERROR(sharded->SwapBatch());
      sparse_beside_model = true;
      absl::Status forward = sharded->Forward(*std::exchange(p->routed, std::nullopt));
      sparse_beside_model = false;
      GEMTB_RETURN_IF_ERROR(forward);
      GEMTB_RETURN_IF_ERROR(KeepLookups(next, mine.size));
      GEMTB_RETURN_IF_ERROR(sharded->SwapBatch());
    } else {
      GEMTB_RETURN_IF_ERROR(TbeInput(mine));
      GEMTB_RETURN_IF_ERROR(tbe->Forward());
      GEMTB_RETURN_IF_ERROR(KeepLookups(next, mine.size));
    }
    std::promise<absl::StatusOr<Prefetched>> ready;
    ready.set_value(*std::move(p));
    prefetch.emplace(next, ready.get_future());
    return absl::OkStatus();
  }

  // This rank's samples of a training batch: [r B/R, (r + 1) B/R).
  data::Batch RankSamples(const data::Batch& batch) const {
    const int R = dist->world_size(), r = dist->rank();
    const int64_t Bl = batch.size / R;
    std::vector<int64_t> mine(static_cast<size_t>(Bl));
    for (int64_t b = 0; b < Bl; ++b) mine[static_cast<size_t>(b)] = r * Bl + b;
    return data::SelectSamples(batch, mine);
  }
  absl::StatusOr<Prefetched> MakeStep(int64_t s) const {
    Prefetched p;
    p.batch = BatchOf(s);
    if (sharded != nullptr) {
      absl::StatusOr<embedding::ShardedDeviceTbe::RoutedBatch> routed = sharded->Route(embedding::KjtViewOfBatch(RankSamples(p.batch)));
      if (!routed.ok()) return routed.status();
      p.routed = *std::move(routed);
    } else if (dist == nullptr && tbe != nullptr) {
      absl::StatusOr<embedding::CheckedKjt> checked = tbe->CheckInput(embedding::KjtViewOfBatch(p.batch));
      if (!checked.ok()) return checked.status();
      p.checked = *std::move(checked);
    }
    return p;
  }

  // Step `step`'s batch: the prefetched one when it is that step's, else made now; then the next
  // step's batch starts on its thread.
  absl::StatusOr<data::Batch> TakeStepBatch() {
    absl::StatusOr<Prefetched> p = prefetch && prefetch->first == step ? prefetch->second.get() : MakeStep(step);
    prefetch.reset();
    if (!p.ok()) return p.status();
    const int64_t next = step + 1;
    prefetch.emplace(next, std::async(std::launch::async, [this, next] { return MakeStep(next); }));
    step_routed = std::move(p->routed);
    step_checked = std::move(p->checked);
    return std::move(p->batch);
  }

  // `checked`: the batch's KJT as the data thread checked it (MakeStep), or null.
  absl::Status TbeInput(const data::Batch& batch, const embedding::CheckedKjt* checked = nullptr) {
    const embedding::KjtView kjt = embedding::KjtViewOfBatch(batch);
    return checked != nullptr ? tbe->SetInput(kjt, *checked) : tbe->SetInput(kjt);
  }
  absl::Status TbeForward(const data::Batch& batch, const embedding::CheckedKjt* checked = nullptr) {
    sparse_before_model = true;
    if (sharded != nullptr) return sharded->Forward(embedding::KjtViewOfBatch(batch));
    GEMTB_RETURN_IF_ERROR(TbeInput(batch, checked));
    return tbe->Forward();
  }
  absl::StatusOr<embedding::DeviceOutputView> TbeOutput() const {
    return sharded != nullptr ? sharded->DeviceOutput() : tbe->DeviceOutput();
  }

  // One batch through the TBE forward and the model: forward only (predictions) or forward and
  // backward (gradients).
  absl::StatusOr<Backward> Pass(const data::Batch& batch, bool train) {
    const int64_t B = batch.size;
    const gemtb::model::GemGeometry& g = model->geometry();
    const int J = g.num_sequences(), T = g.num_tasks;
    // In a job's training step (with sharded tables: every pass) this rank runs the model on its
    // samples [b0, b0 + Bl) of the batch.
    const bool split = dist != nullptr && (train || sharded != nullptr);
    // With sharded tables the embeddings' gradients stay with the rank's samples: the module sends
    // them to the shards' holders.
    const bool local_grads = sharded != nullptr;
    const int R = split ? dist->world_size() : 1, r = split ? dist->rank() : 0;
    const int64_t Bl = B / R, b0 = r * Bl;
    Clock::time_point at = Clock::now();
    GEMTB_RETURN_IF_ERROR(GatherParams());
    // A job's rank looks up its own samples only (replicated tables: the TBE backward later takes
    // the whole batch); sharded tables' training batches were routed on the prefetch thread.
    // The semi-synchronous pipeline's training step reads the lookups made during the step before.
    const bool semi = train && semi_sync();
    const bool looked_ahead = semi && pending && pending->step == step;
    if (looked_ahead) {
      // Looked up during the last step; a sharded module holds that batch aside for its backward.
      if (sharded != nullptr) GEMTB_RETURN_IF_ERROR(sharded->SwapBatch());
    } else if (split && sharded != nullptr && train && step_routed) {
      sparse_before_model = true;
      GEMTB_RETURN_IF_ERROR(sharded->Forward(*std::move(step_routed)));
      step_routed.reset();
    } else if (split) {
      GEMTB_RETURN_IF_ERROR(TbeForward(RankSamples(batch)));
    } else {  // the step's own batch, checked on the data thread when it came from there
      const std::optional<embedding::CheckedKjt> checked = std::exchange(step_checked, std::nullopt);
      GEMTB_RETURN_IF_ERROR(TbeForward(batch, checked ? &*checked : nullptr));
    }
    // The model of a semi-synchronous step reads a copy of its lookups (the TBE takes the next
    // step's input while it runs), kept alive until the model is done.
    if (semi && !looked_ahead) GEMTB_RETURN_IF_ERROR(KeepLookups(step, Bl));
    std::optional<Lookups> lookups;
    if (semi) lookups = std::exchange(pending, std::nullopt);
    absl::StatusOr<embedding::DeviceOutputView> emb_out = lookups ? lookups->view : TbeOutput();
    if (!emb_out.ok()) return emb_out.status();
    GEMTB_RETURN_IF_ERROR(Synchronize("embedding forward"));
    times.embedding_fwd_ms = Ms(at);
    at = Clock::now();
    const int64_t W = emb_out->pooled_width, m_dense = static_cast<int64_t>(batch.dense.size()) / B;
    Array<float> dense, labels, masks, logits;
    GEMTB_ASSIGN_OR_RETURN(dense, Upload<float>(absl::MakeConstSpan(batch.dense).subspan(b0 * m_dense, Bl * m_dense),
                                                "dense"));
    const std::vector<float> label_f = ToFloat(batch.label), mask_f = ToFloat(batch.mask);
    GEMTB_ASSIGN_OR_RETURN(labels, Upload<float>(absl::MakeConstSpan(label_f).subspan(b0 * T, Bl * T), "labels"));
    GEMTB_ASSIGN_OR_RETURN(masks, Upload<float>(absl::MakeConstSpan(mask_f).subspan(b0 * T, Bl * T), "masks"));
    GEMTB_ASSIGN_OR_RETURN(logits, Allocate<float>(static_cast<size_t>(B) * T, "logits"));
    GemBatchInput in;
    in.batch = Bl;
    in.pooled = emb_out->pooled;  // the rank's own samples' lookups
    in.dense = dense->get();
    in.labels = labels->get();
    in.masks = masks->get();
    // Expert parallelism: every rank of a job runs every pass (each its own samples, or all alike).
    if (timed_experts) in.experts = &*timed_experts;
    if (split) {
      double count = 0;  // 0/1 values: exact in any order
      for (float v : mask_f) count += v;
      in.mask_count = count;
    }
    // Per sequence: where each rank's events start (elements), for the slices and the all-gathers.
    std::vector<std::vector<int64_t>> event_offsets(J, std::vector<int64_t>(R + 1, 0));
    for (int j = 0; j < J; ++j) {
      const auto lengths = batch.seq_lengths.begin() + static_cast<long>(j) * B;
      for (int q = 0; q < R; ++q) {
        int64_t n = 0;
        for (int64_t b = q * Bl; b < (q + 1) * Bl; ++b) n += lengths[b];
        event_offsets[j][q + 1] = event_offsets[j][q] + n * g.d;
      }
      in.lengths.emplace_back(lengths + b0, lengths + b0 + Bl);
      // An event's embedding: (item + action) + dt, as the oracle's trainer sums the three rows; the
      // model forms the sum as it places the event in its sequence.
      in.events.push_back(EventRows{emb_out->sequence[3 * j], emb_out->sequence[3 * j + 1], emb_out->sequence[3 * j + 2]});
    }
    Backward b;
    GemBatchOutput out;
    out.logits = logits->get() + b0 * T;
    out.loss = loss->get();
    if (train) {
      out.param_grad = grad->get();
      GEMTB_ASSIGN_OR_RETURN(b.pooled_grad, Allocate<float>(static_cast<size_t>((local_grads ? Bl : B) * W), "pooled grad"));
      out.pooled_grad = b.pooled_grad->get() + (local_grads ? 0 : b0 * W);
      b.events_grad.resize(J);
      for (int j = 0; j < J; ++j) {
        const int64_t mine = event_offsets[j][r + 1] - event_offsets[j][r];
        GEMTB_ASSIGN_OR_RETURN(b.events_grad[j],
                               Allocate<float>(static_cast<size_t>(local_grads ? mine : event_offsets[j][R]), "events grad"));
        out.events_grad.push_back(b.events_grad[j]->get() + (local_grads ? 0 : event_offsets[j][r]));
      }
    }
    // Under the semi-synchronous pipeline a training step's model runs on its own stream, after the
    // inputs made on the legacy stream, beside the next step's lookups; the step's collectives wait
    // for it again.
    cudaStream_t stream = semi ? model_stream : nullptr;
    if (semi) {
      GEMTB_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(lookups_ready, nullptr), "cudaEventRecord"));
      GEMTB_RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(model_stream, lookups_ready, 0), "cudaStreamWaitEvent"));
    }
    std::optional<RegionTimer> timer;
    if (time_regions) timer.emplace(stream);
    GEMTB_RETURN_IF_ERROR(model->Run(ModelParams(), in, out, stream, timer ? &*timer : nullptr));
    if (semi) {
      GEMTB_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(model_done, model_stream), "cudaEventRecord"));
      GEMTB_RETURN_IF_ERROR(LookAhead());
      GEMTB_RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(nullptr, model_done, 0), "cudaStreamWaitEvent"));
    }
    if (split) {
      // The rank's parts become the step's: its samples' logits, loss share and embedding gradients
      // to every rank; the dense gradient summed into this rank's shard.
      auto even = [&](int64_t per_rank) {
        std::vector<int64_t> counts(R, per_rank), offsets(R);
        for (int q = 0; q < R; ++q) offsets[q] = q * per_rank;
        return std::pair{counts, offsets};
      };
      auto [lc, lo] = even(Bl * T);
      auto [pc, po] = even(Bl * W);
      auto outputs = [&]() -> absl::Status {
        GEMTB_RETURN_IF_ERROR(dist->AllGatherV(logits->get(), lc, lo, nullptr));
        GEMTB_RETURN_IF_ERROR(dist->AllReduceSum(loss->get(), 1, nullptr));
        if (!train || local_grads) return absl::OkStatus();
        GEMTB_RETURN_IF_ERROR(dist->AllGatherV(b.pooled_grad->get(), pc, po, nullptr));
        for (int j = 0; j < J; ++j) {
          std::vector<int64_t> counts(R), offsets(event_offsets[j].begin(), event_offsets[j].end() - 1);
          for (int q = 0; q < R; ++q) counts[q] = event_offsets[j][q + 1] - event_offsets[j][q];
          GEMTB_RETURN_IF_ERROR(dist->AllGatherV(b.events_grad[j]->get(), counts, offsets, nullptr));
        }
        return absl::OkStatus();
      };
      GEMTB_RETURN_IF_ERROR(Timed("outputs.all_gather", "sparse-mp", Where::kAfterModel, outputs));
      if (train && !units.empty()) {
        // Per unit: the last region's (E.dense's) reduce-scatter, then the replicas wait for all.
        if (unit_in_backward) GEMTB_RETURN_IF_ERROR(ReduceScatterUnit(*std::exchange(unit_in_backward, std::nullopt), stream));
        GEMTB_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(grads_ready, param_stream), "cudaEventRecord"));
        GEMTB_RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(nullptr, grads_ready, 0), "cudaStreamWaitEvent"));
      } else if (train) {
        GEMTB_RETURN_IF_ERROR(Timed("grads.reduce_scatter", "dense-shard", Where::kAfterModel, [&] {
          return dist->ReduceScatterGrads(grad->get(), grad_shard->get(), shard_count, nullptr);
        }));
      }
      if (train && ep_params) {
        GEMTB_RETURN_IF_ERROR(Timed("expert_grads.reduce_scatter", "expert-shard", Where::kAfterModel, [&] {
          return dist->ReduceScatterExpertGrads(grad->get() + ExpertsAt(), grad_shard->get() + shard_count,
                                                expert_shard_count, nullptr);
        }));
      }
      if (train) {
        GEMTB_RETURN_IF_ERROR(Timed("grads.all_reduce", "dense-replica", Where::kAfterModel, [&] {
          return dist->AllReduceReplicas(grad_shard->get(), shard_count, nullptr);
        }));
        if (ep_params) {
          GEMTB_RETURN_IF_ERROR(Timed("expert_grads.all_reduce", "dense-replica", Where::kAfterModel, [&] {
            return dist->AllReduceExpertReplicas(grad_shard->get() + shard_count, expert_shard_count, nullptr);
          }));
        }
      }
    }
    GEMTB_RETURN_IF_ERROR(Synchronize("model step"));
    GEMTB_ASSIGN_OR_RETURN(b.result.collectives, TakeCollectiveTimes(timer ? &*timer : nullptr));
    if (timer) GEMTB_ASSIGN_OR_RETURN(b.result.regions, timer->Times());
    GEMTB_RETURN_IF_ERROR(logits->Download(b.result.logits, "logits"));
    std::vector<double> loss_host;
    GEMTB_RETURN_IF_ERROR(loss->Download(loss_host, "loss"));
    b.result.loss = loss_host[0];
    b.result.step = step;
    times.model_ms = Ms(at);
    return b;
  }

  // The optimizers of the step whose batch the TBE holds, with the dense gradient in `grad`: the
  // tables' fused rowwise Adagrad (a sequence event's gradient goes to its item, action and dt
  // rows), then dense Adam.
  absl::Status Apply(const Backward& b) {
    // Each sequence's gradient serves its item, action and dt keys (3j, 3j + 1, 3j + 2).
    std::vector<const float*> seq_g;
    for (const Array<float>& e : b.events_grad)
      for (int k = 0; k < 3; ++k) seq_g.push_back(e->get());
    const float table_lr = gemtb::model::ScheduledRate(options.table_lr, options.table_decay, step, options.total_steps,
                                                      options.linear_decay);
    Clock::time_point at = Clock::now();
    if (sharded != nullptr) {
      sparse_before_model = false;
      GEMTB_RETURN_IF_ERROR(sharded->SetLearningRate(table_lr));
      GEMTB_RETURN_IF_ERROR(sharded->Backward(b.pooled_grad->get(), seq_g));
    } else {
      GEMTB_RETURN_IF_ERROR(tbe->SetLearningRate(table_lr));
      GEMTB_RETURN_IF_ERROR(tbe->SetDeviceGrads(b.pooled_grad->get(), seq_g));
      GEMTB_RETURN_IF_ERROR(tbe->BackwardStep());
    }
    GEMTB_RETURN_IF_ERROR(CudaStatus(cudaDeviceSynchronize(), "embedding backward"));
    times.embedding_bwd_ms = Ms(at);
    at = Clock::now();

    OptimizerConfig adam;
    adam.kind = OptimizerKind::kAdam;
    adam.lr = gemtb::model::ScheduledRate(options.lr, 1.0f, step, options.total_steps, options.linear_decay);
    adam.beta1 = options.beta1;
    adam.beta2 = options.beta2;
    adam.eps = options.eps;
    const gemtb::embedding::AdamStep bias = gemtb::embedding::NextAdamStep({adam_b1, adam_b2}, adam);
    adam_b1 = bias.b1;
    adam_b2 = bias.b2;
    // In a job: this rank's shard, with the gradient summed over every rank.
    float* dense_grad = dist != nullptr ? grad_shard->get() : grad->get();
    GEMTB_RETURN_IF_ERROR(DenseAdamStep(params->get(), dense_grad, adam_m->get(), adam_v->get(),
                                        static_cast<int64_t>(params->size()), bias, adam, nullptr, nullptr));
    GEMTB_RETURN_IF_ERROR(CudaStatus(cudaDeviceSynchronize(), "step"));
    times.optimizer_ms = Ms(at);
    ++step;
    return absl::OkStatus();
  }
};

GpuTrainer::GpuTrainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuTrainer::~GpuTrainer() = default;
int64_t GpuTrainer::step() const { return impl_->step; }
void GpuTrainer::TimeRegions(bool on) { impl_->time_regions = on; }
int64_t GpuTrainer::num_params() const { return impl_->num_params; }

absl::StatusOr<int64_t> PeakStepMemoryBytes() {
  cudaMemPool_t pool = nullptr;
  int device = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess)
    return absl::InternalError(absl::StrCat("cudaGetDevice: ", cudaGetErrorString(e)));
  if (cudaError_t e = cudaDeviceGetDefaultMemPool(&pool, device); e != cudaSuccess)
    return absl::InternalError(absl::StrCat("cudaDeviceGetDefaultMemPool: ", cudaGetErrorString(e)));
  uint64_t high = 0;
  if (cudaError_t e = cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high); e != cudaSuccess)
    return absl::InternalError(absl::StrCat("cudaMemPoolGetAttribute(used high): ", cudaGetErrorString(e)));
  return static_cast<int64_t>(high);
}

absl::StatusOr<std::unique_ptr<GpuTrainer>> GpuTrainer::Create(const gemtb::model::ModelConfig& config,
                                                               const TrainerOptions& options,
                                                               const GemModelOptions& numerics,
                                                               TrainerCollectives* collectives,
                                                               const JobOptions& job) {
  GEMTB_RETURN_IF_ERROR(gemtb::model::ValidateTrainOptions(options));
  if (collectives != nullptr) {
    const int R = collectives->world_size(), s = collectives->shard_group_size();
    if (options.batch % R != 0) {
      return absl::InvalidArgumentError(absl::StrCat("batch: ", options.batch, " (the global batch) does not divide into ",
                                                     R, " ranks' local batches"));
    }
    if (job.split != data::RankSplit::kContiguous && (job.sub_batch < 1 || (options.batch / R) % job.sub_batch != 0)) {
      return absl::InvalidArgumentError(absl::StrCat("sub_batch: ", job.sub_batch, " samples do not divide a rank's ",
                                                     options.batch / R, " (batch split ",
                                                     data::RankSplitName(job.split), ")"));
    }
    if (s < 1 || R % s != 0) {
      return absl::InvalidArgumentError(absl::StrCat("shard group of ", s, " ranks does not divide the world of ", R));
    }
  }
  GEMTB_RETURN_IF_ERROR(embedding::EmbeddingDeviceAvailable());
  GEMTB_RETURN_IF_ERROR(RetainFreedDeviceMemory());
  // Under expert parallelism this rank holds the parameters that are no expert's and its EP
  // member's experts', each array sharded over its own group (model/description/expert_params.h).
  ExpertExchange* const ep_group = collectives != nullptr ? collectives->expert_exchange() : nullptr;
  std::optional<GemModelPlacement> placement;
  std::optional<gemtb::model::MemberParams> ep_params;
  int64_t dense_shard_count = 0, expert_shard_count = 0;
  if (ep_group != nullptr) {
    const ExpertExchange& ep = *ep_group;
    absl::StatusOr<gemtb::model::GemGeometry> g = gemtb::model::MakeGemGeometry(config);
    if (!g.ok()) return g.status();
    GEMTB_RETURN_IF_ERROR(gemtb::model::CheckExpertDegree(*g, ep.degree(), "expert degree"));
    GEMTB_RETURN_IF_ERROR(gemtb::model::CheckExpertShardGroup(collectives->world_size(), ep.degree(),
                                                              collectives->expert_shard_group_size(),
                                                              "expert shard group"));
    const int64_t s = collectives->shard_group_size(), se = collectives->expert_shard_group_size();
    ep_params = gemtb::model::MemberParamsOf(*g, ep.degree(), ep.member());
    dense_shard_count = (ep_params->dense_count() + s - 1) / s;
    expert_shard_count = (ep_params->expert_count() + se - 1) / se;
    placement.emplace();
    placement->layout = gemtb::model::MemberLayout(*g, ep.degree(), ep.member(), dense_shard_count * s);
    placement->experts = gemtb::model::ExpertsOfMember(g->experts, ep.degree(), ep.member());
  }
  absl::StatusOr<std::unique_ptr<GemModelGpu>> model =
      GemModelGpu::Create(config, numerics, placement ? &*placement : nullptr);
  if (!model.ok()) return model.status();
  absl::StatusOr<data::DataParams> params = data::LoadDataParams(options.data.empty() ? config.name : options.data);
  if (!params.ok()) return params.status();
  absl::StatusOr<data::Generator> gen = data::Generator::Create(*params, data::ShapeFromConfig(config));
  if (!gen.ok()) return gen.status();
  if (options.pipeline == gemtb::model::SparsePipeline::kSemiSync && job.sparse_plan && job.sparse_plan->fully_sharded)
    return absl::InvalidArgumentError(
        "sparse_plan.fully_sharded: the semi-synchronous pipeline does not run with fully sharded 2D tables (the "
        "next batch's gather would precede this batch's update of the gathered copy)");
  auto impl = std::make_unique<Impl>(*std::move(gen));
  impl->config = config;
  impl->options = options;
  if (impl->semi_sync()) {
    GEMTB_RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&impl->model_stream, cudaStreamNonBlocking),
                                     "cudaStreamCreateWithFlags (model stream)"));
    GEMTB_RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&impl->model_done, cudaEventDisableTiming), "cudaEventCreate"));
    GEMTB_RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&impl->lookups_ready, cudaEventDisableTiming), "cudaEventCreate"));
  }
  impl->model = *std::move(model);
  impl->emb = gemtb::model::GemEmbeddingConfig(config, options.table_lr, options.seed);
  absl::StatusOr<std::unique_ptr<embedding::DeviceTbe>> tbe = embedding::DeviceTbe::Create(impl->emb, {}, 0);
  if (!tbe.ok()) return tbe.status();
  impl->tbe = *std::move(tbe);
  const std::vector<float> init = gemtb::model::InitParams(impl->model->geometry().layout, options.seed);
  impl->num_params = static_cast<int64_t>(init.size());
  GEMTB_ASSIGN_OR_RETURN(impl->loss, Allocate<double>(1, "loss"));
  if (collectives == nullptr) {
    const std::vector<float> zeros(init.size(), 0.0f);
    GEMTB_ASSIGN_OR_RETURN(impl->params, Upload<float>(init, "params"));
    GEMTB_ASSIGN_OR_RETURN(impl->grad, Upload<float>(zeros, "grad"));
    GEMTB_ASSIGN_OR_RETURN(impl->adam_m, Upload<float>(zeros, "adam m"));
    GEMTB_ASSIGN_OR_RETURN(impl->adam_v, Upload<float>(zeros, "adam v"));
    return std::unique_ptr<GpuTrainer>(new GpuTrainer(std::move(impl)));
  }
  const int s = collectives->shard_group_size();
  impl->dist = collectives;
  impl->job = job;
  impl->shard_count = (impl->num_params + s - 1) / s;
  impl->shard_member = collectives->rank() % s;
  int64_t experts_gathered = 0;  // the experts' gathered values after the dense ones
  if (ep_group != nullptr) {
    impl->timed_experts.emplace(impl.get(), ep_group);
    impl->ep_params = std::move(ep_params);
    impl->shard_count = dense_shard_count;
    impl->expert_shard_count = expert_shard_count;
    impl->expert_member = gemtb::model::ExpertGroupsOf(collectives->rank(), collectives->world_size(), ep_group->degree(),
                                                       collectives->expert_shard_group_size())
                              .shard_member;
    experts_gathered = expert_shard_count * collectives->expert_shard_group_size();
  }
  absl::StatusOr<float*> buffer = collectives->ParamsBuffer(impl->shard_count, experts_gathered);
  if (!buffer.ok()) return buffer.status();
  impl->gathered = *buffer;
  const std::vector<float> zeros(static_cast<size_t>(impl->shard_count * s + experts_gathered), 0.0f);
  GEMTB_ASSIGN_OR_RETURN(impl->grad, Upload<float>(zeros, "grad"));
  const std::vector<float> zero_shard(static_cast<size_t>(impl->shard_count + impl->expert_shard_count), 0.0f);
  GEMTB_ASSIGN_OR_RETURN(impl->grad_shard, Upload<float>(zero_shard, "grad shard"));
  GEMTB_ASSIGN_OR_RETURN(impl->adam_m, Upload<float>(zero_shard, "adam m"));
  GEMTB_ASSIGN_OR_RETURN(impl->adam_v, Upload<float>(zero_shard, "adam v"));
  GEMTB_ASSIGN_OR_RETURN(impl->params, Upload<float>(impl->Shard(init), "params"));
  if (job.param_prefetch) {
    Impl& m = *impl;
    m.units = gemtb::model::ParamUnits(m.model->geometry());
    // Under expert parallelism the units are ranges of the packed dense array (their experts'
    // parameters are gathered whole, ahead of them).
    if (m.ep_params) m.units = gemtb::model::PackedUnits(m.units, m.ep_params->dense);
    for (size_t u = 0; u < m.units.size(); ++u) {
      m.unit_of_region[m.units[u].region] = u;
      m.unit_ready.emplace_back();
      GEMTB_RETURN_IF_ERROR(
          CudaStatus(cudaEventCreateWithFlags(&m.unit_ready.back(), cudaEventDisableTiming), "cudaEventCreate"));
    }
    GEMTB_RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&m.shards_current, cudaEventDisableTiming), "cudaEventCreate"));
    GEMTB_RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&m.grads_ready, cudaEventDisableTiming), "cudaEventCreate"));
    GEMTB_RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&m.param_stream, cudaStreamNonBlocking),
                                     "cudaStreamCreateWithFlags (parameter stream)"));
    m.model->SetRegionHook([&m](const std::string& region, bool backward, cudaStream_t stream) {
      return m.WaitForUnit(region, backward, stream);
    });
  }
  if (job.sparse_plan) {
    if (collectives->sparse_exchange() == nullptr) {
      return absl::InvalidArgumentError("sparse_plan: these collectives carry no sparse exchange");
    }
    absl::StatusOr<std::unique_ptr<embedding::ShardedDeviceTbe>> sharded = embedding::ShardedDeviceTbe::Create(
        impl->emb, *job.sparse_plan, job.gpus_per_host, options.batch / collectives->world_size(),
        collectives->sparse_exchange(), {}, 0);
    if (!sharded.ok()) return sharded.status();
    impl->sharded = *std::move(sharded);
    impl->tbe.reset();
    impl->TimeSparseCollectives();
  }
  return std::unique_ptr<GpuTrainer>(new GpuTrainer(std::move(impl)));
}

absl::StatusOr<TrainerStep> GpuTrainer::Step() {
  Impl& m = *impl_;
  m.times = StepTimes{};
  const Impl::Clock::time_point at = Impl::Clock::now();
  absl::StatusOr<data::Batch> taken = m.TakeStepBatch();
  if (!taken.ok()) return taken.status();
  const data::Batch batch = *std::move(taken);
  m.times.data_ms = Impl::Ms(at);
  absl::StatusOr<Impl::Backward> b = m.Pass(batch, true);
  if (!b.ok()) return b.status();
  // A job's rank looked up its own samples; replicated tables' update takes every sample's gradient.
  // Under the semi-synchronous pipeline the TBE holds the next step's input by now.
  if (m.sharded == nullptr && (m.dist != nullptr || m.semi_sync())) GEMTB_RETURN_IF_ERROR(m.TbeInput(batch));
  GEMTB_RETURN_IF_ERROR(m.Apply(*b));
  // Sharded tables: their update's collectives, after the step's others (Apply waited for them).
  absl::StatusOr<std::vector<CollectiveTime>> update = m.TakeCollectiveTimes();
  if (!update.ok()) return update.status();
  for (CollectiveTime& c : *update) b->result.collectives.push_back(std::move(c));
  b->result.step = m.step;
  b->result.times = m.times;
  const int64_t first = (m.step - 1) * batch.size;  // the step just taken
  b->result.logits = m.GeneratorOrder(batch, b->result.logits, b->result.logits.size() / batch.size, first);
  // [J, B] sequence-major: each sequence's lengths back in generator order.
  const int64_t J = static_cast<int64_t>(batch.seq_lengths.size()) / batch.size;
  b->result.seq_lengths.resize(batch.seq_lengths.size());
  for (int64_t j = 0; j < J; ++j) {
    const std::vector<int32_t> lengths(batch.seq_lengths.begin() + j * batch.size,
                                       batch.seq_lengths.begin() + (j + 1) * batch.size);
    const std::vector<int32_t> back = m.GeneratorOrder(batch, lengths, 1, first);
    std::copy(back.begin(), back.end(), b->result.seq_lengths.begin() + j * batch.size);
  }
  return std::move(b->result);
}

absl::StatusOr<TrainerGradients> GpuTrainer::Gradients() {
  Impl& m = *impl_;
  if (m.dist != nullptr) return absl::FailedPreconditionError("Gradients: one GPU only (this trainer is a rank of a job)");
  if (m.semi_sync()) return absl::FailedPreconditionError("Gradients: the synchronous pipeline only");
  absl::StatusOr<Impl::Backward> b = m.Pass(m.StepBatch(), true);
  if (!b.ok()) return b.status();
  TrainerGradients g;
  g.loss = b->result.loss;
  GEMTB_RETURN_IF_ERROR(m.grad->Download(g.dense, "grad"));
  GEMTB_RETURN_IF_ERROR(b->pooled_grad->Download(g.pooled, "pooled grad"));
  g.events.resize(b->events_grad.size());
  for (size_t j = 0; j < g.events.size(); ++j) GEMTB_RETURN_IF_ERROR(b->events_grad[j]->Download(g.events[j], "events grad"));
  return g;
}

absl::Status GpuTrainer::ApplyGradients(const TrainerGradients& grads) {
  Impl& m = *impl_;
  if (m.dist != nullptr) {
    return absl::FailedPreconditionError("ApplyGradients: one GPU only (this trainer is a rank of a job)");
  }
  if (m.semi_sync()) return absl::FailedPreconditionError("ApplyGradients: the synchronous pipeline only");
  const data::Batch batch = m.StepBatch();
  const gemtb::model::GemGeometry& g = m.model->geometry();
  const int64_t B = batch.size;
  if (grads.dense.size() != m.grad->size())
    return absl::InvalidArgumentError(
        absl::StrCat("grads.dense: ", grads.dense.size(), " values, the model has ", m.grad->size(), " parameters"));
  if (static_cast<int64_t>(grads.pooled.size()) != B * m.tbe->pooled_width())
    return absl::InvalidArgumentError(absl::StrCat("grads.pooled: ", grads.pooled.size(), " values, the batch needs ",
                                                   B * m.tbe->pooled_width(), " (", B, " x ", m.tbe->pooled_width(), ")"));
  const int J = g.num_sequences();
  if (static_cast<int>(grads.events.size()) != J)
    return absl::InvalidArgumentError(absl::StrCat("grads.events: ", grads.events.size(), " sequences, the model has ", J));
  for (int j = 0; j < J; ++j) {
    int64_t events = 0;
    for (int64_t b = 0; b < B; ++b) events += batch.seq_lengths[static_cast<size_t>(j * B + b)];
    if (static_cast<int64_t>(grads.events[j].size()) != events * g.d)
      return absl::InvalidArgumentError(absl::StrCat("grads.events[", j, "]: ", grads.events[j].size(),
                                                     " values, the batch has ", events, " events of width ", g.d));
  }
  GEMTB_RETURN_IF_ERROR(m.TbeForward(batch));
  GEMTB_RETURN_IF_ERROR(CudaStatus(cudaMemcpy(m.grad->get(), grads.dense.data(), grads.dense.size() * sizeof(float),
                                              cudaMemcpyHostToDevice),
                                   "grads.dense upload"));
  Impl::Backward b;
  GEMTB_ASSIGN_OR_RETURN(b.pooled_grad, Upload<float>(grads.pooled, "grads.pooled"));
  for (const std::vector<float>& e : grads.events) {
    b.events_grad.emplace_back();
    GEMTB_ASSIGN_OR_RETURN(b.events_grad.back(), Upload<float>(e, "grads.events"));
  }
  return m.Apply(b);
}

absl::Status GpuTrainer::LoadState(const TrainerState& state) {
  Impl& m = *impl_;
  const size_t P = static_cast<size_t>(m.num_params);
  if (state.step < 0) return absl::InvalidArgumentError(absl::StrCat("state.step: ", state.step, " must be >= 0"));
  for (const auto& [name, v] : {std::pair{"params", &state.params}, {"adam_m", &state.adam_m}, {"adam_v", &state.adam_v}})
    if (v->size() != P)
      return absl::InvalidArgumentError(absl::StrCat("state.", name, ": ", v->size(), " values, the model has ", P));
  if (m.sharded != nullptr) {
    // This rank's shards, in its routing's order.
    const std::vector<embedding::HeldShard>& held = m.sharded->routing().held();
    if (state.table_shards.size() != held.size())
      return absl::InvalidArgumentError(absl::StrCat("state.table_shards: ", state.table_shards.size(), " shards, rank ",
                                                     m.dist->rank(), " holds ", held.size()));
    for (size_t i = 0; i < held.size(); ++i) {
      const TableConfig& tc = held[i].config.tables[0];
      if (static_cast<int64_t>(state.table_shards[i].weights.size()) != tc.rows * tc.dim)
        return absl::InvalidArgumentError(absl::StrCat("state.table_shards[", i, "] (", tc.name, "): ",
                                                       state.table_shards[i].weights.size(), " weights, the shard has ",
                                                       tc.rows, " x ", tc.dim));
    }
    if (m.semi_sync() && state.step > 0)
      return absl::FailedPreconditionError(
          "LoadState: sharded tables under the semi-synchronous pipeline keep no pending lookups in a state");
    m.prefetch.reset();  // its thread may be routing on the module this replaces
    m.step_routed.reset();
    m.pending.reset();
    absl::StatusOr<std::unique_ptr<embedding::ShardedDeviceTbe>> sharded = embedding::ShardedDeviceTbe::Create(
        m.emb, *m.job.sparse_plan, m.job.gpus_per_host, m.options.batch / m.dist->world_size(),
        m.dist->sparse_exchange(), state.table_shards, state.step);
    if (!sharded.ok()) return sharded.status();
    GEMTB_RETURN_IF_ERROR(m.params->Upload(m.Shard(state.params), "params"));
    GEMTB_RETURN_IF_ERROR(m.adam_m->Upload(m.Shard(state.adam_m), "adam m"));
    GEMTB_RETURN_IF_ERROR(m.adam_v->Upload(m.Shard(state.adam_v), "adam v"));
    m.sharded = *std::move(sharded);
    m.TimeSparseCollectives();
    m.step = state.step;
    m.adam_b1 = state.adam_b1;
    m.adam_b2 = state.adam_b2;
    return absl::OkStatus();
  }
  if (state.tables.size() != m.emb.tables.size())
    return absl::InvalidArgumentError(
        absl::StrCat("state.tables: ", state.tables.size(), " tables, the model has ", m.emb.tables.size()));
  for (size_t t = 0; t < state.tables.size(); ++t) {
    const TableConfig& tc = m.emb.tables[t];
    if (static_cast<int64_t>(state.tables[t].weights.size()) != tc.rows * tc.dim ||
        static_cast<int64_t>(state.tables[t].adagrad.size()) != tc.rows)
      return absl::InvalidArgumentError(absl::StrCat("state.tables[", t, "] (", tc.name, "): ", state.tables[t].weights.size(),
                                                     " weights and ", state.tables[t].adagrad.size(), " Adagrad values, the table has ",
                                                     tc.rows, " x ", tc.dim, " and ", tc.rows));
  }
  const bool lookups = !state.pipeline_pooled.empty() || !state.pipeline_sequence.empty();
  if (lookups && !m.semi_sync())
    return absl::InvalidArgumentError(
        "state.pipeline_pooled: holds the semi-synchronous pipeline's lookups; this trainer is synchronous");
  if (!lookups && m.semi_sync() && state.step > 0)
    return absl::InvalidArgumentError(absl::StrCat("state.pipeline_pooled: empty; step ", state.step,
                                                   " of a semi-synchronous run needs the lookups made before its "
                                                   "last table update"));
  absl::StatusOr<std::unique_ptr<embedding::DeviceTbe>> tbe = embedding::DeviceTbe::Create(m.emb, state.tables, state.step);
  if (!tbe.ok()) return tbe.status();
  std::optional<Impl::Lookups> pending;
  if (lookups) {
    // Shaped by the step's batch of this trainer's samples, then filled from the state.
    const data::Batch batch = m.BatchOf(state.step);
    GEMTB_RETURN_IF_ERROR((*tbe)->SetInput(embedding::KjtViewOfBatch(m.dist != nullptr ? m.RankSamples(batch) : batch)));
    absl::StatusOr<embedding::DeviceOutputView> shape = (*tbe)->DeviceOutput();
    if (!shape.ok()) return shape.status();
    const int64_t b = m.dist != nullptr ? batch.size / m.dist->world_size() : batch.size;
    if (static_cast<int64_t>(state.pipeline_pooled.size()) != b * shape->pooled_width)
      return absl::InvalidArgumentError(absl::StrCat("state.pipeline_pooled: ", state.pipeline_pooled.size(),
                                                     " values, step ", state.step, "'s lookups have ", b, " x ",
                                                     shape->pooled_width));
    if (state.pipeline_sequence.size() != shape->sequence.size())
      return absl::InvalidArgumentError(absl::StrCat("state.pipeline_sequence: ", state.pipeline_sequence.size(),
                                                     " arrays, the model has ", shape->sequence.size(),
                                                     " sequence keys"));
    for (size_t k = 0; k < shape->sequence.size(); ++k) {
      if (static_cast<int64_t>(state.pipeline_sequence[k].size()) != shape->sequence_size[k])
        return absl::InvalidArgumentError(absl::StrCat("state.pipeline_sequence[", k, "]: ",
                                                       state.pipeline_sequence[k].size(), " values, step ", state.step,
                                                       "'s lookups have ", shape->sequence_size[k]));
    }
    absl::StatusOr<Impl::Lookups> l = Impl::AllocateLookups(state.step, b, *shape);
    if (!l.ok()) return l.status();
    // Into the arrays the view points at (an Upload would reallocate them).
    GEMTB_RETURN_IF_ERROR(CudaStatus(cudaMemcpy(l->pooled->get(), state.pipeline_pooled.data(),
                                                state.pipeline_pooled.size() * sizeof(float), cudaMemcpyHostToDevice),
                                     "pending pooled lookups"));
    for (size_t k = 0; k < state.pipeline_sequence.size(); ++k) {
      GEMTB_RETURN_IF_ERROR(CudaStatus(cudaMemcpy(l->sequence[k]->get(), state.pipeline_sequence[k].data(),
                                                  state.pipeline_sequence[k].size() * sizeof(float),
                                                  cudaMemcpyHostToDevice),
                                       "pending sequence lookups"));
    }
    pending = *std::move(l);
  }
  GEMTB_RETURN_IF_ERROR(m.params->Upload(m.dist ? m.Shard(state.params) : state.params, "params"));
  GEMTB_RETURN_IF_ERROR(m.adam_m->Upload(m.dist ? m.Shard(state.adam_m) : state.adam_m, "adam m"));
  GEMTB_RETURN_IF_ERROR(m.adam_v->Upload(m.dist ? m.Shard(state.adam_v) : state.adam_v, "adam v"));
  // The batch in flight first (its thread may be checking a KJT on the module this replaces; the
  // next Step makes its own), then the module.
  m.prefetch.reset();
  m.step_checked.reset();
  m.tbe = *std::move(tbe);
  m.pending = std::move(pending);
  m.step = state.step;
  m.adam_b1 = state.adam_b1;
  m.adam_b2 = state.adam_b2;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> GpuTrainer::Predict(int64_t first_index, int64_t count) {
  Impl& m = *impl_;
  // Sharded tables look up whole global batches (each rank its part): chunks of the batch size, the
  // last one filled up with the next samples, whose predictions are dropped.
  const int64_t chunk = m.sharded != nullptr ? m.options.batch : 256;
  const int64_t T = m.model->geometry().num_tasks;
  std::vector<double> pred;
  for (int64_t at = 0; at < count; at += chunk) {
    const int64_t n = std::min(chunk, count - at);
    const data::Batch batch = data::GenerateBatchParallel(m.generator, m.options.data_seed, first_index + at,
                                                          m.sharded != nullptr ? chunk : n);
    absl::StatusOr<Impl::Backward> r = m.Pass(batch, false);
    if (!r.ok()) return r.status();
    for (int64_t i = 0; i < n * T; ++i) {
      pred.push_back(1.0 / (1.0 + std::exp(-static_cast<double>(r->result.logits[static_cast<size_t>(i)]))));
    }
  }
  return pred;
}

absl::StatusOr<TrainerRankState> GpuTrainer::RankState() const {
  const Impl& m = *impl_;
  if (m.dist == nullptr) return absl::FailedPreconditionError("RankState: a rank of a job only (one GPU: State)");
  if (m.pending)
    return absl::FailedPreconditionError(
        "RankState: a job's checkpoint under the semi-synchronous pipeline (each rank's pending lookups) is not "
        "written; run the job synchronously to checkpoint it");
  TrainerRankState s;
  s.step = m.step;
  s.adam_b1 = m.adam_b1;
  s.adam_b2 = m.adam_b2;
  const int rank = m.dist->rank(), R = m.dist->world_size(), sg = m.dist->shard_group_size();
  // Shard group 0 writes part q of sg equal parts of the flat arrays: its shards, or under expert
  // parallelism (whose shards hold packed arrays) the same part cut from the whole arrays, which
  // every rank joins in gathering.
  const int64_t per = (m.num_params + sg - 1) / sg, first = m.shard_member * per;
  const int64_t size = std::clamp<int64_t>(m.num_params - first, 0, per);
  for (auto [array, dst] : {std::pair{&m.params, &s.params}, {&m.adam_m, &s.adam_m}, {&m.adam_v, &s.adam_v}}) {
    if (m.ep_params) {
      absl::StatusOr<std::vector<float>> whole = m.Whole(**array, "dense state");
      if (!whole.ok()) return whole.status();
      if (rank < sg) *dst = Impl::Piece(*whole, m.shard_member, per);
    } else if (rank < sg) {
      GEMTB_RETURN_IF_ERROR((*array)->Download(*dst, "dense shard"));
    }
    if (rank < sg) dst->resize(static_cast<size_t>(size));
  }
  if (rank < sg) s.dense_part = m.shard_member, s.dense_first = first;
  if (m.sharded != nullptr) {
    absl::StatusOr<std::vector<embedding::HostTable>> shards = m.sharded->DownloadShards();
    if (!shards.ok()) return shards.status();
    s.table_shards = *std::move(shards);
    return s;
  }
  for (int t = rank; t < static_cast<int>(m.emb.tables.size()); t += R) {
    absl::StatusOr<embedding::HostTable> table = m.tbe->DownloadTable(t);
    if (!table.ok()) return table.status();
    s.table_index.push_back(t);
    s.tables.push_back(*std::move(table));
  }
  return s;
}

absl::StatusOr<TrainerState> GpuTrainer::State() const {
  const Impl& m = *impl_;
  TrainerState s;
  s.step = m.step;
  s.adam_b1 = m.adam_b1;
  s.adam_b2 = m.adam_b2;
  GEMTB_ASSIGN_OR_RETURN(s.params, m.Whole(*m.params, "params"));
  GEMTB_ASSIGN_OR_RETURN(s.adam_m, m.Whole(*m.adam_m, "adam m"));
  GEMTB_ASSIGN_OR_RETURN(s.adam_v, m.Whole(*m.adam_v, "adam v"));
  if (m.sharded != nullptr) {
    absl::StatusOr<std::vector<embedding::HostTable>> shards = m.sharded->DownloadShards();
    if (!shards.ok()) return shards.status();
    s.table_shards = *std::move(shards);
    return s;
  }
  absl::StatusOr<std::vector<embedding::HostTable>> tables = m.tbe->DownloadTables();
  if (!tables.ok()) return tables.status();
  s.tables = *std::move(tables);
  if (m.pending) {
    GEMTB_RETURN_IF_ERROR(m.pending->pooled->Download(s.pipeline_pooled, "pending pooled lookups"));
    for (const Array<float>& a : m.pending->sequence) {
      s.pipeline_sequence.emplace_back();
      GEMTB_RETURN_IF_ERROR(a->Download(s.pipeline_sequence.back(), "pending sequence lookups"));
    }
  }
  return s;
}

}  // namespace gemtb::gpu::train
