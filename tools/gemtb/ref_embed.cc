// gemtb ref embed: the table-batched embedding oracle on .npy inputs and a JSON module spec:
// forward pooling and, with --step, the backward fused with each table's optimizer.
#include <iostream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "model/json/user_file.h"
#include "model/sharding/sharding_plan_json.h"
#include "reference/embedding/embedding_json.h"
#include "reference/embedding/tbe.h"
#include "reference/sharding/sharded_executor.h"
#include "tools/gemtb/command.h"
#include "tools/gemtb/embed_case_files.h"
#include "tools/gemtb/flags.h"
#include "tools/gemtb/output_set.h"

namespace gemtb::cli {
namespace {

constexpr char kCommand[] = "ref embed";

absl::Status Bad(const std::string& m) { return absl::InvalidArgumentError(m); }

uint64_t SaturatingMul(uint64_t a, uint64_t b) {
  return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}
uint64_t SaturatingAdd(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

// The memory the tables need, estimated before any is allocated: float32 weights and optimizer
// state per table, and, when they are read from --tables, the file and its fp64 decoding besides.
absl::Status CheckTablesFit(const EmbeddingConfig& config, bool read_tables, uint64_t limit) {
  uint64_t bytes = 0;
  for (const TableConfig& tc : config.tables) {
    const uint64_t elements = SaturatingMul(static_cast<uint64_t>(tc.rows), static_cast<uint64_t>(tc.dim));
    uint64_t per_element = 4;
    if (tc.optimizer.kind == OptimizerKind::kAdam) per_element += 8;
    if (read_tables) per_element += 2 + 8;
    bytes = SaturatingAdd(bytes, SaturatingMul(elements, per_element));
    if (tc.optimizer.kind == OptimizerKind::kRowwiseAdagrad) bytes = SaturatingAdd(bytes, SaturatingMul(static_cast<uint64_t>(tc.rows), 4));
  }
  if (bytes > limit) {
    return Bad(absl::StrCat("--spec: the tables need about ", bytes, " bytes (", bytes >> 30,
                            " GiB of weights and optimizer state), more than the memory limit of ", limit,
                            " bytes (", limit >> 30, " GiB; --max-memory-mib sets it)"));
  }
  return absl::OkStatus();
}

absl::Status Run(const std::vector<std::string>& args, bool* help) {
  std::string spec_path, lengths_path, ids_path, weights_path, offsets_path, tables_dir, grads_dir, out_dir;
  bool step = false, force = false;
  int64_t step_index = 0, threads = 0, max_memory_mib = 0;
  FlagSet flags(
      "gemtb ref embed --spec spec.json --lengths F.npy --ids F.npy [--weights F.npy] [--tables DIR] "
      "[--grads DIR --step] --out-dir DIR",
      "Runs the table-batched embedding oracle (docs/embedding-spec.md) on a KeyedJaggedTensor\n"
      "given as .npy files: lengths int32 [F*B] key-major, ids int64, weights float32. Writes pooled.npy\n"
      "[B, W] (pooled features in key order) and seq_<key>.npy per sequence (NONE) feature. With --step\n"
      "and upstream gradients in --grads (pooled.npy, seq_<key>.npy), applies each table's fused optimizer\n"
      "and writes table_<name>.npy (storage dtype: float32, float16, or bfloat16 bits as <u2) and its\n"
      "state: adagrad_<name>.npy, adam_m_/adam_v_<name>.npy, adam_step_<name>.npy (b1, b2). With \"plan\"\n"
      "(the simulator's plan.sparse), \"world_size\" and \"gpus_per_host\" in the spec, runs sharded over virtual ranks\n"
      "(same results) and writes comm_report.json: bytes per rank and collective.");
  flags.String("spec", &spec_path, "module JSON: seed, batch, keys, tables[], features[]");
  flags.String("lengths", &lengths_path, "int32 (or int64) [F*B] bag lengths, key-major");
  flags.String("ids", &ids_path, "int64 ids, key -> sample -> position");
  flags.String("weights", &weights_path, "float32 per-id weights (weighted_sum pooling)");
  flags.String("offsets", &offsets_path, "int64 [F*B+1] offsets (optional; must match the lengths)");
  flags.String("tables", &tables_dir, "initial tables/state (table_<name>.npy ...); default: Philox init");
  flags.String("grads", &grads_dir, "upstream gradients: pooled.npy, seq_<key>.npy (float32)");
  flags.Bool("step", &step, "run the backward with the fused optimizer and write the updated tables");
  flags.Int64("step-index", &step_index, "the step s that keys stochastic rounding (default 0)");
  flags.Int64("threads", &threads, "oneTBB threads, 0 = all (results do not depend on it)");
  flags.Int64("max-memory-mib", &max_memory_mib,
              "refuse tables whose estimated memory exceeds this many MiB (default 0: this machine's memory)");
  flags.String("out-dir", &out_dir, "output folder (created; its parent must exist)");
  flags.Bool("force", &force, "replace an --out-dir that already holds files, as a whole");
  GEMTB_RETURN_IF_ERROR(flags.Parse(args));
  if (flags.help_requested()) {
    std::cout << flags.Help();
    *help = true;
    return absl::OkStatus();
  }
  for (const auto& [flag, value] : {std::pair{"--spec", &spec_path}, {"--lengths", &lengths_path},
                                    {"--ids", &ids_path}, {"--out-dir", &out_dir}}) {
    if (value->empty()) return Bad(absl::StrCat(flag, ": required"));
  }
  if (step && grads_dir.empty()) return Bad("--step: needs --grads DIR");
  if (threads < 0 || threads > 4096) return Bad(absl::StrCat("--threads=", threads, ": want 0..4096"));
  if (step_index < 0) return Bad(absl::StrCat("--step-index=", step_index, ": must be >= 0"));
  if (max_memory_mib < 0 || max_memory_mib > (int64_t{1} << 40)) {
    return Bad(absl::StrCat("--max-memory-mib=", max_memory_mib, ": want 0..2^40"));
  }
  const uint64_t memory_limit = max_memory_mib == 0 ? PhysicalMemoryBytes() : static_cast<uint64_t>(max_memory_mib) << 20;
  absl::StatusOr<OutputSet> output = OutputSet::Prepare("--out-dir", out_dir, {.force = force, .fail_write_at = {}});
  if (!output.ok()) return output.status();

  absl::StatusOr<reference::EmbeddingSpec> spec = reference::ReadEmbeddingSpec(spec_path);
  if (!spec.ok()) return spec.status();
  const EmbeddingConfig& config = spec->config;
  GEMTB_RETURN_IF_ERROR(CheckTablesFit(config, !tables_dir.empty(), memory_limit));
  std::optional<ShardingPlanSpec> plan;
  if (spec->plan) {
    absl::StatusOr<ShardingPlanSpec> parsed =
        ParseShardingPlan(*spec->plan, PlanTablesOf(config), spec->world_size, spec->gpus_per_host);
    if (!parsed.ok()) return absl::InvalidArgumentError(absl::StrCat(spec_path, ": ", parsed.status().message()));
    plan = *std::move(parsed);
  }

  const EmbedCasePaths paths{spec_path, lengths_path, ids_path, weights_path, offsets_path, tables_dir, grads_dir};
  absl::StatusOr<check::EmbedCase> c = ReadEmbedCaseInputs(*spec, paths, step_index);
  if (!c.ok()) return c.status();
  reference::KjtLayout layout;
  GEMTB_RETURN_IF_ERROR(reference::ValidateKjt(c->kjt, config, &layout));
  // Upstream gradients (with --step), in the output layout of the forward.
  if (step) GEMTB_RETURN_IF_ERROR(ReadEmbedGrads(grads_dir, *c));
  absl::StatusOr<reference::EmbeddingOutput> out;
  std::optional<reference::CommReport> report;
  if (plan) {
    // Sharded: R virtual ranks, real data movement through the virtual collectives.
    absl::StatusOr<reference::ShardedRun> run =
        reference::RunSharded(config, *plan, spec->world_size, spec->gpus_per_host, c->state, c->kjt,
                              step ? &c->grads : nullptr, 1, static_cast<int>(threads));
    if (!run.ok()) return run.status();
    out = std::move(run->output);
    if (step) c->state = std::move(run->state);
    report = std::move(run->report);
  } else {
    out = reference::EmbeddingForward(config, c->state, c->kjt, {}, static_cast<int>(threads));
    if (!out.ok()) return out.status();
    if (step) {
      GEMTB_RETURN_IF_ERROR(
          reference::EmbeddingBackwardStep(config, c->state, c->kjt, c->grads, {}, static_cast<int>(threads)));
    }
  }
  if (report) {
    // The communication report, the file sim/ reads.
    output->AddText("comm_report.json", reference::CommReportToJson(*report).dump(2) + "\n");
  }
  return WriteEmbedOutputs(*c, *out, step ? &c->state : nullptr, *output);
}

}  // namespace

int RunRefEmbed(const std::vector<std::string>& args) {
  bool help = false;
  if (absl::Status s = Run(args, &help); !s.ok()) return ReportError(kCommand, s);
  return kExitOk;
}

}  // namespace gemtb::cli
