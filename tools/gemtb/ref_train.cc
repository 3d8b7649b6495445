// gemtb ref train: trains the GEM-like reference model on the CPU (reference/model/trainer.h),
// printing loss, windowed train NE, held-out NE beside the oracle NE of the same samples, and
// samples/s per interval; writes checkpoints atomically and resumes from them bit-exactly. Trains on
// the generator or on a folder of .npy samples (--data, reference/model/npy_dataset.h); checks every
// flag and the checkpoint path before the first step; SIGTERM/SIGINT stop after a step, saving first.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/data/shape_from_config.h"
#include "model/description/model_config.h"
#include "model/launch/launch_env.h"
#include "model/metrics/ne.h"
#include "reference/model/batch.h"
#include "reference/model/checkpoint.h"
#include "reference/model/npy_dataset.h"
#include "reference/model/trainer.h"
#include "tools/gemtb/command.h"
#include "tools/gemtb/flags.h"
#include "tools/gemtb/stop_signals.h"
#include "tools/gemtb/train_common.h"
#include "tools/gemtb/train_job.h"
#include "tools/gemtb/train_plan.h"
#include "tools/gemtb/train_report.h"

namespace gemtb::cli {
namespace {

constexpr char kCommand[] = "ref train";
using reference::model::EvalResult;
using reference::model::NpyDataset;
using reference::model::StepResult;
using reference::model::Trainer;
using reference::model::TrainOptions;

struct Flags {
  std::string config = "tiny";
  std::string data, eval_data;
  int64_t steps = 7000;
  int64_t batch = 64;
  std::optional<double> lr, table_lr;
  std::string schedule = "linear";
  std::optional<double> table_decay;
  std::optional<int64_t> schedule_steps;
  std::string pipeline = "sync";
  int64_t seed = 1, data_seed = 1, threads = 0, grad_blocks = 16;
  int64_t log_every = 100, eval_every = 0, eval_samples = 32768, eval_first = 0, ne_window = 100;
  std::string checkpoint, resume;
  int64_t checkpoint_every = 0;
  int64_t crash_checkpoint_after_bytes = -1;
  bool check = false;
  int64_t store_timeout = 300;
  std::string plan;
  std::optional<int64_t> plan_ranks, gpus_per_host;
  std::string report;
};

// NE divides by the entropy of the mean label: with no positives or no negatives it is 0 and NE has
// no meaning (the metric library returns a huge finite number there), so it prints as "undefined".
bool NeDefined(int64_t positives, int64_t count) { return positives > 0 && positives < count; }

std::string NeText(double ne, int64_t positives, int64_t count, int digits = 5) {
  if (!NeDefined(positives, count)) return "undefined";
  return std::isnan(ne) ? std::string("n/a") : Num(ne, digits);  // n/a: no true probabilities (oracle)
}

std::string NeText(const metrics::NeResult& r, int digits) { return NeText(r.ne, r.positives, r.count, digits); }

std::string EvalLine(const gemtb::model::ModelConfig& config, int64_t step, const EvalResult& e, const char* what) {
  std::string s = absl::StrCat("eval step ", step, " ", what, " samples ", e.samples, ":");
  for (size_t t = 0; t < e.ne.size(); ++t) {
    const std::string gap = !NeDefined(e.positives[t], e.count[t]) ? "undefined"
                            : std::isnan(e.oracle_ne[t])            ? "n/a"
                                                                    : Num(e.ne[t] - e.oracle_ne[t], 3);
    absl::StrAppend(&s, " ", config.tasks[t].name, " ne ", NeText(e.ne[t], e.positives[t], e.count[t]), " (oracle ",
                    NeText(e.oracle_ne[t], e.positives[t], e.count[t]), ", gap ", gap,
                    ", calibration ", e.positives[t] > 0 ? Num(e.calibration[t], 3) : std::string("undefined"),
                    ", positives ", e.positives[t], "/", e.count[t], ")");
  }
  return s;
}

}  // namespace

int RunRefTrain(const std::vector<std::string>& args) {
  Flags f;
  FlagSet flags(
      "gemtb ref train [--config tiny] [--steps N] [--data DIR] [flags]",
      "Trains the GEM-like reference model (fp32, oneTBB, bit-exact for any --threads) on the planted-\n"
      "teacher data. Per --log-every steps: loss, windowed and lifetime train NE per task with the\n"
      "oracle's windowed NE of the same samples, samples/s; per --eval-every steps and at the end: NE on\n"
      "held-out samples (indices from 2^40 on, never trained on) beside the oracle NE of the same samples.\n"
      "Exit 0; with --check, exit 1 unless the first task's final held-out NE <= oracle NE + 0.05 and\n"
      "<= 0.9. An NE of samples without a positive or a negative prints as undefined.\n"
      "\n"
      "--data DIR trains on the samples of DIR instead, step s on samples s*batch .. s*batch+batch-1\n"
      "(modulo N: the set repeats). For N samples, T tasks, m dense features and K keys (the config's\n"
      "sparse features, then per sequence <seq>.item, <seq>.action, <seq>.dt), DIR holds:\n"
      "  lengths.npy int32 [K*N] key-major; ids.npy int64 (key, then sample, then position; events\n"
      "  oldest first); seq_lengths.npy int32 [J, N]; dense.npy float32 [N, m]; labels.npy and\n"
      "  masks.npy uint8 [N, T]; optionally probs.npy float64 [N, T] (true probabilities, for the\n"
      "  oracle NE; without it the oracle prints n/a).\n"
      "A folder of `gemtb data generate --seed S` trains to the same bits as --data-seed S without\n"
      "--data. The held-out NE of a --data run comes from --eval-data.\n"
      "\n"
      "SIGTERM or SIGINT stops after the current step, writing --checkpoint first when given\n"
      "(exit 128 + the signal number); --resume continues from it.\n"
      "\n"
      "Across processes (torchrun --no-python, mpirun or srun; rank, world size and MASTER_ADDR/MASTER_PORT\n"
      "from the launcher's variables) the ranks train data-parallel to the same bits as one process; the\n"
      "world size must divide --grad-blocks. Rank 0 prints; --checkpoint and --resume name a folder of\n"
      "sharded checkpoints (docs/checkpoint.md). A rank that dies or fails ends every rank with an error.\n"
      "\n"
      "--plan FILE|NAME shards the tables by a sharding plan (the JSON object of `gemtb ref embed`'s \"plan\",\n"
      "the simulator's plan.sparse; NAME: DP, TW, RW or TWRW for every table) over --plan-ranks virtual\n"
      "ranks in one process, or over the job's ranks across processes, each holding only its shards; both\n"
      "end with the same bytes.");
  flags.String("config", &f.config, "model config: tiny | small | gem-scale | path to a JSON (default tiny)");
  flags.String("data", &f.data,
               "training data: a folder of .npy files in the layout `gemtb data generate` writes (described above), or "
               "the generator's data parameters as a built-in name or JSON path (default: the config's generator)");
  flags.String("eval-data", &f.eval_data,
               "with a --data folder: a second folder in the same layout for the held-out NE (default: none, no "
               "held-out evaluation)");
  flags.Int64("steps", &f.steps, "total training steps (default 7000; with --resume, the total including resumed)");
  flags.Int64("batch", &f.batch, "samples per step (default 64)");
  flags.OptionalDouble("lr", &f.lr, "dense Adam learning rate (default 1e-3)");
  flags.OptionalDouble("table-lr", &f.table_lr, "rowwise Adagrad learning rate of every table (default 0.2)");
  flags.String("schedule", &f.schedule, "learning rates: linear (decay to 0 at --steps, default) | constant");
  flags.OptionalInt64("schedule-steps", &f.schedule_steps, "steps of the linear decay (default --steps), e.g. to stop early and resume");
  flags.OptionalDouble("table-decay", &f.table_decay, "fraction of the linear decay the table rate follows (default 0: Adagrad anneals each row by itself)");
  flags.String("pipeline", &f.pipeline,
               "when a step looks up its embeddings: sync (default) | semi-sync (TorchRec's semi-synchronous "
               "pipeline: the next step's lookups after this step's dense backward, before its table update)");
  flags.Int64("seed", &f.seed, "parameter init seed (default 1)");
  flags.Int64("data-seed", &f.data_seed, "data generator seed (default 1)");
  flags.Int64("threads", &f.threads, "oneTBB threads, 0 = all (results do not depend on it)");
  flags.Int64("grad-blocks", &f.grad_blocks, "gradient-sum blocks per batch (default 16; changes the bits)");
  flags.Int64("log-every", &f.log_every, "steps per progress interval (default 100)");
  flags.Int64("eval-every", &f.eval_every, "steps between held-out evaluations, 0 = only at the end (default 0: the windowed train NE is already measured on unseen samples)");
  flags.Int64("eval-samples", &f.eval_samples, "held-out samples per evaluation (default 32768: the NE gap's standard error ~0.003)");
  flags.Int64("eval-first", &f.eval_first,
              "first held-out index, counted from 2^40 (default 0; tune hyperparameters on another range, e.g. "
              "2^30, and report the default range once)");
  flags.Int64("ne-window", &f.ne_window, "windowed train NE over the last N steps (default 100)");
  flags.String("checkpoint", &f.checkpoint, "checkpoint file written atomically at the end (and every --checkpoint-every)");
  flags.Int64("checkpoint-every", &f.checkpoint_every, "steps between checkpoints (0 = only at the end)");
  flags.String("resume", &f.resume, "continue from this checkpoint (same options required)");
  flags.Int64("crash-checkpoint-after-bytes", &f.crash_checkpoint_after_bytes,
              "testing: kill this process (SIGKILL) after N bytes of a checkpoint write (default -1: never)");
  flags.Bool("check", &f.check, "exit 1 unless the final held-out NE <= oracle NE + 0.05 and <= 0.9");
  flags.Int64("store-timeout", &f.store_timeout,
              "across processes: seconds any rank waits for the others at most before it stops with an error (default 300)");
  flags.String("plan", &f.plan,
               "sharding plan of the tables: a JSON file or DP | TW | RW | TWRW (default: none, tables replicated)");
  flags.OptionalInt64(
      "plan-ranks", &f.plan_ranks,
      "with --plan in one process: the ranks it runs virtually (default 1; across processes: the job's ranks)");
  flags.OptionalInt64(
      "gpus-per-host", &f.gpus_per_host,
      "with --plan: consecutive ranks per host, for TWRW and GRID placement (default: all ranks on one host)");
  flags.String("report", &f.report,
               "JSON written by rank 0 at the end: every rank's wall time and time in the store's collectives, the "
               "slowest rank and the imbalance (docs/commands.md)");
  if (absl::Status s = flags.Parse(args); !s.ok()) return ReportError(kCommand, s);
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return kExitOk;
  }
  auto bad = [](const std::string& m) { return ReportError(kCommand, absl::InvalidArgumentError(m)); };
  if (f.steps < 0) return bad(absl::StrCat("--steps: ", f.steps, " must be >= 0"));
  if (f.log_every < 1) return bad(absl::StrCat("--log-every: ", f.log_every, " must be >= 1"));
  if (f.eval_every < 0) return bad(absl::StrCat("--eval-every: ", f.eval_every, " must be >= 0"));
  if (f.eval_samples < 1) return bad(absl::StrCat("--eval-samples: ", f.eval_samples, " must be >= 1"));
  if (f.eval_first < 0 || f.eval_first > (int64_t{1} << 40))
    return bad(absl::StrCat("--eval-first: ", f.eval_first, " must be in [0, 2^40]"));
  if (f.ne_window < 1) return bad(absl::StrCat("--ne-window: ", f.ne_window, " must be >= 1"));
  if (f.checkpoint_every < 0) return bad(absl::StrCat("--checkpoint-every: ", f.checkpoint_every, " must be >= 0"));
  if (f.seed < 0 || f.data_seed < 0) return bad("--seed/--data-seed: must be >= 0");
  if (f.threads < 0 || f.threads > 4096) return bad(absl::StrCat("--threads: ", f.threads, " must be in [0, 4096]"));
  if (f.grad_blocks < 1 || f.grad_blocks > 1 << 16) return bad(absl::StrCat("--grad-blocks: ", f.grad_blocks, " must be in [1, 65536]"));
  if (f.batch < 1 || f.batch > 1 << 20) return bad(absl::StrCat("--batch: ", f.batch, " must be in [1, 1048576]"));
  if (std::optional<std::string> m = CheckRate("lr", f.lr)) return bad(*m);
  if (std::optional<std::string> m = CheckRate("table-lr", f.table_lr)) return bad(*m);
  if (f.table_decay && !(*f.table_decay >= 0 && *f.table_decay <= 1))
    return bad(absl::StrCat("--table-decay: ", Exact(*f.table_decay), " must be in [0, 1]"));
  if (!f.eval_data.empty() && f.data.empty()) return bad("--eval-data: needs a --data folder");
  if (f.store_timeout < 1 || f.store_timeout > 86400) return bad(absl::StrCat("--store-timeout: ", f.store_timeout, " must be in [1, 86400]"));
  // The launcher's variables are read here, once: who this process is in the job.
  absl::StatusOr<launch::LaunchInfo> launch_info = launch::ParseLaunchEnvironment(launch::ProcessEnvironment());
  if (!launch_info.ok()) return ReportError(kCommand, launch_info.status());
  const bool several = launch_info->world_size > 1;
  if (several && f.crash_checkpoint_after_bytes >= 0)
    return bad("--crash-checkpoint-after-bytes: a single process only (kill a rank from outside instead)");
  // Output paths are checked before any work: a bad --checkpoint fails now, not after the last step.
  if (several && !f.checkpoint.empty()) {
    std::error_code dir_ec;
    std::filesystem::create_directories(f.checkpoint, dir_ec);
    if (dir_ec || !std::filesystem::is_directory(f.checkpoint, dir_ec))
      return bad(absl::StrCat("--checkpoint: ", f.checkpoint, ": not a folder that can be created (across processes it names a folder)"));
  } else if (!f.checkpoint.empty()) {
    if (absl::Status s = reference::model::CheckCheckpointPath(f.checkpoint); !s.ok())
      return ReportError(kCommand, absl::InvalidArgumentError(absl::StrCat("--checkpoint: ", s.message())));
  }

