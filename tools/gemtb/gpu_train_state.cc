#include "tools/gemtb/gpu_train_state.h"

#include <charconv>
#include <cstring>
#include <iterator>
#include <string>

#include "absl/strings/str_cat.h"
#include "model/description/gem_geometry.h"
#include "reference/io/npy.h"
#include "reference/model/pipeline_arrays.h"
#include "tools/gemtb/train_common.h"

namespace gemtb::cli {
namespace {

using reference::model::NamedArrays;

// The "options" entries by name, in the oracle's order.
constexpr const char* kOptionNames[] = {"seed",         "data_seed",   "batch",       "lr",   "table_lr",
                                        "beta1",        "beta2",       "eps",         "grad_blocks",
                                        "linear_decay", "table_decay", "total_steps", "parameter count"};
constexpr size_t kGradBlocks = 8;

// A saved value as the flag gave it: the learning rates are fp32, so 1e-3f prints 0.001.
std::string OptionText(double v) {
  const float f = static_cast<float>(v);
  if (static_cast<double>(f) != v) return Exact(v);
  char buf[64];
  return std::string(buf, std::to_chars(buf, buf + sizeof(buf), f).ptr);
}

const io::NpyArray* Find(const NamedArrays& arrays, const std::string& name) {
  for (const auto& [n, a] : arrays)
    if (n == name) return &a;
  return nullptr;
}

// The array `name` with `dtype` and `shape`, or FailedPrecondition naming it and what it is.
absl::StatusOr<const io::NpyArray*> Expect(const NamedArrays& arrays, const std::string& name, io::NpyDType dtype,
                                           const std::vector<int64_t>& shape) {
  const io::NpyArray* a = Find(arrays, name);
  if (a == nullptr) return absl::FailedPreconditionError(absl::StrCat("state: array '", name, "' is missing"));
  if (a->dtype != dtype || a->shape != shape)
    return absl::FailedPreconditionError(absl::StrCat("state: array '", name, "' is ", io::NpyDTypeName(a->dtype), " ",
                                                      io::ShapeString(a->shape), ", this model's is ",
                                                      io::NpyDTypeName(dtype), " ", io::ShapeString(shape)));
  return a;
}

absl::StatusOr<std::vector<float>> Floats(const NamedArrays& arrays, const std::string& name,
                                          const std::vector<int64_t>& shape) {
  absl::StatusOr<const io::NpyArray*> a = Expect(arrays, name, io::NpyDType::kFloat32, shape);
  if (!a.ok()) return a.status();
  std::vector<float> v((*a)->data.size() / sizeof(float));
  std::memcpy(v.data(), (*a)->data.data(), v.size() * sizeof(float));
  return v;
}

absl::StatusOr<int64_t> OneInt(const NamedArrays& arrays, const std::string& name) {
  absl::StatusOr<const io::NpyArray*> a = Expect(arrays, name, io::NpyDType::kInt64, {1});
  if (!a.ok()) return a.status();
  absl::StatusOr<std::vector<int64_t>> v = io::DecodeInt(**a, name);
  if (!v.ok()) return absl::FailedPreconditionError(v.status().message());
  if (v->at(0) < 0) return absl::FailedPreconditionError(absl::StrCat("state: ", name, " ", v->at(0), " is negative"));
  return v->at(0);
}

// Names the trainer whose checkpoint it is when not the GPU's, else the first option that differs.
absl::Status CompareOptions(const NamedArrays& arrays, const std::vector<double>& mine) {
  const io::NpyArray* a = Find(arrays, "options");
  if (a == nullptr) return absl::FailedPreconditionError("state: array 'options' is missing");
  absl::StatusOr<std::vector<double>> saved = io::DecodeFloat(*a, "state.options");
  if (!saved.ok()) return absl::FailedPreconditionError(saved.status().message());
  if (saved->size() != mine.size())
    return absl::FailedPreconditionError(absl::StrCat("state.options: ", saved->size(), " entries, this version keeps ",
                                                      mine.size(), " (a checkpoint of another gemtb version)"));
  if ((*saved)[kGradBlocks] != 0)
    return absl::FailedPreconditionError(absl::StrCat(
        "state.options: grad_blocks ", OptionText((*saved)[kGradBlocks]),
        ": a checkpoint of the CPU oracle's trainer (gemtb ref train), whose steps sum in other blocks; gemtb "
        "train resumes only the GPU trainer's checkpoints (grad_blocks 0)"));
  for (size_t i = 0; i < mine.size(); ++i) {
    // Bit comparison: the options are stored as the fp64 of what was used, so equal runs match exactly.
    if (std::memcmp(&(*saved)[i], &mine[i], sizeof(double)) != 0)
      return absl::FailedPreconditionError(absl::StrCat(
          "state.options: ", i < std::size(kOptionNames) ? kOptionNames[i] : absl::StrCat("entry ", i).c_str(),
          " differs: the checkpoint has ", OptionText((*saved)[i]), ", this run ", OptionText(mine[i]),
          " (resume needs the options it was made with)"));
  }
  return absl::OkStatus();
}

// "table.<name>.shard<k>", with ".replica<r>" in a 2D plan.
std::string ShardArrayName(const EmbeddingConfig& emb, const GpuShardKey& k) {
  std::string name = absl::StrCat("table.", emb.tables[static_cast<size_t>(k.table)].name, ".shard", k.shard);
  if (k.replica >= 0) absl::StrAppend(&name, ".replica", k.replica);
  return name;
}

}  // namespace

std::vector<double> GpuTrainOptionsEntries(const gpu::train::TrainerOptions& o, int64_t num_params) {
  return {static_cast<double>(o.seed), static_cast<double>(o.data_seed), static_cast<double>(o.batch),
          o.lr, o.table_lr, o.beta1, o.beta2, o.eps, /*grad_blocks=*/0.0, o.linear_decay ? 1.0 : 0.0, o.table_decay,
          static_cast<double>(o.total_steps), static_cast<double>(num_params)};
}

NamedArrays GpuStateArrays(const gemtb::model::ModelConfig& config, const gpu::train::TrainerOptions& options,
                           const gpu::train::TrainerState& state) {
  const int64_t P = static_cast<int64_t>(state.params.size());
  const std::vector<double> opts = GpuTrainOptionsEntries(options, P);
  NamedArrays out;
  out.emplace_back("step", io::EncodeInt64(std::vector<int64_t>{state.step}, {1}));
  out.emplace_back("options", io::EncodeFloat(opts, {static_cast<int64_t>(opts.size())}, io::NpyDType::kFloat64));
  out.emplace_back("params", io::EncodeFloat32(state.params, {P}));
  out.emplace_back("adam.m", io::EncodeFloat32(state.adam_m, {P}));
  out.emplace_back("adam.v", io::EncodeFloat32(state.adam_v, {P}));
  out.emplace_back("adam.bias_products", io::EncodeFloat32({state.adam_b1, state.adam_b2}, {2}));
  out.emplace_back("tables.step", io::EncodeInt64(std::vector<int64_t>{state.step}, {1}));
  const EmbeddingConfig emb = gemtb::model::GemEmbeddingConfig(config, options.table_lr, options.seed);
  for (size_t t = 0; t < emb.tables.size() && t < state.tables.size(); ++t) {
    const TableConfig& tc = emb.tables[t];
    out.emplace_back(absl::StrCat("table.", tc.name, ".weights"), io::EncodeFloat32(state.tables[t].weights, {tc.rows, tc.dim}));
    out.emplace_back(absl::StrCat("table.", tc.name, ".adagrad"), io::EncodeFloat32(state.tables[t].adagrad, {tc.rows}));
  }
  // The semi-synchronous pipeline's pending lookups, as the oracle's trainer writes them.
  if (!state.pipeline_pooled.empty())
    reference::model::AppendPipelineArrays(emb, options.batch, {state.pipeline_pooled, state.pipeline_sequence}, &out);
  return out;
}

NamedArrays GpuShardArrays(const gemtb::model::ModelConfig& config, const gpu::train::TrainerOptions& options,
                           const gpu::train::TrainerState& state, const std::vector<GpuShardKey>& keys) {
  const EmbeddingConfig emb = gemtb::model::GemEmbeddingConfig(config, options.table_lr, options.seed);
  NamedArrays out;
  for (size_t i = 0; i < keys.size() && i < state.table_shards.size(); ++i) {
    const GpuShardKey& k = keys[i];
    const std::string name = ShardArrayName(emb, k);
    out.emplace_back(name + ".weights", io::EncodeFloat32(state.table_shards[i].weights, {k.rows, k.cols}));
    out.emplace_back(name + ".adagrad", io::EncodeFloat32(state.table_shards[i].adagrad, {k.rows}));
  }
  return out;
}

NamedArrays GpuRankArrays(const gemtb::model::ModelConfig& config, const gpu::train::TrainerOptions& options, int rank,
                          const gpu::train::TrainerRankState& state, const std::vector<GpuShardKey>& keys) {
  NamedArrays out;
  if (rank == 0) {
    const int64_t P = gemtb::model::MakeGemGeometry(config).value().layout.total();
    const std::vector<double> opts = GpuTrainOptionsEntries(options, P);
    out.emplace_back("step", io::EncodeInt64(std::vector<int64_t>{state.step}, {1}));
    out.emplace_back("options", io::EncodeFloat(opts, {static_cast<int64_t>(opts.size())}, io::NpyDType::kFloat64));
    out.emplace_back("adam.bias_products", io::EncodeFloat32({state.adam_b1, state.adam_b2}, {2}));
    out.emplace_back("tables.step", io::EncodeInt64(std::vector<int64_t>{state.step}, {1}));
  }
  if (state.dense_part >= 0) {
    const int64_t n = static_cast<int64_t>(state.params.size());
    out.emplace_back(absl::StrCat("params.part", state.dense_part), io::EncodeFloat32(state.params, {n}));
    out.emplace_back(absl::StrCat("adam.m.part", state.dense_part), io::EncodeFloat32(state.adam_m, {n}));
    out.emplace_back(absl::StrCat("adam.v.part", state.dense_part), io::EncodeFloat32(state.adam_v, {n}));
  }
  const EmbeddingConfig emb = gemtb::model::GemEmbeddingConfig(config, options.table_lr, options.seed);
  for (size_t i = 0; i < state.table_index.size(); ++i) {
    const TableConfig& tc = emb.tables[static_cast<size_t>(state.table_index[i])];
    out.emplace_back(absl::StrCat("table.", tc.name, ".weights"), io::EncodeFloat32(state.tables[i].weights, {tc.rows, tc.dim}));
    out.emplace_back(absl::StrCat("table.", tc.name, ".adagrad"), io::EncodeFloat32(state.tables[i].adagrad, {tc.rows}));
  }
  gpu::train::TrainerState shards;
  shards.table_shards = state.table_shards;
  NamedArrays mine = GpuShardArrays(config, options, shards, keys);
  out.insert(out.end(), std::make_move_iterator(mine.begin()), std::make_move_iterator(mine.end()));
  return out;
}

namespace {

// A dense array whole, or from a job's parts "<name>.part0", "<name>.part1", ... (P values together).
absl::StatusOr<std::vector<float>> DenseArray(const NamedArrays& arrays, const std::string& name, int64_t P) {
  if (Find(arrays, name) != nullptr || Find(arrays, name + ".part0") == nullptr) return Floats(arrays, name, {P});
  std::vector<float> whole;
  for (int q = 0; static_cast<int64_t>(whole.size()) < P; ++q) {
    const std::string part = absl::StrCat(name, ".part", q);
    const io::NpyArray* a = Find(arrays, part);
    if (a == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("state: array '", part, "' is missing (the parts so far hold ",
                                                        whole.size(), " of ", P, " values)"));
    }
    absl::StatusOr<std::vector<float>> v = Floats(arrays, part, a->shape);
    if (!v.ok()) return v.status();
    if (a->shape.size() != 1 || v->empty()) {
      return absl::FailedPreconditionError(absl::StrCat("state: array '", part, "' is ", io::ShapeString(a->shape),
                                                        ", a dense part is a non-empty float32 vector"));
    }
    whole.insert(whole.end(), v->begin(), v->end());
  }
  if (static_cast<int64_t>(whole.size()) != P) {
    return absl::FailedPreconditionError(absl::StrCat("state: the parts of '", name, "' hold ", whole.size(),
                                                      " values, this model's is ", P));
  }
  return whole;
}

}  // namespace

