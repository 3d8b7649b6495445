// gemtb train: trains the GEM-like model on one GPU (gpu/train/trainer.h), or as one rank per GPU of
// a job started by torchrun, mpirun or srun (the launcher's variables, model/launch/launch_env.h;
// NCCL groups through the job's store, gpu/comm/nccl_trainer_collectives.h), printing loss,
// samples/s and step time per --log-every-s seconds, then held-out NE per task; checkpoints into a
// folder in the sharded-checkpoint layout (reference/dist/sharded_checkpoint.h: one rank's file, or
// every rank's part of the state and rank 0's manifest last) and resumes from it to the bytes of an
// uninterrupted run. Every flag, the config and a one-process checkpoint to resume are checked before
// the GPU is touched, so a build without CUDA checks them too before it refuses.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/data/batch.h"
#include "model/data/generator.h"
#include "model/data/rank_split.h"
#include "model/data/shape_from_config.h"
#include "model/description/batch_flops.h"
#include "model/description/expert_params.h"
#include "model/description/gem_geometry.h"
#include "model/description/model_config.h"
#include "model/description/model_graph.h"
#include "model/launch/launch_env.h"
#include "model/metrics/ne.h"
#include "nlohmann/json.hpp"
#include "reference/dist/sharded_checkpoint.h"
#include "reference/model/checkpoint.h"
#include "reference/model/trainer.h"
#include "tools/gemtb/command.h"
#include "tools/gemtb/flags.h"
#include "tools/gemtb/gpu_numerics_flags.h"
#include "tools/gemtb/step_times_json.h"
#include "tools/gemtb/gpu_train_state.h"
#include "tools/gemtb/step_trace.h"
#include "tools/gemtb/stop_signals.h"
#include "tools/gemtb/train_common.h"
#include "tools/gemtb/train_job.h"
#include "tools/gemtb/train_plan.h"
#if GEMTB_HAVE_CUDA
#include <cuda_runtime.h>

#include "gpu/bench/device_timeline.h"
#include "gpu/bench/kernel_timer.h"
#endif
#if defined(GEMTB_HAVE_NCCL_COMM)
#include "gpu/comm/nccl_trainer_collectives.h"
#endif