  if (!f.report.empty() && launch_info->rank == 0 && !std::ofstream(f.report, std::ios::trunc))
    return bad(absl::StrCat("--report: ", f.report, ": cannot be written"));

  absl::StatusOr<gemtb::model::ModelConfig> config = gemtb::model::LoadModelConfig(f.config);
  if (!config.ok()) return ReportError(kCommand, absl::InvalidArgumentError(absl::StrCat("--config: ", config.status().message())));
  if (f.plan_ranks && (*f.plan_ranks < 1 || *f.plan_ranks > 4096))
    return bad(absl::StrCat("--plan-ranks: ", *f.plan_ranks, " must be in [1, 4096]"));
  if (f.gpus_per_host && (*f.gpus_per_host < 1 || *f.gpus_per_host > 4096))
    return bad(absl::StrCat("--gpus-per-host: ", *f.gpus_per_host, " must be in [1, 4096]"));
  std::optional<TrainPlan> plan;
  int plan_world = 1, gpus_per_host = 1;
  if (f.plan.empty()) {
    if (f.plan_ranks || f.gpus_per_host) return bad("--plan-ranks/--gpus-per-host: need --plan");
  } else {
    if (several && f.plan_ranks && *f.plan_ranks != launch_info->world_size)
      return bad(absl::StrCat("--plan-ranks: ", *f.plan_ranks, " is not the job's world size ", launch_info->world_size,
                              " (across processes the plan's ranks are the processes)"));
    plan_world = several ? launch_info->world_size : static_cast<int>(f.plan_ranks.value_or(1));
    gpus_per_host = static_cast<int>(f.gpus_per_host.value_or(plan_world));
    absl::StatusOr<TrainPlan> loaded =
        LoadTrainPlan(f.plan, reference::model::ModelEmbeddingConfig(*config, 0.0f, 0), plan_world, gpus_per_host);
    if (!loaded.ok()) return ReportError(kCommand, loaded.status());
    plan = *std::move(loaded);
    if (!f.resume.empty() && plan->spec.mp_group != 0 && plan->spec.mp_group < plan_world)
      return bad(absl::StrCat("--resume: the plan is 2D (mp_group ", plan->spec.mp_group, " of ", plan_world,
                              " ranks), whose replicas keep optimizer states a checkpoint does not hold; resume "
                              "a 1D plan's run"));
  }
  std::error_code ec;
  const bool data_folder = !f.data.empty() && std::filesystem::is_directory(f.data, ec);
  TrainOptions o;
  if (!data_folder) o.data = f.data;
  o.seed = static_cast<uint64_t>(f.seed);
  o.data_seed = static_cast<uint64_t>(f.data_seed);
  o.batch = f.batch;
  if (f.lr) o.lr = static_cast<float>(*f.lr);
  if (f.table_lr) o.table_lr = static_cast<float>(*f.table_lr);
  o.threads = static_cast<int>(f.threads);
  if (f.schedule != "linear" && f.schedule != "constant")
    return bad(absl::StrCat("--schedule: '", f.schedule, "' is not linear or constant"));
  o.linear_decay = f.schedule == "linear";
  if (f.table_decay) o.table_decay = static_cast<float>(*f.table_decay);
  o.total_steps = f.schedule_steps.value_or(f.steps);
  if (o.total_steps < 1) return bad(absl::StrCat("--schedule-steps: ", o.total_steps, " must be >= 1"));
  o.grad_blocks = static_cast<int>(f.grad_blocks);
  absl::StatusOr<gemtb::model::SparsePipeline> pipeline = gemtb::model::ParseSparsePipeline(f.pipeline, "--pipeline");
  if (!pipeline.ok()) return bad(std::string(pipeline.status().message()));
  o.pipeline = *pipeline;
  absl::StatusOr<std::unique_ptr<Trainer>> created = Trainer::Create(*config, o);
  if (!created.ok()) return ReportError(kCommand, absl::InvalidArgumentError(created.status().message()));
  Trainer& trainer = **created;
  const launch::Millis store_timeout(f.store_timeout * 1000);
  // The ranks agree on the flags and on the plan's content (its file may differ by working folder).
  const std::string plan_text = plan ? plan->text : std::string();
  absl::StatusOr<std::unique_ptr<TrainJob>> joined =
      TrainJob::Join(*launch_info, store_timeout, absl::StrCat(absl::StrJoin(args, "\n"), "\n", plan_text), kCommand);
  if (!joined.ok()) return ReportError(kCommand, joined.status());
  TrainJob& job = **joined;
  const bool leader = job.rank() == 0;
  absl::StatusOr<reference::dist::CheckpointIdentity> identity = TrainCheckpointIdentity(f.config, job.world_size(), plan_text);
  if (several && !identity.ok()) return job.Leave(ReportError(kCommand, identity.status()), store_timeout);
  if (several) {
    if (absl::Status s = trainer.UseDataParallel(job.group()); !s.ok()) return job.Leave(ReportError(kCommand, s), store_timeout);
    if (!leader) std::cout.setstate(std::ios::failbit);  // rank 0 prints; the others print only errors
  }
  if (plan) {
    if (absl::Status s =
            trainer.UseShardedTables(plan->spec, plan_world, gpus_per_host, several ? job.collectives() : nullptr);
        !s.ok())
      return job.Leave(ReportError(kCommand, s), store_timeout);
  }
  auto body = [&]() -> int {
    std::shared_ptr<const NpyDataset> eval_set;
    bool train_oracle_known = true;  // the training samples carry true probabilities
    if (data_folder) {
      const data::DataShape shape = data::ShapeFromConfig(*config);
      absl::StatusOr<NpyDataset> set = reference::model::LoadNpyDataset(f.data, shape);
      if (!set.ok()) return ReportError(kCommand, set.status());
      std::cout << "training data: " << set->size << " samples from " << f.data
                << (set->has_probs ? "" : " (no probs.npy: oracle NE n/a)") << "\n";
      train_oracle_known = set->has_probs;
      trainer.UseTrainingSet(std::make_shared<const NpyDataset>(*std::move(set)));
      if (!f.eval_data.empty()) {
        absl::StatusOr<NpyDataset> e = reference::model::LoadNpyDataset(f.eval_data, shape);
        if (!e.ok()) return ReportError(kCommand, absl::InvalidArgumentError(absl::StrCat("--eval-data: ", e.status().message())));
        eval_set = std::make_shared<const NpyDataset>(*std::move(e));
      }
    }
    // Held-out NE: the generator's samples from 2^40 on, the --eval-data folder, or none for a --data
    // folder without one (the generator's samples need not resemble a user's data).
    const bool evaluate = leader && (!data_folder || eval_set != nullptr);
    auto run_eval = [&]() -> absl::StatusOr<EvalResult> {
      return eval_set ? trainer.Evaluate(*eval_set) : trainer.Evaluate(f.eval_first, f.eval_samples);
    };
    const char* eval_what = eval_set ? "--eval-data" : "held-out";
    if (!f.resume.empty()) {
      absl::StatusOr<reference::model::NamedArrays> arrays =
          several ? job.Load(f.resume, *identity) : reference::model::ReadCheckpoint(f.resume);
      if (!arrays.ok()) return ReportError(kCommand, absl::InvalidArgumentError(absl::StrCat("--resume: ", arrays.status().message())));
      if (absl::Status s = trainer.LoadStateArrays(*arrays); !s.ok())
        return ReportError(kCommand, absl::InvalidArgumentError(absl::StrCat("--resume ", f.resume, ": ", s.message())));
      std::cout << "resumed from " << f.resume << " at step " << trainer.state().step << "\n";
    }
    auto save = [&]() -> absl::Status {
      if (f.checkpoint.empty()) return absl::OkStatus();
      if (absl::Status s = trainer.GatherTables(); !s.ok()) return s;
      if (several) return job.Save(f.checkpoint, trainer.state().step, *identity, trainer.StateArrays());
      reference::model::CheckpointWriteOptions write;
      write.fail_after_bytes = f.crash_checkpoint_after_bytes;
      write.kill_at_failure = f.crash_checkpoint_after_bytes >= 0;
      return reference::model::WriteCheckpoint(f.checkpoint, trainer.StateArrays(), write);
    };

    const int T = static_cast<int>(config->NumTasks());
    std::cout << "gemtb ref train: config " << config->name << ", " << trainer.model().layout().total()
              << " dense params, batch " << o.batch << ", steps " << f.steps << ", lr " << o.lr << ", table lr "
              << o.table_lr << " (decay fraction " << o.table_decay << "), schedule " << f.schedule << ", pipeline "
              << f.pipeline << ", threads "
              << (o.threads ? absl::StrCat(o.threads) : std::string("all"))
              << (several ? absl::StrCat(", ", job.world_size(), " ranks data-parallel (",
                                         launch::LauncherName(launch_info->launcher), ")")
                          : std::string())
              << (plan ? absl::StrCat(", tables sharded by --plan over ", plan_world,
                                      several ? " ranks" : " virtual ranks")
                       : std::string())
              << "\n";
    const bool tty = leader && ::isatty(STDERR_FILENO) != 0;
    metrics::NeTracker tracker(T, f.ne_window), oracle_tracker(T, f.ne_window);
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    Clock::time_point interval_start = start;
    double loss_sum = 0;
    int64_t loss_n = 0, interval_samples = 0;
    const StopSignals stop;
    while (trainer.state().step < f.steps) {
      absl::StatusOr<StepResult> r = trainer.Step();
      if (!r.ok()) return ReportError(kCommand, r.status());
      std::vector<metrics::NeUnit> units, oracle_units;
      for (int t = 0; t < T; ++t) {
        units.push_back(metrics::MakeNeUnit(r->predictions.data() + t, r->labels.data() + t, r->masks.data() + t, o.batch, T));
        oracle_units.push_back(metrics::MakeNeUnit(r->true_p.data() + t, r->labels.data() + t, r->masks.data() + t, o.batch, T));
      }
      tracker.AddStep(units);
      oracle_tracker.AddStep(oracle_units);
      loss_sum += r->loss;
      ++loss_n;
      interval_samples += o.batch;
      const int64_t step = r->step;
      if (step % f.log_every == 0 || step == f.steps) {
        const double secs = std::chrono::duration<double>(Clock::now() - interval_start).count();
        std::string line = absl::StrCat("step ", step, " loss ", Num(loss_sum / static_cast<double>(loss_n)));
        // Windowed (last --ne-window steps) and lifetime train NE, the oracle's windowed NE on the same samples.
        for (int t = 0; t < T; ++t)
          absl::StrAppend(&line, " train_ne[", config->tasks[t].name, "] ", NeText(tracker.Windowed(t), 4), " (lifetime ",
                          NeText(tracker.Lifetime(t), 4), ", oracle ",
                          train_oracle_known ? NeText(oracle_tracker.Windowed(t), 4) : std::string("n/a"), ")");
        absl::StrAppend(&line, " samples/s ", Num(static_cast<double>(interval_samples) / std::max(secs, 1e-9), 4));
        if (tty) std::cerr << "\r\033[K";
        std::cout << line << std::endl;
        loss_sum = 0;
        loss_n = 0;
        interval_samples = 0;
        interval_start = Clock::now();
      }
      if ((!data_folder || eval_set != nullptr) && f.eval_every > 0 && step % f.eval_every == 0 && step != f.steps) {
        if (absl::Status s = trainer.GatherTables(); !s.ok()) return ReportError(kCommand, s);  // every rank
      }
      if (evaluate && f.eval_every > 0 && step % f.eval_every == 0 && step != f.steps) {
        absl::StatusOr<EvalResult> e = run_eval();
        if (!e.ok()) return ReportError(kCommand, e.status());
        std::cout << EvalLine(*config, step, *e, eval_what) << std::endl;
        interval_start = Clock::now();
      }
      if (f.checkpoint_every > 0 && step % f.checkpoint_every == 0 && step != f.steps) {
        if (absl::Status s = save(); !s.ok()) return ReportError(kCommand, s);
      }
      absl::StatusOr<int> agreed_stop = job.AgreeOnStop(stop.received());
      if (!agreed_stop.ok()) return ReportError(kCommand, agreed_stop.status());
      if (const int signal = *agreed_stop; signal != 0) {
        if (tty) std::cerr << "\r\033[K" << std::flush;
        return StopAfterSignal(kCommand, signal, step, f.checkpoint, "--resume", save);
      }
      if (tty) {
        const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
        const double frac = static_cast<double>(step) / static_cast<double>(std::max<int64_t>(f.steps, 1));
        std::cerr << "\r\033[K[" << step << "/" << f.steps << "] " << Num(100 * frac, 3) << "% elapsed "
                  << Num(elapsed, 4) << " s" << std::flush;
      }
    }
    if (tty) std::cerr << "\r\033[K" << std::flush;
    if (absl::Status s = save(); !s.ok()) return ReportError(kCommand, s);
    const double wall = std::chrono::duration<double>(Clock::now() - start).count();
    const std::string saved = f.checkpoint.empty() ? "" : ", checkpoint " + f.checkpoint;
    if (absl::Status s = trainer.GatherTables(); !s.ok()) return ReportError(kCommand, s);  // every rank
    if (!f.report.empty()) {
      const RankTimes mine{job.rank(), wall, several ? job.group()->seconds() : 0.0,
                           several ? job.collectives()->seconds() : 0.0};
      std::vector<RankTimes> all = {mine};
      if (several) {
        absl::StatusOr<std::vector<std::string>> texts = job.group()->AllGather(RankTimesText(mine));
        if (!texts.ok()) return ReportError(kCommand, texts.status());
        all.clear();
        for (const std::string& t : *texts) {
          absl::StatusOr<RankTimes> parsed = ParseRankTimes(t);
          if (!parsed.ok()) return ReportError(kCommand, parsed.status());
          all.push_back(*parsed);
        }
      }
      if (leader) {
        std::ofstream out(f.report, std::ios::trunc);
        out << TrainReportJson(all, trainer.state().step);
        if (!out.flush())
          return ReportError(kCommand, absl::DataLossError(absl::StrCat("--report: ", f.report, ": write failed")));
      }
    }
    if (!leader) return kExitOk;
    if (!evaluate) {
      std::cout << "final: no held-out evaluation (give --eval-data DIR), wall " << Num(wall, 4) << " s" << saved
                << std::endl;
      return f.check ? kExitCheckFailed : kExitOk;
    }
    absl::StatusOr<EvalResult> e = run_eval();
    if (!e.ok()) return ReportError(kCommand, e.status());
    std::cout << EvalLine(*config, trainer.state().step, *e, eval_what) << std::endl;
    const bool defined = NeDefined(e->positives[0], e->count[0]) && !std::isnan(e->oracle_ne[0]);
    const bool pass = defined && e->ne[0] <= e->oracle_ne[0] + 0.05 && e->ne[0] <= 0.9;
    std::cout << "final: " << config->tasks[0].name << " " << eval_what << " NE "
              << NeText(e->ne[0], e->positives[0], e->count[0]) << " vs oracle "
              << NeText(e->oracle_ne[0], e->positives[0], e->count[0])
              << " (criterion NE <= oracle + 0.05 and <= 0.9: " << (pass ? "PASS" : defined ? "FAIL" : "not checkable")
              << "), wall " << Num(wall, 4) << " s" << saved << std::endl;
    return (f.check && !pass) ? kExitCheckFailed : kExitOk;
  };
  return job.Leave(body(), store_timeout);
}

}  // namespace gemtb::cli