absl::StatusOr<gpu::train::TrainerState> GpuStateFromArrays(const gemtb::model::ModelConfig& config,
                                                            const gpu::train::TrainerOptions& options,
                                                            const NamedArrays& arrays,
                                                            const std::optional<std::vector<GpuShardKey>>& shards) {
  absl::StatusOr<gemtb::model::GemGeometry> geometry = gemtb::model::MakeGemGeometry(config);
  if (!geometry.ok()) return geometry.status();
  const int64_t P = geometry->layout.total();
  if (absl::Status s = CompareOptions(arrays, GpuTrainOptionsEntries(options, P)); !s.ok()) return s;
  gpu::train::TrainerState state;
  absl::StatusOr<int64_t> step = OneInt(arrays, "step");
  if (!step.ok()) return step.status();
  absl::StatusOr<int64_t> table_step = OneInt(arrays, "tables.step");
  if (!table_step.ok()) return table_step.status();
  if (*table_step != *step)
    return absl::FailedPreconditionError(absl::StrCat("state: tables.step ", *table_step, " is not step ", *step,
                                                      " (the GPU trainer's tables step with every training step)"));
  state.step = *step;
  for (auto [name, dst] : {std::pair{"params", &state.params}, {"adam.m", &state.adam_m}, {"adam.v", &state.adam_v}}) {
    absl::StatusOr<std::vector<float>> v = DenseArray(arrays, name, P);
    if (!v.ok()) return v.status();
    *dst = *std::move(v);
  }
  absl::StatusOr<std::vector<float>> bias = Floats(arrays, "adam.bias_products", {2});
  if (!bias.ok()) return bias.status();
  state.adam_b1 = (*bias)[0];
  state.adam_b2 = (*bias)[1];
  const EmbeddingConfig emb = gemtb::model::GemEmbeddingConfig(config, options.table_lr, options.seed);
  if (shards) {
    for (const GpuShardKey& k : *shards) {
      const std::string name = ShardArrayName(emb, k);
      gpu::embedding::HostTable table;
      absl::StatusOr<std::vector<float>> w = Floats(arrays, name + ".weights", {k.rows, k.cols});
      if (!w.ok()) return w.status();
      absl::StatusOr<std::vector<float>> g = Floats(arrays, name + ".adagrad", {k.rows});
      if (!g.ok()) return g.status();
      table.weights = *std::move(w);
      table.adagrad = *std::move(g);
      state.table_shards.push_back(std::move(table));
    }
    return state;
  }
  absl::StatusOr<std::optional<reference::model::PipelineLookups>> lookups = reference::model::ReadPipelineArrays(
      arrays, emb, options.pipeline == gemtb::model::SparsePipeline::kSemiSync, state.step);
  if (!lookups.ok()) return lookups.status();
  if (*lookups) {
    state.pipeline_pooled = std::move((*lookups)->pooled);
    state.pipeline_sequence = std::move((*lookups)->sequence);
  }
  for (const TableConfig& tc : emb.tables) {
    gpu::embedding::HostTable table;
    absl::StatusOr<std::vector<float>> w = Floats(arrays, absl::StrCat("table.", tc.name, ".weights"), {tc.rows, tc.dim});
    if (!w.ok()) return w.status();
    absl::StatusOr<std::vector<float>> g = Floats(arrays, absl::StrCat("table.", tc.name, ".adagrad"), {tc.rows});
    if (!g.ok()) return g.status();
    table.weights = *std::move(w);
    table.adagrad = *std::move(g);
    state.tables.push_back(std::move(table));
  }
  return state;
}

}  // namespace gemtb::cli
