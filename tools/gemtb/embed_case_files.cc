#include "tools/gemtb/embed_case_files.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "reference/embedding/embedding_json.h"
#include "reference/embedding/embedding_npy.h"
#include "reference/io/npy.h"
#include "tools/gemtb/command.h"

namespace gemtb::cli {
namespace {

namespace fs = std::filesystem;
using reference::FloatNpyArray;
using reference::TableNpyDType;

absl::Status Bad(const std::string& m) { return absl::InvalidArgumentError(m); }

absl::StatusOr<io::NpyArray> Read(const std::string& path, const std::string& field) {
  absl::StatusOr<io::NpyArray> a = io::ReadNpy(path);
  if (!a.ok()) return Bad(absl::StrCat(field, ": ", a.status().message()));
  return a;
}

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

// The feature of KJT key f (keys are validated later; an unknown key has none).
const FeatureConfig* FeatureOf(const EmbeddingConfig& config, const std::string& key) {
  for (const FeatureConfig& f : config.features) {
    if (f.key == key) return &f;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<check::EmbedCase> ReadEmbedCaseFiles(const EmbedCasePaths& paths, int64_t step_index) {
  absl::StatusOr<reference::EmbeddingSpec> spec = reference::ReadEmbeddingSpec(paths.spec);
  if (!spec.ok()) return spec.status();
  if (spec->plan) return Bad(absl::StrCat(paths.spec, ": \"plan\": sharded runs are the oracle's (gemtb ref embed)"));
  return ReadEmbedCaseInputs(*spec, paths, step_index);
}

absl::StatusOr<check::EmbedCase> ReadEmbedCaseInputs(const reference::EmbeddingSpec& spec,
                                                     const EmbedCasePaths& paths, int64_t step_index) {
  check::EmbedCase c;
  c.config = spec.config;
  c.kjt.keys = spec.keys;
  c.kjt.stride = spec.batch;
  {
    absl::StatusOr<io::NpyArray> a = Read(paths.lengths, "lengths");
    if (!a.ok()) return a.status();
    if (a->shape.size() != 1) return Bad(absl::StrCat("lengths: shape ", io::ShapeString(a->shape), ", expected [F*B]"));
    absl::StatusOr<std::vector<int64_t>> l = io::DecodeInt(*a, "lengths");
    if (!l.ok()) return l.status();
    for (size_t i = 0; i < l->size(); ++i) {
      if ((*l)[i] > INT32_MAX || (*l)[i] < INT32_MIN) return Bad(absl::StrCat("lengths[", i, "]=", (*l)[i], " exceeds int32"));
      c.kjt.lengths.push_back(static_cast<int32_t>((*l)[i]));
    }
  }
  {
    absl::StatusOr<io::NpyArray> a = Read(paths.ids, "ids");
    if (!a.ok()) return a.status();
    if (a->dtype != io::NpyDType::kInt64 || a->shape.size() != 1) {
      return Bad(absl::StrCat("ids: ", io::NpyDTypeName(a->dtype), " ", io::ShapeString(a->shape), ", expected int64 [N]"));
    }
    absl::StatusOr<std::vector<int64_t>> v = io::DecodeInt(*a, "ids");
    if (!v.ok()) return v.status();
    c.kjt.values = *std::move(v);
  }
  if (!paths.weights.empty()) {
    absl::StatusOr<std::vector<float>> w =
        ReadF32(paths.weights, "weights", {static_cast<int64_t>(c.kjt.values.size())});
    if (!w.ok()) return w.status();
    c.kjt.weights = *std::move(w);
    c.kjt.has_weights = true;
  }
  if (!paths.offsets.empty()) {
    absl::StatusOr<io::NpyArray> a = Read(paths.offsets, "offsets");
    if (!a.ok()) return a.status();
    if (a->dtype != io::NpyDType::kInt64) return Bad("offsets: expected int64 (<i8)");
    absl::StatusOr<std::vector<int64_t>> o = io::DecodeInt(*a, "offsets");
    if (!o.ok()) return o.status();
    c.kjt.offsets = *std::move(o);
  }
  c.state = reference::InitEmbeddingState(c.config);
  c.state.step = step_index;
  if (!paths.tables.empty()) {
    const fs::path dir(paths.tables);
    for (size_t t = 0; t < c.config.tables.size(); ++t) {
      const TableConfig& tc = c.config.tables[t];
      reference::TableState& ts = c.state.tables[t];
      const std::string path = (dir / absl::StrCat("table_", tc.name, ".npy")).string();
      absl::StatusOr<io::NpyArray> a = Read(path, absl::StrCat("table '", tc.name, "'"));
      if (!a.ok()) return a.status();
      if (a->dtype != TableNpyDType(tc.dtype) || a->shape != std::vector<int64_t>{tc.rows, tc.dim}) {
        return Bad(absl::StrCat(path, ": ", io::NpyDTypeName(a->dtype), " ", io::ShapeString(a->shape), ", expected ",
                                io::NpyDTypeName(TableNpyDType(tc.dtype)), " [", tc.rows, ", ", tc.dim, "]"));
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
  return c;
}

absl::Status ReadEmbedGrads(const std::string& dir, check::EmbedCase& c) {
  int64_t width = 0;
  for (size_t f = 0; f < c.kjt.keys.size(); ++f) {
    int64_t n = 0;
    for (int64_t b = 0; b < c.kjt.stride; ++b) n += c.kjt.lengths[f * c.kjt.stride + b];
    const FeatureConfig* fc = FeatureOf(c.config, c.kjt.keys[f]);
    const int64_t dim = c.config.tables[fc->table].dim;
    if (fc->pooling != Pooling::kNone) {
      width += dim;
      continue;
    }
    const std::string name = absl::StrCat("seq_", c.kjt.keys[f], ".npy");
    absl::StatusOr<std::vector<float>> g = ReadF32((fs::path(dir) / name).string(), absl::StrCat("grads/", name), {n, dim});
    if (!g.ok()) return g.status();
    c.grads.sequence.push_back(*std::move(g));
  }
  if (width > 0) {
    absl::StatusOr<std::vector<float>> g =
        ReadF32((fs::path(dir) / "pooled.npy").string(), "grads/pooled.npy", {c.kjt.stride, width});
    if (!g.ok()) return g.status();
    c.grads.pooled = *std::move(g);
  }
  return absl::OkStatus();
}

absl::Status WriteEmbedOutputs(const check::EmbedCase& c, const reference::EmbeddingOutput& output,
                               const reference::EmbeddingState* after, OutputSet& out) {
  const EmbeddingConfig& config = c.config;
  std::vector<std::pair<std::string, io::NpyArray>> files;
  if (output.pooled_width > 0) {
    files.emplace_back("pooled.npy", FloatNpyArray(output.pooled, {c.kjt.stride, output.pooled_width}));
  }
  for (size_t s = 0; s < output.sequence.size(); ++s) {
    const std::string& key = c.kjt.keys[output.sequence_keys[s]];
    const int64_t dim = config.tables[FeatureOf(config, key)->table].dim;
    files.emplace_back(absl::StrCat("seq_", key, ".npy"),
                       FloatNpyArray(output.sequence[s], {static_cast<int64_t>(output.sequence[s].size()) / dim, dim}));
  }
  if (after != nullptr) {
    for (size_t t = 0; t < config.tables.size(); ++t) {
      const TableConfig& tc = config.tables[t];
      const reference::TableState& ts = after->tables[t];
      files.emplace_back(absl::StrCat("table_", tc.name, ".npy"),
                         FloatNpyArray(ts.weights, {tc.rows, tc.dim}, TableNpyDType(tc.dtype)));
      if (tc.optimizer.kind == OptimizerKind::kRowwiseAdagrad) {
        files.emplace_back(absl::StrCat("adagrad_", tc.name, ".npy"), FloatNpyArray(ts.adagrad, {tc.rows}));
      }
      if (tc.optimizer.kind == OptimizerKind::kAdam) {
        files.emplace_back(absl::StrCat("adam_m_", tc.name, ".npy"), FloatNpyArray(ts.adam_m, {tc.rows, tc.dim}));
        files.emplace_back(absl::StrCat("adam_v_", tc.name, ".npy"), FloatNpyArray(ts.adam_v, {tc.rows, tc.dim}));
        files.emplace_back(absl::StrCat("adam_step_", tc.name, ".npy"),
                           FloatNpyArray({ts.adam_step.b1, ts.adam_step.b2}, {2}));
      }
    }
  }
  for (const auto& [name, array] : files) out.AddNpy(name, array);
  return out.Commit();
}

}  // namespace gemtb::cli