namespace gemtb::cli {
namespace {

namespace fs = std::filesystem;
constexpr char kCommand[] = "train";

struct Flags {
  std::string config = "tiny";
  int64_t steps = 1000, local_batch = 64, seed = 1, data_seed = 1, eval_samples = 4096;
  std::optional<int64_t> schedule_steps;
  std::string pipeline = "sync";
  std::optional<double> lr, table_lr, log_every_s;
  std::optional<double> peak_tflops;  // default 989: the H200's dense bf16 peak
  std::string checkpoint, report, trace;
  int64_t checkpoint_every = 0, crash_checkpoint_after_bytes = -1;
  bool resume = false;
  bool trace_kernels = false;
  NumericsFlags numerics;
  // A job of several ranks: the dense parameters' shard group and who gathers them.
  std::optional<int64_t> shard_group;
  int64_t ep_degree = 1;
  std::optional<int64_t> expert_shard_group;
  std::string param_gather = "nccl";
  bool param_prefetch = false;
  std::string batch_split = "contiguous";
  int64_t sub_batch = 128;
  int64_t store_timeout = 300;
  std::string plan;  // the tables' sharding plan (a job only); empty: replicated
  std::optional<int64_t> gpus_per_host;
};

// What the flags, config and checkpoint resolve to, all checked before any work.
struct Job {
  launch::LaunchInfo launch;  // who this process is (one process: rank 0 of 1)
  int shard_group = 1;
  int ep_degree = 1;
  int expert_shard_group = 1;
  gpu::train::JobOptions split;  // how each step's global batch is split among the ranks
  gemtb::model::ModelConfig config;
  gpu::train::TrainerOptions options;
  gpu::train::GemModelOptions numerics;
  reference::dist::CheckpointIdentity identity;
  int64_t num_params = 0;
  double log_every_s = 5;
  std::optional<gemtb::model::BatchFlops> flops;  // the model FLOPs of a step's batch, for MFU
  std::optional<gpu::train::TrainerState> resumed;  // with --resume, one process (a job reads it after joining)
  std::string resumed_from;                        // its step folder
  std::optional<TrainPlan> plan;                   // --plan: the tables sharded
  bool several() const { return launch.world_size > 1; }
};

absl::Status Bad(const std::string& message) { return absl::InvalidArgumentError(message); }

// `status` prefixed by `what`, with a code of the bad-input exit: whatever keeps a checkpoint from
// being resumed (a damaged file is the reader's DataLoss) is this run's bad input.
absl::Status Named(const std::string& what, const absl::Status& status) {
  const absl::StatusCode code = status.code() == absl::StatusCode::kNotFound ? status.code()
                                                                              : absl::StatusCode::kFailedPrecondition;
  return absl::Status(code, absl::StrCat(what, ": ", status.message()));
}

// --checkpoint DIR: a folder that exists and is writable, or that can be made in a writable folder.
// Nothing is created here; the first checkpoint creates it.
absl::Status CheckCheckpointDir(const std::string& dir, bool resume) {
  std::error_code ec;
  if (fs::is_directory(dir, ec)) {
    if (::access(dir.c_str(), W_OK) != 0) return Bad(absl::StrCat("--checkpoint: ", dir, ": folder is not writable"));
    return absl::OkStatus();
  }
  if (fs::exists(dir, ec))
    return Bad(absl::StrCat("--checkpoint: ", dir, ": is a file, not a folder (gemtb train keeps step-<n> folders "
                            "in it; a checkpoint of `gemtb ref train` in one process is one file)"));
  if (resume) return absl::NotFoundError(absl::StrCat("--resume: --checkpoint ", dir, ": no such folder"));
  if (absl::Status s = reference::model::CheckCheckpointPath(dir); !s.ok()) return Bad(absl::StrCat("--checkpoint: ", s.message()));
  return absl::OkStatus();
}

absl::StatusOr<Job> Prepare(const Flags& f, const launch::LaunchInfo& launch) {
  const int R = launch.world_size;
  if (f.steps < 0) return Bad(absl::StrCat("--steps: ", f.steps, " must be >= 0"));
  if (f.local_batch < 1 || f.local_batch > (1 << 20))
    return Bad(absl::StrCat("--local-batch: ", f.local_batch, " must be in [1, 1048576]"));
  if (f.seed < 0) return Bad(absl::StrCat("--seed: ", f.seed, " must be >= 0"));
  if (f.data_seed < 0) return Bad(absl::StrCat("--data-seed: ", f.data_seed, " must be >= 0"));
  absl::StatusOr<gpu::train::GemModelOptions> numerics = f.numerics.Resolve();
  if (!numerics.ok()) return numerics.status();
  if (std::optional<std::string> m = CheckRate("lr", f.lr)) return Bad(*m);
  if (std::optional<std::string> m = CheckRate("table-lr", f.table_lr)) return Bad(*m);
  if (f.schedule_steps && *f.schedule_steps < 1) return Bad(absl::StrCat("--schedule-steps: ", *f.schedule_steps, " must be >= 1"));
  if (!f.schedule_steps && f.steps < 1) return Bad("--steps: 0 needs --schedule-steps (the learning-rate schedule's length)");
  if (f.log_every_s && !(std::isfinite(*f.log_every_s) && *f.log_every_s > 0 && *f.log_every_s <= 86400))
    return Bad(absl::StrCat("--log-every-s: ", Exact(*f.log_every_s), " must be in (0, 86400]"));
  if (f.peak_tflops && !(std::isfinite(*f.peak_tflops) && *f.peak_tflops > 0 && *f.peak_tflops <= 1e6))
    return Bad(absl::StrCat("--peak-tflops: ", Exact(*f.peak_tflops), " must be in (0, 1e6]"));
  if (f.eval_samples < 0 || f.eval_samples > (int64_t{1} << 24))
    return Bad(absl::StrCat("--eval-samples: ", f.eval_samples, " must be in [0, 16777216]"));
  if (f.checkpoint_every < 0) return Bad(absl::StrCat("--checkpoint-every: ", f.checkpoint_every, " must be >= 0"));
  if (f.crash_checkpoint_after_bytes < -1)
    return Bad(absl::StrCat("--crash-checkpoint-after-bytes: ", f.crash_checkpoint_after_bytes, " must be >= -1"));
  if (f.store_timeout < 1 || f.store_timeout > 86400)
    return Bad(absl::StrCat("--store-timeout: ", f.store_timeout, " must be in [1, 86400]"));
  if (f.param_gather != "nccl" && f.param_gather != "copy_engine")
    return Bad(absl::StrCat("--param-gather: '", f.param_gather, "' is not nccl or copy_engine"));
  if (f.param_prefetch && R == 1) return Bad("--param-prefetch: a job's option (one process gathers no parameters)");
  const std::optional<data::RankSplit> split = data::RankSplitFromName(f.batch_split);
  if (!split) return Bad(absl::StrCat("--batch-split: '", f.batch_split, "' is not contiguous, bbs or balance"));
  if (*split != data::RankSplit::kContiguous && (f.sub_batch < 1 || f.local_batch % f.sub_batch != 0))
    return Bad(absl::StrCat("--sub-batch: ", f.sub_batch, " does not divide --local-batch ", f.local_batch,
                            " (--batch-split ", f.batch_split, " deals whole sub-batches)"));
  const int64_t shard_group = f.shard_group.value_or(R);
  if (shard_group < 1 || R % shard_group != 0)
    return Bad(absl::StrCat("--shard-group: ", shard_group, " does not divide the job's ", R, " ranks"));
  if (f.ep_degree < 1 || R % f.ep_degree != 0)
    return Bad(absl::StrCat("--ep-degree: ", f.ep_degree, " does not divide the job's ", R, " rank", R == 1 ? "" : "s"));
  const int64_t expert_shard_group = f.expert_shard_group.value_or(R / f.ep_degree);
  if (f.expert_shard_group && f.ep_degree == 1) return Bad("--expert-shard-group: needs --ep-degree 2 or more");
  if (f.ep_degree > 1) {
    if (absl::Status s = gemtb::model::CheckExpertShardGroup(R, static_cast<int>(f.ep_degree),
                                                             static_cast<int>(expert_shard_group), "--expert-shard-group");
        !s.ok())
      return s;
    if (f.param_gather == "copy_engine")
      return Bad("--param-gather: copy_engine does not run with --ep-degree (the experts' parameters are gathered by NCCL)");
  }
  if (R > 1 && f.crash_checkpoint_after_bytes >= 0)
    return Bad("--crash-checkpoint-after-bytes: a single process only (kill a rank from outside instead)");
  if (f.local_batch * R > (1 << 20))
    return Bad(absl::StrCat("--local-batch: ", f.local_batch, " on ", R, " ranks is a global batch over 1048576"));
  if (f.checkpoint.empty()) {
    if (f.resume) return Bad("--resume: needs --checkpoint DIR (the folder to resume from)");
    if (f.checkpoint_every > 0) return Bad(absl::StrCat("--checkpoint-every: ", f.checkpoint_every, " needs --checkpoint DIR"));
    if (f.crash_checkpoint_after_bytes >= 0) return Bad("--crash-checkpoint-after-bytes: needs --checkpoint DIR");
  }
  if (!f.report.empty())
    if (absl::Status s = reference::model::CheckCheckpointPath(f.report); !s.ok()) return Bad(absl::StrCat("--report: ", s.message()));
  if (!f.trace.empty())
    if (absl::Status s = reference::model::CheckCheckpointPath(f.trace); !s.ok()) return Bad(absl::StrCat("--trace: ", s.message()));
#if GEMTB_HAVE_CUDA
  if (f.trace_kernels && !gpu::bench::KernelTimer::Available())
    return Bad("--trace-kernels: this build has no CUPTI (CUDA::cupti was not found when it was configured)");
#endif
  if (!f.checkpoint.empty())
    if (absl::Status s = CheckCheckpointDir(f.checkpoint, f.resume); !s.ok()) return s;

  absl::StatusOr<gemtb::model::SparsePipeline> pipeline = gemtb::model::ParseSparsePipeline(f.pipeline, "--pipeline");
  if (!pipeline.ok()) return Bad(std::string(pipeline.status().message()));
  if (*pipeline == gemtb::model::SparsePipeline::kSemiSync && R > 1 && !f.checkpoint.empty())
    return Bad("--pipeline: semi-sync in a job writes no checkpoint (each rank's pending lookups); leave out "
               "--checkpoint or run synchronously");

  if (f.plan.empty() && f.gpus_per_host) return Bad("--gpus-per-host: needs --plan");
  if (!f.plan.empty() && R == 1)
    return Bad("--plan: shards the tables over a job's ranks; one process keeps them whole (start several ranks)");
  if (f.gpus_per_host && (*f.gpus_per_host < 1 || *f.gpus_per_host > 4096))
    return Bad(absl::StrCat("--gpus-per-host: ", *f.gpus_per_host, " must be in [1, 4096]"));

  Job job;
  job.launch = launch;
  job.shard_group = static_cast<int>(shard_group);
  job.split.split = *split;
  job.split.sub_batch = f.sub_batch;
  job.split.param_prefetch = f.param_prefetch;
  job.numerics = *numerics;
  absl::StatusOr<gemtb::model::ModelConfig> config = gemtb::model::LoadModelConfig(f.config);
  if (!config.ok()) return Bad(absl::StrCat("--config: ", config.status().message()));
  job.config = *std::move(config);
  absl::StatusOr<gemtb::model::GemGeometry> geometry = gemtb::model::MakeGemGeometry(job.config);
  if (!geometry.ok()) return Bad(absl::StrCat("--config ", f.config, ": ", geometry.status().message()));
  job.num_params = geometry->layout.total();
  if (absl::Status s = gemtb::model::CheckExpertDegree(*geometry, static_cast<int>(f.ep_degree), "--ep-degree"); !s.ok())
    return Bad(std::string(s.message()));
  job.ep_degree = static_cast<int>(f.ep_degree);
  job.expert_shard_group = f.ep_degree > 1 ? static_cast<int>(expert_shard_group) : 1;
  absl::StatusOr<gemtb::model::ModelGraph> graph = gemtb::model::ExpandModel(job.config);
  if (!graph.ok()) return Bad(absl::StrCat("--config ", f.config, ": ", graph.status().message()));
  job.flops = gemtb::model::BatchFlops::Create(*graph);
  if (!f.plan.empty()) {
    const int gpus_per_host = static_cast<int>(f.gpus_per_host.value_or(R));
    absl::StatusOr<TrainPlan> plan =
        LoadTrainPlan(f.plan, gemtb::model::GemEmbeddingConfig(job.config, 0.0f, 0), R, gpus_per_host);
    if (!plan.ok()) return plan.status();
    if (*pipeline == gemtb::model::SparsePipeline::kSemiSync && plan->spec.fully_sharded)
      return Bad("--pipeline: semi-sync does not run with a fully sharded 2D plan (the next batch's gather would "
                 "precede this batch's update of the gathered copy)");
    job.plan = *std::move(plan);
    job.split.sparse_plan = job.plan->spec;
    job.split.gpus_per_host = gpus_per_host;
#if GEMTB_HAVE_CUDA
    // What the GPU's sharded tables do not run is refused here, by name, before any GPU work.
    const EmbeddingConfig emb = gemtb::model::GemEmbeddingConfig(job.config, 0.0f, 0);
    absl::StatusOr<GroupLayout> layout =
        gpu::embedding::ShardRouting::CheckedLayout(emb, job.plan->spec, R, gpus_per_host);
    if (!layout.ok()) return Bad(absl::StrCat("--plan: ", layout.status().message()));
#endif
  }
  absl::StatusOr<reference::dist::CheckpointIdentity> identity =
      TrainCheckpointIdentity(f.config, R, job.plan ? job.plan->text : "");
  if (!identity.ok()) return Bad(absl::StrCat("--config: ", identity.status().message()));
  job.identity = *std::move(identity);
  gpu::train::TrainerOptions& o = job.options;
  o.seed = static_cast<uint64_t>(f.seed);
  o.data_seed = static_cast<uint64_t>(f.data_seed);
  o.batch = f.local_batch * R;  // the global batch: every rank's local batch of it
  if (f.lr) o.lr = static_cast<float>(*f.lr);
  if (f.table_lr) o.table_lr = static_cast<float>(*f.table_lr);
  o.total_steps = f.schedule_steps.value_or(f.steps);
  o.pipeline = *pipeline;
  job.log_every_s = f.log_every_s.value_or(5.0);
  if (f.resume && R == 1) {
    absl::StatusOr<reference::dist::LoadedShard> loaded =
        reference::dist::ReadShardOfNewestCheckpoint(f.checkpoint, job.identity, 0);
    if (!loaded.ok()) return Named("--resume", loaded.status());
    job.resumed_from = (fs::path(f.checkpoint) / absl::StrCat("step-", loaded->step)).string();
    absl::StatusOr<gpu::train::TrainerState> state = GpuStateFromArrays(job.config, o, loaded->arrays);
    if (!state.ok()) return Named(absl::StrCat("--resume: ", (fs::path(job.resumed_from) / "rank-0.ckpt").string()), state.status());
    if (state->step != loaded->step)
      return Named(absl::StrCat("--resume: ", job.resumed_from),
                   absl::DataLossError(absl::StrCat("holds step ", state->step, " in the folder of step ", loaded->step)));
    job.resumed = *std::move(state);
  }
  return job;
}

#if GEMTB_HAVE_CUDA
// With --plan: the table shards `rank` holds, as its checkpoint names them; else none.
std::optional<std::vector<GpuShardKey>> ShardKeysOf(const Job& job, int rank) {
  if (!job.plan) return std::nullopt;
  const int R = job.launch.world_size;
  const int n = R / MpGroupSize(job.plan->spec, R);  // replicas of each MP-group position (2D plans)
  const EmbeddingConfig emb = gemtb::model::GemEmbeddingConfig(job.config, job.options.table_lr, job.options.seed);
  absl::StatusOr<GroupLayout> layout =
      gpu::embedding::ShardRouting::CheckedLayout(emb, job.plan->spec, R, job.split.gpus_per_host);
  std::vector<GpuShardKey> keys;
  if (!layout.ok()) return keys;  // Prepare reports the same plan's error first
  for (const gpu::embedding::HeldShardShape& h : gpu::embedding::ShardRouting::HeldShapes(*layout, rank / n)) {
    keys.push_back({h.table, h.shard, n > 1 ? rank % n : -1, h.rows, h.cols});
  }
  return keys;
}

std::vector<GpuShardKey> ShardKeysOrNone(const Job& job, int rank) {
  std::optional<std::vector<GpuShardKey>> keys = ShardKeysOf(job, rank);
  return keys ? *keys : std::vector<GpuShardKey>{};
}

std::vector<TraceSpan> Concat(std::vector<TraceSpan> a, const std::vector<TraceSpan>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// --trace-kernels' part of the report: the last step's device time, its idle gaps and its kernels.
nlohmann::json TimelineJson(const gpu::bench::TimelineSummary& t) {
  nlohmann::json gaps = nlohmann::json::array(), recurring = nlohmann::json::array(), kernels = nlohmann::json::array();
  auto calls_json = [](const std::vector<gpu::bench::HostCallTime>& calls) {
    nlohmann::json out = nlohmann::json::array();
    for (const gpu::bench::HostCallTime& c : calls) out.push_back({{"name", c.name}, {"calls", c.calls}, {"ms", c.ms}});
    return out;
  };
  for (const gpu::bench::IdleGap& g : t.largest_gaps) {
    gaps.push_back({{"at_ms", g.at_ms}, {"ms", g.ms}, {"after", g.after}, {"before", g.before},
                    {"host_calls", calls_json(g.host_calls)}, {"outside_calls_ms", g.outside_calls_ms}});
  }
  for (const gpu::bench::GapTotal& g : t.gap_totals)
    recurring.push_back({{"after", g.after}, {"before", g.before}, {"count", g.count}, {"ms", g.ms}});
  for (const gpu::bench::KernelTotal& k : t.top_kernels)
    kernels.push_back({{"name", k.name}, {"launches", k.launches}, {"ms", k.ms}});
  return {{"window_ms", t.window_ms}, {"busy_ms", t.busy_ms},     {"idle_ms", t.idle_ms},
          {"kernel_ms", t.kernel_ms}, {"kernels", t.kernels},     {"memcpys", t.memcpys},
          {"memsets", t.memsets},     {"largest_idle_gaps", gaps}, {"idle_gaps_by_neighbours", recurring},
          {"top_kernels", kernels},   {"host_calls", t.host_calls}, {"top_host_calls", calls_json(t.top_host_calls)}};
}

// --trace-kernels' trace tracks: the activities inside [from_ns, to_ns], from its start on.
std::vector<TraceSpan> ActivitySpans(const std::vector<gpu::bench::DeviceActivity>& activity, uint64_t from_ns,
                                     uint64_t to_ns) {
  std::vector<TraceSpan> spans;
  for (const gpu::bench::DeviceActivity& a : activity) {
    if (a.start_ns < from_ns || a.end_ns > to_ns) continue;
    const bool host = a.kind == gpu::bench::DeviceActivity::Kind::kHostCall;
    spans.push_back({gpu::bench::ActivityName(a), host ? "host" : "device", host ? "host CUDA calls" : "kernels",
                     static_cast<double>(a.start_ns - from_ns) * 1e-6, static_cast<double>(a.end_ns - a.start_ns) * 1e-6});
  }
  return spans;
}

std::string DeviceTimelineLine(const gpu::bench::TimelineSummary& t) {
  std::string line = absl::StrCat("last step on the device: busy ", Num(t.busy_ms, 4), " of ", Num(t.window_ms, 4),
                                  " ms (idle ", Num(t.idle_ms, 4), " ms; ", t.kernels, " kernels, ", t.memcpys,
                                  " copies, ", t.memsets, " memsets)");
  if (!t.largest_gaps.empty()) {
    const gpu::bench::IdleGap& g = t.largest_gaps.front();
    absl::StrAppend(&line, "; longest idle ", Num(g.ms, 4), " ms after ", g.after, ", before ", g.before,
                    " (the host outside CUDA calls for ", Num(g.outside_calls_ms, 4), " ms of it)");
  }
  return line;
}

// A step's phases in the order the trainer runs them, its model regions inside the model phase (their
// event times, from the model's first region on), under the simulator's task names.
std::vector<TraceSpan> StepSpans(const gpu::train::TrainerStep& step) {
  using Place = gpu::train::CollectivePlace;
  const gpu::train::StepTimes& t = step.times;
  std::vector<TraceSpan> spans;
  double at = 0;
  spans.push_back({"data", "host", "host data", at, t.data_ms});
  at += t.data_ms;
  // A job's collectives: the parameters' gather (and sharded tables' forward exchanges) from the
  // start of the lookup phase, the dense rest (issued after the model's backward) ending with the
  // model phase, each on its group class's track.
  // Sharded tables' update exchanges open the update phase.
  // Collectives beside compute (--param-prefetch's, the semi-synchronous pipeline's next lookups)
  // and expert parallelism's inside the model sit where they ran, measured from the model's first
  // region (without region times, those beside compute start with the lookup phase).
  double gather_ms = 0, after_ms = 0;
  for (const gpu::train::CollectiveTime& c : step.collectives) {
    if (c.place == Place::kBeforeModel) gather_ms += c.ms;
    if (c.place == Place::kAfterModel) after_ms += c.ms;
  }
  double before_at = at, after_at = at + t.embedding_fwd_ms + t.model_ms - after_ms,
         update_at = at + t.embedding_fwd_ms + t.model_ms;
  for (const gpu::train::CollectiveTime& c : step.collectives) {
    // Measured against the model's first region where the step timed its regions.
    if (c.model_start_ms) {
      spans.push_back({c.name, "comm", c.group, at + t.embedding_fwd_ms + *c.model_start_ms, c.ms});
      continue;
    }
    if (c.place == Place::kInModel) continue;
    if (c.place == Place::kBesideCompute) {
      spans.push_back({c.name, "comm", c.group, at, c.ms});
      continue;
    }
    double& where = c.place == Place::kInUpdate ? update_at : c.place == Place::kBeforeModel ? before_at : after_at;
    spans.push_back({c.name, "comm", c.group, where, c.ms});
    where += c.ms;
  }
  spans.push_back({"sparse.lookup", "compute", "compute", at + gather_ms, t.embedding_fwd_ms - gather_ms});
  at += t.embedding_fwd_ms;
  for (const gpu::train::RegionTime& r : step.regions)
    spans.push_back({r.region + (r.backward ? ".bwd" : ".fwd"), "compute", "compute", at + r.start_ms, r.ms()});
  at += t.model_ms;
  spans.push_back({"sparse.update", "compute", "compute", at, t.embedding_bwd_ms});
  at += t.embedding_bwd_ms;
  spans.push_back({"optimizer", "compute", "compute", at, t.optimizer_ms});
  return spans;
}

// Per task: NE of the model's predictions [n, T] on the held-out samples, null when undefined (no
// positive or no negative among them), with its positives and count.
absl::StatusOr<nlohmann::json> HeldOutNe(gpu::train::GpuTrainer& trainer, const Job& job, int64_t n, std::string* line) {
  absl::StatusOr<std::vector<double>> pred = trainer.Predict(reference::model::kHeldOutFirstIndex, n);
  if (!pred.ok()) return pred.status();
  // Labels and masks of the same samples, from the generator the trainer draws them with.
  absl::StatusOr<data::DataParams> dp = data::LoadDataParams(job.options.data.empty() ? job.config.name : job.options.data);
  if (!dp.ok()) return dp.status();
  absl::StatusOr<data::Generator> gen = data::Generator::Create(*dp, data::ShapeFromConfig(job.config));
  if (!gen.ok()) return gen.status();
  const data::Batch held = data::GenerateBatch(*gen, job.options.data_seed, reference::model::kHeldOutFirstIndex, n);
  const int T = static_cast<int>(job.config.NumTasks());
  nlohmann::json tasks = nlohmann::json::array();
  for (int t = 0; t < T; ++t) {
    const metrics::NeUnit unit = metrics::MakeNeUnit(pred->data() + t, held.label.data() + t, held.mask.data() + t, n, T);
    const metrics::NeResult r = metrics::EvaluateNe(&unit, 1);
    const bool defined = r.positives > 0 && r.positives < r.count;
    tasks.push_back({{"task", job.config.tasks[t].name}, {"ne", defined ? nlohmann::json(r.ne) : nlohmann::json()},
                     {"positives", r.positives}, {"count", r.count}});
    absl::StrAppend(line, " ", job.config.tasks[t].name, " ne ", defined ? Num(r.ne) : std::string("undefined"),
                    " (positives ", r.positives, "/", r.count, ")");
  }
  return tasks;
}

// Per rank, what the job's report aggregates: its mean step and phase times, its collectives' mean
// device times (name -> ms, and the sum of those not beside compute: the exposed communication) and
// its wall time.
nlohmann::json RankTimes(int rank, double mean_step_ms, double wall_s, const gpu::train::StepTimes& mean,
                         const std::map<std::string, double>& collectives_mean,
                         const std::set<std::string>& beside_compute) {
  double exposed = 0;
  for (const auto& [name, ms] : collectives_mean)
    if (!beside_compute.contains(name)) exposed += ms;
  return {{"rank", rank},
          {"mean_step_ms", mean_step_ms},
          {"wall_s", wall_s},
          {"phase_ms_mean", StepTimesJson(mean)},
          {"collectives_ms_mean", collectives_mean},
          {"collectives_beside_compute", beside_compute},
          {"exposed_comm_ms_mean", exposed}};
}

// Every rank's `mine` in rank order (through the job's store; just `mine` for one process).
absl::StatusOr<std::vector<nlohmann::json>> FromEveryRank(TrainJob& job, const std::string& key,
                                                          const nlohmann::json& mine) {
  if (!job.several()) return std::vector<nlohmann::json>{mine};
  absl::StatusOr<std::vector<std::string>> all = launch::StoreAllGather(*job.store(), key, mine.dump());
  if (!all.ok()) return all.status();
  std::vector<nlohmann::json> out;
  for (const std::string& text : *all) out.push_back(nlohmann::json::parse(text));
  return out;
}

nlohmann::json SpansJson(const std::vector<TraceSpan>& spans) {
  nlohmann::json out = nlohmann::json::array();
  for (const TraceSpan& s : spans) out.push_back({s.name, s.category, s.track, s.start_ms, s.dur_ms});
  return out;
}

std::vector<TraceSpan> SpansFromJson(const nlohmann::json& j) {
  std::vector<TraceSpan> spans;
  for (const nlohmann::json& s : j) spans.push_back({s[0], s[1], s[2], s[3], s[4]});
  return spans;
}

int Train(const Flags& f, Job& job, const std::string& fingerprint) {
  using Clock = std::chrono::steady_clock;
  const bool several = job.several();
  const launch::Millis store_timeout(f.store_timeout * 1000);
  // Each rank takes the GPU of its local rank before anything touches one.
  int devices = 0;
  if (cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess || devices == 0)
    return ReportError(kCommand, absl::FailedPreconditionError(absl::StrCat(
                                     "no usable CUDA device: ", e != cudaSuccess ? cudaGetErrorString(e) : "none visible")));
  if (job.launch.local_rank >= devices)
    return ReportError(kCommand, absl::FailedPreconditionError(absl::StrCat(
                                     "local rank ", job.launch.local_rank, ": only ", devices, " CUDA devices visible")));
  if (cudaError_t e = cudaSetDevice(job.launch.local_rank); e != cudaSuccess)
    return ReportError(kCommand, absl::FailedPreconditionError(absl::StrCat(
                                     "local rank ", job.launch.local_rank, ": cudaSetDevice: ", cudaGetErrorString(e))));
  absl::StatusOr<std::unique_ptr<TrainJob>> joined = TrainJob::Join(job.launch, store_timeout, fingerprint, kCommand);
  if (!joined.ok()) return ReportError(kCommand, joined.status());
  TrainJob& rank_job = **joined;
  const bool leader = rank_job.rank() == 0;
  if (several && !leader) std::cout.setstate(std::ios::failbit);  // rank 0 prints; the others print only errors
  gpu::train::TrainerCollectives* collectives = nullptr;
#if defined(GEMTB_HAVE_NCCL_COMM)
  std::unique_ptr<gpu::comm::NcclTrainerCollectives> nccl;
  if (several) {
    gpu::comm::TrainerCollectivesOptions co;
    co.shard_group = job.shard_group;
    co.expert_degree = job.ep_degree;
    co.expert_shard_group = job.expert_shard_group;
    co.param_gather = f.param_gather == "copy_engine" ? gpu::comm::ParamGather::kCopyEngine : gpu::comm::ParamGather::kNccl;
    co.timeout = store_timeout;
    absl::StatusOr<std::unique_ptr<gpu::comm::NcclTrainerCollectives>> made =
        gpu::comm::NcclTrainerCollectives::Create(*rank_job.store(), co);
    if (!made.ok()) return rank_job.Leave(ReportError(kCommand, made.status()), store_timeout);
    nccl = *std::move(made);
    collectives = nccl.get();
  }
#else
  if (several)
    return rank_job.Leave(ReportError(kCommand, absl::FailedPreconditionError(
                                                    "this gemtb was built without NCCL (nccl.h not found at configure "
                                                    "time): one GPU only")),
                          store_timeout);
#endif
  auto body = [&]() -> int {
    absl::StatusOr<std::unique_ptr<gpu::train::GpuTrainer>> created =
        gpu::train::GpuTrainer::Create(job.config, job.options, job.numerics, collectives, job.split);
    if (!created.ok()) return ReportError(kCommand, created.status());
    gpu::train::GpuTrainer& trainer = **created;
    if (several && f.resume) {
      absl::StatusOr<reference::model::NamedArrays> arrays = rank_job.Load(f.checkpoint, job.identity);
      if (!arrays.ok()) return ReportError(kCommand, Named("--resume", arrays.status()));
      absl::StatusOr<gpu::train::TrainerState> state =
          GpuStateFromArrays(job.config, job.options, *arrays, ShardKeysOf(job, rank_job.rank()));
      if (!state.ok()) return ReportError(kCommand, Named("--resume", state.status()));
      job.resumed_from = f.checkpoint;
      job.resumed = *std::move(state);
    }
    if (job.resumed) {
      if (absl::Status s = trainer.LoadState(*job.resumed); !s.ok()) return ReportError(kCommand, Named("--resume", s));
      std::cout << "resumed from " << job.resumed_from << " at step " << trainer.step() << "\n";
    }
    const gpu::train::TrainerOptions& o = job.options;
    const int R = job.launch.world_size;
    std::cout << "gemtb train: config " << job.config.name << ", " << trainer.num_params() << " dense params, local batch "
              << o.batch / R << ", steps " << f.steps << ", lr " << o.lr << ", table lr " << o.table_lr
              << ", schedule steps " << o.total_steps << ", pipeline " << f.pipeline << ", "
              << (several ? absl::StrCat(R, " GPUs (", launch::LauncherName(job.launch.launcher), "; global batch ",
                                         o.batch, " split ", f.batch_split, ", FSDP shard group ", job.shard_group,
                                         job.ep_degree > 1 ? absl::StrCat(", EP degree ", job.ep_degree,
                                                                          ", expert shard group ", job.expert_shard_group)
                                                           : "",
                                         ", parameters gathered by ", f.param_gather,
                                         f.param_prefetch ? " unit by unit, prefetched" : "", ", tables ",
                                         job.plan ? absl::StrCat("sharded by --plan ", f.plan) : std::string("replicated"),
                                         ")")
                          : std::string("one GPU"))
              << " (matmul " << gpu::train::PrecisionName(job.numerics.matmul) << ", attention "
              << gpu::train::PrecisionName(job.numerics.attention) << ", ffn "
              << gpu::train::PrecisionName(job.numerics.ffn) << ", attention blocks "
              << gpu::train::PrecisionName(job.numerics.attention_blocks) << ", "
              << gpu::train::BlockKernelsName(job.numerics.block_kernels) << " block kernels)" << std::endl;
    auto save = [&]() -> absl::Status {
      if (f.checkpoint.empty()) return absl::OkStatus();
      if (several) {
        // Every rank writes what it holds (its dense shard, its tables or table shards), nothing gathered
        // (under --ep-degree the dense parts are cut from the whole arrays, gathered by every rank).
        absl::StatusOr<gpu::train::TrainerRankState> mine = trainer.RankState();
        if (!mine.ok()) return mine.status();
        return rank_job.Save(f.checkpoint, mine->step, job.identity, {},
                             GpuRankArrays(job.config, o, rank_job.rank(), *mine, ShardKeysOrNone(job, rank_job.rank())));
      }
      absl::StatusOr<gpu::train::TrainerState> state = trainer.State();
      if (!state.ok()) return state.status();
      reference::dist::ShardedWriteOptions write;
      write.shard.fail_after_bytes = f.crash_checkpoint_after_bytes;
      write.shard.kill_at_failure = f.crash_checkpoint_after_bytes >= 0;
      return reference::dist::WriteOneProcessCheckpoint(f.checkpoint, state->step, job.identity,
                                                        GpuStateArrays(job.config, o, *state), write);
    };
    const Clock::time_point start = Clock::now();
    Clock::time_point interval_start = start;
    double loss_sum = 0, step_s_sum = 0, run_step_s = 0, last_loss = std::nan("");
    double flops_sum = 0, run_flops = 0;  // model FLOPs of the interval's and the run's global batches
    // E2E MFU divides by every GPU's peak.
    const double peak = f.peak_tflops.value_or(989) * 1e12 * R;
    int64_t interval_steps = 0, run_steps = 0;
    const StopSignals stop;
    gpu::train::StepTimes phase_sum;
    std::map<std::string, double> collectives_sum;  // device ms per collective, summed over steps
    std::set<std::string> beside_compute;             // those issued beside compute (not all exposed)
    std::vector<double> step_ms_all;  // every step's wall time, for the median (the first step's allocations aside)
    gpu::train::TrainerStep last;     // the last step, its model regions timed
    // With --trace-kernels: the last step's device activity, summed up and as trace spans.
    std::optional<gpu::bench::TimelineSummary> last_device;
    std::vector<TraceSpan> kernel_spans;
    // --trace-kernels starts recording a step before the last one (where there is one), so that
    // CUPTI's own start (host time at the first recorded call) falls outside the last step.
    std::unique_ptr<gpu::bench::KernelTimer> kernel_timer;
    while (trainer.step() < f.steps) {
      const bool last_step = trainer.step() + 1 == f.steps;
      if (f.trace_kernels && !kernel_timer && trainer.step() + 2 >= f.steps) {
        absl::StatusOr<std::unique_ptr<gpu::bench::KernelTimer>> started =
            gpu::bench::KernelTimer::Start(/*host_calls=*/true);
        if (!started.ok()) return ReportError(kCommand, Named("--trace-kernels", started.status()));
        kernel_timer = *std::move(started);
      }
      const uint64_t window_from = kernel_timer && last_step ? gpu::bench::KernelTimer::NowNs() : 0;
      const Clock::time_point t0 = Clock::now();
      trainer.TimeRegions(last_step);
      absl::StatusOr<gpu::train::TrainerStep> r = trainer.Step();
      if (!r.ok()) return ReportError(kCommand, r.status());
      if (kernel_timer && last_step) {  // the step ends with the device idle: every activity is in
        const uint64_t window_to = gpu::bench::KernelTimer::NowNs();
        absl::StatusOr<std::vector<gpu::bench::DeviceActivity>> activity = kernel_timer->Stop();
        if (!activity.ok()) return ReportError(kCommand, Named("--trace-kernels", activity.status()));
        last_device = gpu::bench::SummarizeTimeline(*activity, window_from, window_to, 12);
        kernel_spans = ActivitySpans(*activity, window_from, window_to);
      }
      phase_sum += r->times;
      for (const gpu::train::CollectiveTime& c : r->collectives) {
        collectives_sum[c.name] += c.ms;
        if (c.place == gpu::train::CollectivePlace::kBesideCompute) beside_compute.insert(c.name);
      }
      if (!r->regions.empty()) last = *r;
      const double step_s = std::chrono::duration<double>(Clock::now() - t0).count();
      absl::StatusOr<double> step_flops = job.flops->Of(r->seq_lengths, o.batch);
      if (!step_flops.ok()) return ReportError(kCommand, step_flops.status());
      flops_sum += *step_flops;
      run_flops += *step_flops;
      last_loss = r->loss;
      loss_sum += r->loss;
      step_s_sum += step_s;
      run_step_s += step_s;
      step_ms_all.push_back(1000 * step_s);
      ++interval_steps;
      ++run_steps;
      const int64_t step = r->step;
      const double interval_s = std::chrono::duration<double>(Clock::now() - interval_start).count();
      if (interval_s >= job.log_every_s || step == f.steps) {
        const double n = static_cast<double>(interval_steps);
        std::cout << "step " << step << " loss " << Num(loss_sum / n) << " samples/s "
                  << Num(n * static_cast<double>(o.batch) / std::max(interval_s, 1e-9), 4) << " step_ms "
                  << Num(1000 * step_s_sum / n, 4) << " mfu " << Num(100 * flops_sum / (step_s_sum * peak), 3) << "%"
                  << std::endl;
        loss_sum = step_s_sum = flops_sum = 0;
        interval_steps = 0;
        interval_start = Clock::now();
      }
      if (f.checkpoint_every > 0 && step % f.checkpoint_every == 0 && step != f.steps)
        if (absl::Status s = save(); !s.ok()) return ReportError(kCommand, s);
      // Every rank stops after the same step when any of them got a signal.
      absl::StatusOr<int> signal = rank_job.AgreeOnStop(stop.received());
      if (!signal.ok()) return ReportError(kCommand, signal.status());
      if (*signal != 0) return StopAfterSignal(kCommand, *signal, step, f.checkpoint, "--resume --checkpoint", save);
    }
    if (absl::Status s = save(); !s.ok()) return ReportError(kCommand, s);
    const double wall = std::chrono::duration<double>(Clock::now() - start).count();
    const double samples_per_s = static_cast<double>(run_steps * o.batch) / std::max(wall, 1e-9);
    const double mean_step_ms = run_steps > 0 ? 1000 * run_step_s / static_cast<double>(run_steps) : std::nan("");
    double median_step_ms = std::nan("");
    if (!step_ms_all.empty()) {
      std::sort(step_ms_all.begin(), step_ms_all.end());
      const size_t n = step_ms_all.size();
      median_step_ms = n % 2 == 1 ? step_ms_all[n / 2] : 0.5 * (step_ms_all[n / 2 - 1] + step_ms_all[n / 2]);
    }
    // E2E MFU: the model FLOPs of the run's batches over their step time at the peak of every GPU.
    const double mfu = run_steps > 0 ? run_flops / (run_step_s * peak) : std::nan("");
    nlohmann::json ne = nlohmann::json::array();
    if (f.eval_samples > 0) {  // every rank predicts (the parameters are gathered); rank 0 prints
      std::string line = absl::StrCat("eval step ", trainer.step(), " held-out samples ", f.eval_samples, ":");
      absl::StatusOr<nlohmann::json> held = HeldOutNe(trainer, job, f.eval_samples, &line);
      if (!held.ok()) return ReportError(kCommand, held.status());
      ne = *std::move(held);
      std::cout << line << "\n";
    }
    const double n_steps = std::max<double>(1, static_cast<double>(run_steps));
    // Every rank's times, for the slowest rank and the imbalance.
    std::map<std::string, double> collectives_mean;
    for (const auto& [name, ms] : collectives_sum) collectives_mean[name] = ms / n_steps;
    absl::StatusOr<std::vector<nlohmann::json>> every_rank = FromEveryRank(
        rank_job, "train/rank_times", RankTimes(rank_job.rank(), mean_step_ms, wall, phase_sum.Over(n_steps),
                                                collectives_mean, beside_compute));
    if (!every_rank.ok()) return ReportError(kCommand, every_rank.status());
    const nlohmann::json ranks = *every_rank;
    std::cout << "final: step " << trainer.step() << ", " << run_steps << " steps in " << Num(wall, 4)
              << " s, samples/s " << Num(samples_per_s, 4) << ", step_ms " << Num(mean_step_ms, 4) << ", mfu "
              << Num(100 * mfu, 3) << "%" << (f.checkpoint.empty() ? "" : ", checkpoint " + f.checkpoint) << std::endl;
    if (!f.trace.empty() && !last.regions.empty()) {
      // Every rank's last step, one process each.
      absl::StatusOr<std::vector<nlohmann::json>> spans =
          FromEveryRank(rank_job, "train/trace_spans", SpansJson(Concat(StepSpans(last), kernel_spans)));
      if (!spans.ok()) return ReportError(kCommand, spans.status());
      std::vector<std::vector<TraceSpan>> rank_spans;
      for (const nlohmann::json& j : *spans) rank_spans.push_back(SpansFromJson(j));
      if (leader) {
        if (absl::Status s = WriteTextAtomically(f.trace, StepTraceJson(rank_spans)); !s.ok())
          return ReportError(kCommand, absl::Status(s.code(), absl::StrCat("--trace: ", s.message())));
      }
    }
    if (last_device) std::cout << DeviceTimelineLine(*last_device) << std::endl;
    const absl::StatusOr<int64_t> peak_memory = gpu::train::PeakStepMemoryBytes();
    if (peak_memory.ok()) std::cout << "peak step memory " << Num(*peak_memory / 1e9, 4) << " GB" << std::endl;
    if (leader && !f.report.empty()) {
      auto number = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); };
      const nlohmann::json phases = StepTimesJson(phase_sum.Over(n_steps));
      nlohmann::json regions = nlohmann::json::array();
      for (const gpu::train::RegionTime& rt : last.regions)
        regions.push_back({{"region", rt.region}, {"pass", rt.backward ? "bwd" : "fwd"}, {"ms", rt.ms()}});
      double slowest = 0, mean = 0;
      for (const nlohmann::json& rk : ranks) {
        const double ms = rk["mean_step_ms"].is_number() ? rk["mean_step_ms"].get<double>() : 0;
        slowest = std::max(slowest, ms);
        mean += ms / static_cast<double>(ranks.size());
      }
      const nlohmann::json report = {
          {"config", job.config.name},   {"steps", trainer.step()},         {"steps_run", run_steps},
          {"local_batch", o.batch / R},  {"world_size", R},                 {"global_batch", o.batch},
          {"launcher", launch::LauncherName(job.launch.launcher)},
          {"shard_group", job.shard_group}, {"ep_degree", job.ep_degree},
          {"expert_shard_group", job.expert_shard_group},
          {"param_gather", several ? f.param_gather : std::string("none")},
          {"param_prefetch", f.param_prefetch},
          {"batch_split", f.batch_split}, {"sub_batch", f.sub_batch},
          {"plan", job.plan ? nlohmann::json::parse(job.plan->text) : nlohmann::json()},
          {"numerics", NumericsJson(job.numerics)},
          {"wall_s", wall},              {"samples_per_s", samples_per_s},
          {"mean_step_ms", number(mean_step_ms)}, {"step_ms_median", number(median_step_ms)},
          {"final_loss", number(last_loss)},
          {"eval_samples", f.eval_samples},       {"held_out_ne", ne},
          {"resumed_from_step", job.resumed ? nlohmann::json(job.resumed->step) : nlohmann::json()},
          {"phase_ms_mean", phases},     {"last_step_regions_ms", regions},
          {"last_step_device", last_device ? TimelineJson(*last_device) : nlohmann::json()},
          {"collectives_ms_mean", collectives_mean},
          {"ranks", ranks},
          {"slowest_rank_step_ms", slowest},
          {"rank_imbalance", mean > 0 ? nlohmann::json(slowest / mean) : nlohmann::json()},
          {"model_flops_per_step_mean", run_steps > 0 ? nlohmann::json(run_flops / static_cast<double>(run_steps)) : nlohmann::json()},
          {"peak_flops", peak},          {"e2e_mfu", number(mfu)},
          {"peak_step_memory_bytes", peak_memory.ok() ? nlohmann::json(*peak_memory) : nlohmann::json()}};
      if (absl::Status s = WriteTextAtomically(f.report, report.dump(2) + "\n"); !s.ok())
        return ReportError(kCommand, absl::Status(s.code(), absl::StrCat("--report: ", s.message())));
    }
    return kExitOk;
  };
  const int code = body();
#if defined(GEMTB_HAVE_NCCL_COMM)
  // The communicators before the store; a rank that failed aborts them rather than wait for the others.
  if (nccl != nullptr && code != kExitOk) nccl->AbortAll();
  nccl.reset();
#endif
  return rank_job.Leave(code, store_timeout);
}
#endif

}  // namespace

