// gemtb ref embed: the table-batched embedding oracle on .npy inputs and a JSON module spec:
// forward pooling and, with --step, the backward fused with each table's optimizer.
#include <filesystem>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "model/json/user_file.h"
#include "model/sharding/sharding_plan_json.h"
#include "reference/embedding/embedding_json.h"
#include "reference/embedding/tbe.h"
#include "reference/io/npy.h"
#include "reference/sharding/sharded_executor.h"
#include "tools/gemtb/command.h"
#include "tools/gemtb/flags.h"
#include "tools/gemtb/output_set.h"

namespace gemtb::cli {
namespace {

constexpr char kCommand[] = "ref embed";
namespace fs = std::filesystem;
using reference::EmbeddingState;
using reference::TableState;

absl::Status Bad(const std::string& m) { return absl::InvalidArgumentError(m); }

absl::StatusOr<io::NpyArray> Read(const std::string& path, const std::string& field) {
  absl::StatusOr<io::NpyArray> a = io::ReadNpy(path);
  if (!a.ok()) return Bad(absl::StrCat(field, ": ", a.status().message()));
  return a;
}

// A float32 tensor of an expected shape.
absl::StatusOr<std::vector<float>> ReadF32(const std::string& path, const std::string& field,
                                           const std::vector<int64_t>& shape) {
  absl::StatusOr<io::NpyArray> a = Read(path, field);
  if (!a.ok()) return a.status();
  if (a->dtype != io::NpyDType::kFloat32) {
    return Bad(absl::StrCat(field, " (", path, "): dtype ", io::NpyDTypeName(a->dtype), ", expected float32 (<f4)"));
  }
  if (a->shape != shape) {
    return Bad(absl::StrCat(field, " (", path, "): shape ", io::ShapeString(a->shape), ", expected ", io::ShapeString(shape)));
  }
  absl::StatusOr<std::vector<double>> d = io::DecodeFloat(*a, field);
  if (!d.ok()) return d.status();
  return std::vector<float>(d->begin(), d->end());
}

io::NpyDType StorageNpy(ElementType t) {
  switch (t) {
    case ElementType::kFloat16: return io::NpyDType::kFloat16;
    case ElementType::kBFloat16: return io::NpyDType::kBFloat16;
    default: return io::NpyDType::kFloat32;
  }
}

io::NpyArray F32(const std::vector<float>& v, std::vector<int64_t> shape, io::NpyDType dtype = io::NpyDType::kFloat32) {
  return io::EncodeFloat(std::vector<double>(v.begin(), v.end()), std::move(shape), dtype);
}

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

// grads/pooled.npy [B, W] and grads/seq_<key>.npy [sum len, D], float32.
absl::Status ReadGrads(const EmbeddingConfig& config, const reference::KeyedJaggedTensor& kjt,
                       const reference::KjtLayout& layout, int64_t batch, const std::string& dir,
                       reference::EmbeddingGrads& grads) {
  int64_t width = 0;
  for (size_t f = 0; f < kjt.keys.size(); ++f) {
    const FeatureConfig& fc = config.features[layout.feature[f]];
    const int64_t dim = config.tables[fc.table].dim;
    if (fc.pooling != Pooling::kNone) {
      width += dim;
      continue;
    }
    const std::string name = absl::StrCat("seq_", kjt.keys[f], ".npy");
    const int64_t rows = layout.offsets[(f + 1) * batch] - layout.offsets[f * batch];
    absl::StatusOr<std::vector<float>> g = ReadF32((fs::path(dir) / name).string(), absl::StrCat("grads/", name), {rows, dim});
    if (!g.ok()) return g.status();
    grads.sequence.push_back(*std::move(g));
  }
  if (width > 0) {
    absl::StatusOr<std::vector<float>> g = ReadF32((fs::path(dir) / "pooled.npy").string(), "grads/pooled.npy", {batch, width});
    if (!g.ok()) return g.status();
    grads.pooled = *std::move(g);
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

  reference::KeyedJaggedTensor kjt;
  kjt.keys = spec->keys;
  kjt.stride = spec->batch;
  {
    absl::StatusOr<io::NpyArray> a = Read(lengths_path, "lengths");
    if (!a.ok()) return a.status();
    if (a->shape.size() != 1) return Bad(absl::StrCat("lengths: shape ", io::ShapeString(a->shape), ", expected [F*B]"));
    absl::StatusOr<std::vector<int64_t>> l = io::DecodeInt(*a, "lengths");
    if (!l.ok()) return l.status();
    for (size_t i = 0; i < l->size(); ++i) {
      if ((*l)[i] > INT32_MAX || (*l)[i] < INT32_MIN) return Bad(absl::StrCat("lengths[", i, "]=", (*l)[i], " exceeds int32"));
      kjt.lengths.push_back(static_cast<int32_t>((*l)[i]));
    }
  }
  {
    absl::StatusOr<io::NpyArray> a = Read(ids_path, "ids");
    if (!a.ok()) return a.status();
    if (a->dtype != io::NpyDType::kInt64 || a->shape.size() != 1) {
      return Bad(absl::StrCat("ids: ", io::NpyDTypeName(a->dtype), " ", io::ShapeString(a->shape), ", expected int64 [N]"));
    }
    absl::StatusOr<std::vector<int64_t>> v = io::DecodeInt(*a, "ids");
    if (!v.ok()) return v.status();
    kjt.values = *std::move(v);
  }
  if (!weights_path.empty()) {
    absl::StatusOr<std::vector<float>> w = ReadF32(weights_path, "weights", {static_cast<int64_t>(kjt.values.size())});
    if (!w.ok()) return w.status();
    kjt.weights = *std::move(w);
    kjt.has_weights = true;
  }
  if (!offsets_path.empty()) {
    absl::StatusOr<io::NpyArray> a = Read(offsets_path, "offsets");
    if (!a.ok()) return a.status();
    if (a->dtype != io::NpyDType::kInt64) return Bad("offsets: expected int64 (<i8)");
    absl::StatusOr<std::vector<int64_t>> o = io::DecodeInt(*a, "offsets");
    if (!o.ok()) return o.status();
    kjt.offsets = *std::move(o);
  }
  reference::KjtLayout layout;
  GEMTB_RETURN_IF_ERROR(reference::ValidateKjt(kjt, config, &layout));

  // Tables: given, or Philox-initialised.
  EmbeddingState state = reference::InitEmbeddingState(config);
  state.step = step_index;
  if (!tables_dir.empty()) {
    for (size_t t = 0; t < config.tables.size(); ++t) {
      const TableConfig& tc = config.tables[t];
      TableState& ts = state.tables[t];
      const fs::path dir(tables_dir);
      const std::string path = (dir / absl::StrCat("table_", tc.name, ".npy")).string();
      absl::StatusOr<io::NpyArray> a = Read(path, absl::StrCat("table '", tc.name, "'"));
      if (!a.ok()) return a.status();
      if (a->dtype != StorageNpy(tc.dtype) || a->shape != std::vector<int64_t>{tc.rows, tc.dim}) {
        return Bad(absl::StrCat(path, ": ", io::NpyDTypeName(a->dtype), " ", io::ShapeString(a->shape), ", expected ",
                                io::NpyDTypeName(StorageNpy(tc.dtype)), " [", tc.rows, ", ", tc.dim, "]"));
      }
      absl::StatusOr<std::vector<double>> w = io::DecodeFloat(*a, path);
      if (!w.ok()) return w.status();
      ts.weights.assign(w->begin(), w->end());
      auto optional_state = [&](const std::string& name, std::vector<float>& dst, std::vector<int64_t> shape) -> absl::Status {
        const std::string p = (dir / name).string();
        if (!fs::exists(p)) return absl::OkStatus();
        absl::StatusOr<std::vector<float>> v = ReadF32(p, name, shape);
        if (!v.ok()) return v.status();
        dst = *std::move(v);
        return absl::OkStatus();
      };
      if (tc.optimizer.kind == OptimizerKind::kRowwiseAdagrad) {
        GEMTB_RETURN_IF_ERROR(optional_state(absl::StrCat("adagrad_", tc.name, ".npy"), ts.adagrad, {tc.rows}));
      }
      if (tc.optimizer.kind == OptimizerKind::kAdam) {
        GEMTB_RETURN_IF_ERROR(optional_state(absl::StrCat("adam_m_", tc.name, ".npy"), ts.adam_m, {tc.rows, tc.dim}));
        GEMTB_RETURN_IF_ERROR(optional_state(absl::StrCat("adam_v_", tc.name, ".npy"), ts.adam_v, {tc.rows, tc.dim}));
        std::vector<float> b = {1.0f, 1.0f};
        GEMTB_RETURN_IF_ERROR(optional_state(absl::StrCat("adam_step_", tc.name, ".npy"), b, {2}));
        ts.adam_step = {b[0], b[1]};
      }
    }
  }

  // Upstream gradients (with --step), in the output layout of the forward.
  reference::EmbeddingGrads grads;
  if (step) {
    GEMTB_RETURN_IF_ERROR(ReadGrads(config, kjt, layout, spec->batch, grads_dir, grads));
  }
  absl::StatusOr<reference::EmbeddingOutput> out;
  std::optional<reference::CommReport> report;
  if (plan) {
    // Sharded: R virtual ranks, real data movement through the virtual collectives.
    absl::StatusOr<reference::ShardedRun> run =
        reference::RunSharded(config, *plan, spec->world_size, spec->gpus_per_host, state, kjt,
                              step ? &grads : nullptr, 1, static_cast<int>(threads));
    if (!run.ok()) return run.status();
    out = std::move(run->output);
    if (step) state = std::move(run->state);
    report = std::move(run->report);
  } else {
    out = reference::EmbeddingForward(config, state, kjt, {}, static_cast<int>(threads));
    if (!out.ok()) return out.status();
    if (step) GEMTB_RETURN_IF_ERROR(reference::EmbeddingBackwardStep(config, state, kjt, grads, {}, static_cast<int>(threads)));
  }
  if (out->pooled_width > 0) output->AddNpy("pooled.npy", F32(out->pooled, {spec->batch, out->pooled_width}));
  for (size_t s = 0; s < out->sequence.size(); ++s) {
    const int f = out->sequence_keys[s];
    const int64_t dim = config.tables[config.features[layout.feature[f]].table].dim;
    output->AddNpy(absl::StrCat("seq_", kjt.keys[f], ".npy"),
                       F32(out->sequence[s], {static_cast<int64_t>(out->sequence[s].size()) / dim, dim}));
  }
  if (step) {
    for (size_t t = 0; t < config.tables.size(); ++t) {
      const TableConfig& tc = config.tables[t];
      const TableState& ts = state.tables[t];
      output->AddNpy(absl::StrCat("table_", tc.name, ".npy"), F32(ts.weights, {tc.rows, tc.dim}, StorageNpy(tc.dtype)));
      if (tc.optimizer.kind == OptimizerKind::kRowwiseAdagrad) {
        output->AddNpy(absl::StrCat("adagrad_", tc.name, ".npy"), F32(ts.adagrad, {tc.rows}));
      }
      if (tc.optimizer.kind == OptimizerKind::kAdam) {
        output->AddNpy(absl::StrCat("adam_m_", tc.name, ".npy"), F32(ts.adam_m, {tc.rows, tc.dim}));
        output->AddNpy(absl::StrCat("adam_v_", tc.name, ".npy"), F32(ts.adam_v, {tc.rows, tc.dim}));
        output->AddNpy(absl::StrCat("adam_step_", tc.name, ".npy"), F32({ts.adam_step.b1, ts.adam_step.b2}, {2}));
      }
    }
  }
  if (report) {
    // The communication report, the file sim/ reads.
    output->AddText("comm_report.json", reference::CommReportToJson(*report).dump(2) + "\n");
  }
  return output->Commit();
}

}  // namespace

int RunRefEmbed(const std::vector<std::string>& args) {
  bool help = false;
  if (absl::Status s = Run(args, &help); !s.ok()) return ReportError(kCommand, s);
  return kExitOk;
}

}  // namespace gemtb::cli
