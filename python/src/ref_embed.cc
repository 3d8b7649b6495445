// gemtb.ref.embed: the table-batched embedding oracle on in-memory arrays, as `gemtb ref embed` runs
// it on files: the same module spec, KJT checks, initial state (given or Philox), forward, fused
// optimizer step, sharded executor and output encodings. Arrays are keyed by the CLI's file names
// without ".npy" (tables: table_<name>, adagrad_<name>, adam_m_/adam_v_/adam_step_<name>; grads:
// pooled, seq_<key>).
#include <optional>
#include <set>


#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "model/common/status_macros.h"
#include "model/sharding/sharding_plan_json.h"
#include "nlohmann/json.hpp"
#include "python/src/arrays.h"
#include "reference/embedding/embedding_json.h"
#include "reference/embedding/embedding_npy.h"
#include "reference/embedding/tbe.h"
#include "reference/sharding/sharded_executor.h"

namespace gemtb::python {
namespace {

using reference::FloatNpyArray;
using reference::TableNpyDType;

absl::Status Bad(const std::string& m) { return absl::InvalidArgumentError(m); }

// An array of `dtype` and `shape`, decoded; the error names the argument and key.
absl::StatusOr<std::vector<double>> Read(const std::string& field, const Wire& wire, io::NpyDType dtype,
                                         const std::vector<int64_t>& shape) {
  absl::StatusOr<io::NpyArray> a = ToNpy(field, wire);
  if (!a.ok()) return a.status();
  if (a->dtype != dtype || a->shape != shape) {
    return Bad(absl::StrCat(field, ": ", io::NpyDTypeName(a->dtype), " ", io::ShapeString(a->shape), ", expected ",
                            io::NpyDTypeName(dtype), " ", io::ShapeString(shape)));
  }
  return io::DecodeFloat(*a, field);
}

absl::StatusOr<std::vector<float>> ReadF32(const std::string& field, const Wire& wire, const std::vector<int64_t>& shape) {
  absl::StatusOr<std::vector<double>> d = Read(field, wire, io::NpyDType::kFloat32, shape);
  if (!d.ok()) return d.status();
  return std::vector<float>(d->begin(), d->end());
}

absl::StatusOr<std::vector<int64_t>> ReadInts(const std::string& field, const Wire& wire, bool int64_only) {
  absl::StatusOr<io::NpyArray> a = ToNpy(field, wire);
  if (!a.ok()) return a.status();
  if (a->shape.size() != 1 || (int64_only && a->dtype != io::NpyDType::kInt64)) {
    return Bad(absl::StrCat(field, ": ", io::NpyDTypeName(a->dtype), " ", io::ShapeString(a->shape), ", expected ",
                            int64_only ? "int64" : "int32 or int64", " [N]"));
  }
  return io::DecodeInt(*a, field);
}

struct EmbedArgs {
  std::string spec_json;
  const Wire* lengths;
  const Wire* ids;
  std::optional<Wire> weights, offsets;
  WireMap tables, grads;
  bool step;
  int64_t step_index;
  int threads;
};

absl::Status Run(const EmbedArgs& a, std::map<std::string, io::NpyArray>& outputs, std::string& comm_report) {
  const nlohmann::json j = nlohmann::json::parse(a.spec_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad("spec: not valid JSON");
  absl::StatusOr<reference::EmbeddingSpec> spec = reference::ParseEmbeddingSpec(j);
  if (!spec.ok()) return Bad(absl::StrCat("spec: ", spec.status().message()));
  const EmbeddingConfig& config = spec->config;
  std::optional<ShardingPlanSpec> plan;
  if (spec->plan) {
    absl::StatusOr<ShardingPlanSpec> parsed =
        ParseShardingPlan(*spec->plan, PlanTablesOf(config), spec->world_size, spec->gpus_per_host);
    if (!parsed.ok()) return Bad(absl::StrCat("spec: ", parsed.status().message()));
    plan = *std::move(parsed);
  }
  reference::KeyedJaggedTensor kjt;
  kjt.keys = spec->keys;
  kjt.stride = spec->batch;
  absl::StatusOr<std::vector<int64_t>> lengths = ReadInts("lengths", *a.lengths, false);
  if (!lengths.ok()) return lengths.status();
  for (size_t i = 0; i < lengths->size(); ++i) {
    if ((*lengths)[i] > INT32_MAX || (*lengths)[i] < INT32_MIN) {
      return Bad(absl::StrCat("lengths[", i, "]=", (*lengths)[i], " exceeds int32"));
    }
    kjt.lengths.push_back(static_cast<int32_t>((*lengths)[i]));
  }
  absl::StatusOr<std::vector<int64_t>> ids = ReadInts("ids", *a.ids, true);
  if (!ids.ok()) return ids.status();
  kjt.values = *std::move(ids);
  if (a.weights) {
    absl::StatusOr<std::vector<float>> w = ReadF32("weights", *a.weights, {static_cast<int64_t>(kjt.values.size())});
    if (!w.ok()) return w.status();
    kjt.weights = *std::move(w);
    kjt.has_weights = true;
  }
  if (a.offsets) {
    absl::StatusOr<std::vector<int64_t>> o = ReadInts("offsets", *a.offsets, true);
    if (!o.ok()) return o.status();
    kjt.offsets = *std::move(o);
  }
  reference::KjtLayout layout;
  if (absl::Status valid = reference::ValidateKjt(kjt, config, &layout); !valid.ok()) {
    // The KJT names the ids TorchRec's way, `values`; the message names the argument.
    return absl::Status(valid.code(), absl::StrReplaceAll(valid.message(), {{"|values|", "|ids|"}, {"values[", "ids["}}));
  }

  reference::EmbeddingState state = reference::InitEmbeddingState(config);
  state.step = a.step_index;
  std::set<std::string> known;
  if (!a.tables.empty()) {
    for (size_t t = 0; t < config.tables.size(); ++t) {
      const TableConfig& tc = config.tables[t];
      reference::TableState& ts = state.tables[t];
      const std::string name = absl::StrCat("table_", tc.name);
      known.insert(name);
      auto it = a.tables.find(name);
      if (it == a.tables.end()) return Bad(absl::StrCat("tables: no '", name, "'"));
      absl::StatusOr<std::vector<double>> w =
          Read(absl::StrCat("tables['", name, "']"), it->second, TableNpyDType(tc.dtype), {tc.rows, tc.dim});
      if (!w.ok()) return w.status();
      ts.weights.assign(w->begin(), w->end());
      auto optional_state = [&](const std::string& key, std::vector<float>& dst, std::vector<int64_t> shape) -> absl::Status {
        known.insert(key);
        auto found = a.tables.find(key);
        if (found == a.tables.end()) return absl::OkStatus();
        absl::StatusOr<std::vector<float>> v = ReadF32(absl::StrCat("tables['", key, "']"), found->second, shape);
        if (!v.ok()) return v.status();
        dst = *std::move(v);
        return absl::OkStatus();
      };
      if (tc.optimizer.kind == OptimizerKind::kRowwiseAdagrad) {
        GEMTB_RETURN_IF_ERROR(optional_state(absl::StrCat("adagrad_", tc.name), ts.adagrad, {tc.rows}));
      }
      if (tc.optimizer.kind == OptimizerKind::kAdam) {
        GEMTB_RETURN_IF_ERROR(optional_state(absl::StrCat("adam_m_", tc.name), ts.adam_m, {tc.rows, tc.dim}));
        GEMTB_RETURN_IF_ERROR(optional_state(absl::StrCat("adam_v_", tc.name), ts.adam_v, {tc.rows, tc.dim}));
        std::vector<float> b = {1.0f, 1.0f};
        GEMTB_RETURN_IF_ERROR(optional_state(absl::StrCat("adam_step_", tc.name), b, {2}));
        ts.adam_step = {b[0], b[1]};
      }
    }
    for (const auto& [key, wire] : a.tables) {
      if (!known.contains(key)) return Bad(absl::StrCat("tables['", key, "']: not a table or state of this spec"));
    }
  }

  reference::EmbeddingGrads grads;
  if (a.step) {
    int64_t width = 0;
    for (size_t f = 0; f < kjt.keys.size(); ++f) {
      const FeatureConfig& fc = config.features[layout.feature[f]];
      const int64_t dim = config.tables[fc.table].dim;
      if (fc.pooling != Pooling::kNone) {
        width += dim;
        continue;
      }
      const std::string key = absl::StrCat("seq_", kjt.keys[f]);
      auto it = a.grads.find(key);
      if (it == a.grads.end()) return Bad(absl::StrCat("grads: no '", key, "'"));
      const int64_t rows = layout.offsets[(f + 1) * spec->batch] - layout.offsets[f * spec->batch];
      absl::StatusOr<std::vector<float>> g = ReadF32(absl::StrCat("grads['", key, "']"), it->second, {rows, dim});
      if (!g.ok()) return g.status();
      grads.sequence.push_back(*std::move(g));
    }
    if (width > 0) {
      auto it = a.grads.find("pooled");
      if (it == a.grads.end()) return Bad("grads: no 'pooled'");
      absl::StatusOr<std::vector<float>> g = ReadF32("grads['pooled']", it->second, {spec->batch, width});
      if (!g.ok()) return g.status();
      grads.pooled = *std::move(g);
    }
  }
  absl::StatusOr<reference::EmbeddingOutput> out;
  if (plan) {
    absl::StatusOr<reference::ShardedRun> run =
        reference::RunSharded(config, *plan, spec->world_size, spec->gpus_per_host, state, kjt,
                              a.step ? &grads : nullptr, 1, a.threads);
    if (!run.ok()) return run.status();
    out = std::move(run->output);
    if (a.step) state = std::move(run->state);
    comm_report = reference::CommReportToJson(run->report).dump(2) + "\n";
  } else {
    out = reference::EmbeddingForward(config, state, kjt, {}, a.threads);
    if (!out.ok()) return out.status();
    if (a.step) GEMTB_RETURN_IF_ERROR(reference::EmbeddingBackwardStep(config, state, kjt, grads, {}, a.threads));
  }
  if (out->pooled_width > 0) outputs["pooled"] = FloatNpyArray(out->pooled, {spec->batch, out->pooled_width});
  for (size_t s = 0; s < out->sequence.size(); ++s) {
    const int f = out->sequence_keys[s];
    const int64_t dim = config.tables[config.features[layout.feature[f]].table].dim;
    outputs[absl::StrCat("seq_", kjt.keys[f])] =
        FloatNpyArray(out->sequence[s], {static_cast<int64_t>(out->sequence[s].size()) / dim, dim});
  }
  if (a.step) {
    for (size_t t = 0; t < config.tables.size(); ++t) {
      const TableConfig& tc = config.tables[t];
      const reference::TableState& ts = state.tables[t];
      outputs[absl::StrCat("table_", tc.name)] = FloatNpyArray(ts.weights, {tc.rows, tc.dim}, TableNpyDType(tc.dtype));
      if (tc.optimizer.kind == OptimizerKind::kRowwiseAdagrad) {
        outputs[absl::StrCat("adagrad_", tc.name)] = FloatNpyArray(ts.adagrad, {tc.rows});
      }
      if (tc.optimizer.kind == OptimizerKind::kAdam) {
        outputs[absl::StrCat("adam_m_", tc.name)] = FloatNpyArray(ts.adam_m, {tc.rows, tc.dim});
        outputs[absl::StrCat("adam_v_", tc.name)] = FloatNpyArray(ts.adam_v, {tc.rows, tc.dim});
        outputs[absl::StrCat("adam_step_", tc.name)] = FloatNpyArray({ts.adam_step.b1, ts.adam_step.b2}, {2});
      }
    }
  }
  return absl::OkStatus();
}

nb::dict Embed(const EmbedArgs& a) {
  if (a.step && a.grads.empty()) Raise(Bad("grads: the step needs upstream gradients"));
  if (a.threads < 0 || a.threads > 4096) Raise(Bad(absl::StrCat("threads=", a.threads, ": want 0..4096")));
  if (a.step_index < 0) Raise(Bad(absl::StrCat("step_index=", a.step_index, ": must be >= 0")));
  std::map<std::string, io::NpyArray> outputs;
  std::string comm_report;
  absl::Status status;
  {
    nb::gil_scoped_release release;
    status = Run(a, outputs, comm_report);
  }
  Check(status);
  nb::dict result;
  for (auto& [name, array] : outputs) result[name.c_str()] = FromNpy(std::move(array));
  if (!comm_report.empty()) result["comm_report"] = comm_report;
  return result;
}

}  // namespace

void BindEmbed(nb::module_& m) {
  m.def(
      "embed",
      [](std::string spec_json, const Wire& lengths, const Wire& ids, std::optional<Wire> weights,
         std::optional<Wire> offsets, WireMap tables, WireMap grads, bool step, int64_t step_index, int threads) {
        return Embed({.spec_json = spec_json, .lengths = &lengths, .ids = &ids, .weights = std::move(weights),
                      .offsets = std::move(offsets), .tables = std::move(tables), .grads = std::move(grads),
                      .step = step, .step_index = step_index, .threads = threads});
      },
      nb::arg("spec_json"), nb::arg("lengths"), nb::arg("ids"), nb::arg("weights").none(),
      nb::arg("offsets").none(), nb::arg("tables"), nb::arg("grads"), nb::arg("step"), nb::arg("step_index"),
      nb::arg("threads"));
}

}  // namespace gemtb::python