int RunGpuTrain(const std::vector<std::string>& args) {
  Flags f;
  FlagSet flags(
      "gemtb train [--config tiny] [--steps N] [--local-batch B] [--checkpoint DIR [--resume]] [flags]",
      "Trains the GEM-like model on one GPU or several (fp32 weights, activations and gradients, the matmuls and\n"
      "attention in --matmul / --attention precision; Adam for the dense parameters, rowwise Adagrad fused\n"
      "into the tables' backward) on the planted-teacher generator's samples: step s takes samples\n"
      "s*B .. s*B+B-1 of --data-seed, as `gemtb ref train` does. Every --log-every-s seconds and at the\n"
      "end: step, mean loss of the interval, samples/s and mean step time; then NE per task on held-out\n"
      "samples (from 2^40 on, never trained on).\n"
      "\n"
      "--checkpoint DIR saves DIR/step-<s>/rank-0.ckpt and manifest.json (docs/checkpoint.md) every\n"
      "--checkpoint-every steps and at the end, atomically; earlier steps' folders are removed.\n"
      "--resume continues from the newest checkpoint in DIR to --steps, to the bytes of a run never\n"
      "stopped. A checkpoint of another config, of `gemtb ref train` or a damaged one is refused by name.\n"
      "SIGTERM or SIGINT stops after the current step, saving first (exit 128 + the signal number).\n"
      "\n"
      "Several GPUs: one process per GPU, started by torchrun (--no-python), mpirun or srun; rank, world\n"
      "size, local rank (the GPU) and MASTER_ADDR/MASTER_PORT come from the launcher's variables, NCCL's\n"
      "id through a TCP store on rank 0. --local-batch is then per GPU (the global batch R times it,\n"
      "split among the ranks by --batch-split); dense parameters are 2D FSDP over --shard-group ranks,\n"
      "gathered by NCCL or the copy engines (--param-gather); with --ep-degree D, each of D consecutive\n"
      "ranks runs its share of the Wukong experts on all D ranks' samples, their parameters sharded over\n"
      "--expert-shard-group of the ranks that run them; the tables are replicated and updated\n"
      "with every rank's gradients, or sharded by --plan (the plan JSON of docs/embedding-spec.md, 1D or\n"
      "2D; ids go to each shard's holder, embeddings and gradients back and forth by NCCL all-to-alls;\n"
      "each rank checkpoints its own shards). Rank 0 prints and writes the report and the checkpoint's\n"
      "manifest; every rank writes what it holds of a checkpoint. A rank that dies ends every rank with a\n"
      "named error (ranks in an NCCL wait ask the store every 100 ms); one that stops answering, within\n"
      "--store-timeout seconds.\n"
      "Exit 0; 2 on bad input or without a usable GPU (checked after the flags and the checkpoint).");
  flags.String("config", &f.config, "model config: tiny | small | path to a JSON (default tiny)");
  flags.Int64("steps", &f.steps, "total training steps (default 1000; with --resume, the total including resumed)");
  flags.Int64("local-batch", &f.local_batch, "samples per step on each GPU (default 64)");
  flags.OptionalInt64("schedule-steps", &f.schedule_steps,
                      "steps of the learning rates' linear decay (default --steps), e.g. to stop early and resume");
  flags.OptionalDouble("lr", &f.lr, "dense Adam learning rate (default 1e-3)");
  flags.OptionalDouble("table-lr", &f.table_lr, "rowwise Adagrad learning rate of every table (default 0.2)");
  flags.String("pipeline", &f.pipeline,
               "sync (default) | semi-sync: the next step's lookups (and with --plan its all-to-alls) beside this "
               "step's model, before its table update (not with fully sharded 2D plans; a job writes no "
               "checkpoint then)");
  flags.Int64("seed", &f.seed, "parameter and table init seed (default 1)");
  flags.Int64("data-seed", &f.data_seed, "data generator seed (default 1)");
  flags.OptionalDouble("log-every-s", &f.log_every_s, "seconds between progress lines (default 5)");
  flags.OptionalDouble("peak-tflops", &f.peak_tflops, "the GPU's peak TFLOP/s that MFU divides by (default 989: H200 dense bf16)");
  flags.Int64("eval-samples", &f.eval_samples, "held-out samples for the final NE (default 4096; 0 skips it)");
  flags.String("checkpoint", &f.checkpoint, "checkpoint folder, written at the end and every --checkpoint-every steps");
  flags.Int64("checkpoint-every", &f.checkpoint_every, "steps between checkpoints (default 0: only at the end)");
  f.numerics.Register(flags, "tf32", "bf16");
  flags.Bool("resume", &f.resume, "continue from the newest checkpoint in --checkpoint DIR (same config and options)");
  flags.String("trace", &f.trace, "Chrome/Perfetto trace of the last step (the simulator's track and task names)");
  flags.Bool("trace-kernels", &f.trace_kernels,
             "record the last step's kernels, copies and CUDA runtime calls (CUPTI): the report's last_step_device "
             "(busy and idle time, the longest idle gaps with the kernels either side and the host's calls in them, "
             "the longest kernels), and with --trace the tracks \"kernels\" and \"host CUDA calls\"");
  flags.String("report", &f.report, "JSON written at the end: throughput, final loss, held-out NE (docs/commands.md)");
  flags.OptionalInt64("shard-group", &f.shard_group,
                      "in a job: ranks sharing one copy of the dense parameters (2D FSDP; default every rank)");
  flags.Int64("ep-degree", &f.ep_degree,
              "in a job: expert parallelism over D consecutive ranks, member i running the Wukong experts e with "
              "e mod D = i on the D ranks' samples (activations all-gathered, outputs reduce-scattered); D divides "
              "the ranks and the config's experts (default 1: every rank runs every expert)");
  flags.OptionalInt64("expert-shard-group", &f.expert_shard_group,
                      "with --ep-degree D: ranks that run the same experts and shard their parameters (S_E; the "
                      "others hold replicas), dividing R / D (default R / D)");
  flags.String("param-gather", &f.param_gather,
               "in a job: who gathers the parameters in a shard group, nccl (default) or copy_engine (no SM; one host)");
  flags.Bool("param-prefetch", &f.param_prefetch,
             "in a job: gather the parameters unit by unit (the model's regions) on a stream of their own, each "
             "region's forward waiting for its unit only, and reduce-scatter each unit's gradient as its "
             "region's backward ends (default: the whole array before the forward and after the backward)");
  flags.String("batch-split", &f.batch_split,
               "in a job: how a step's global batch is split among the ranks: contiguous (default), bbs or balance");
  flags.Int64("sub-batch", &f.sub_batch, "samples per sub-batch that bbs and balance deal (default 128)");
  flags.String("plan", &f.plan,
               "in a job: shard the tables by a sharding plan, a JSON file or TW | RW | TWRW (default: replicated)");
  flags.OptionalInt64("gpus-per-host", &f.gpus_per_host,
                 "with --plan: consecutive ranks per host, for TWRW and GRID placement (default: all ranks on one host)");
  flags.Int64("store-timeout", &f.store_timeout,
              "in a job: seconds any wait for other ranks may take before every rank stops with an error (default 300)");
  flags.Int64("crash-checkpoint-after-bytes", &f.crash_checkpoint_after_bytes,
              "testing: kill this process (SIGKILL) after N bytes of a checkpoint's shard write (default -1: never)");
  if (absl::Status s = flags.Parse(args); !s.ok()) return ReportError(kCommand, s);
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return kExitOk;
  }
  // The launcher's variables are read here, once: who this process is in the job.
  absl::StatusOr<launch::LaunchInfo> launch_info = launch::ParseLaunchEnvironment(launch::ProcessEnvironment());
  if (!launch_info.ok()) return ReportError(kCommand, launch_info.status());
  absl::StatusOr<Job> job = Prepare(f, *launch_info);
  if (!job.ok()) return ReportError(kCommand, job.status());
#if GEMTB_HAVE_CUDA
  return Train(f, *job, absl::StrJoin(args, "\n"));
#else
  return ReportError(kCommand, absl::FailedPreconditionError(
                                   "this gemtb was built without CUDA (nvcc not found at configure time): no GPU "
                                   "trainer (the flags, config and checkpoint are fine)"));
#endif
}

}  // namespace gemtb::cli
