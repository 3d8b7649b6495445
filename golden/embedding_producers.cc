// Golden vectors of the embedding oracle: forward pooling of
// every kind and one fused optimizer step per optimizer, decay mode and storage dtype, plus the
// hashing and bounds rules, and one run sharded over virtual ranks. Each folder is a `gemtb ref embed` run:
//   gemtb ref embed --spec spec.json --lengths lengths.npy --ids ids.npy [--weights weights.npy]
//                   [--grads grads --step --step-index S] --out-dir out
// with the inputs next to spec.json and the oracle's outputs under out/ (the names that command writes).
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "model/sharding/sharding_plan_json.h"
#include "reference/collectives/comm_report.h"
#include "reference/embedding/embedding_json.h"
#include "reference/embedding/embedding_npy.h"
#include "reference/embedding/tbe.h"
#include "reference/sharding/sharded_executor.h"
#include "golden/inputs.h"
#include "golden/params.h"
#include "golden/registry.h"

namespace gemtb::golden {
namespace {

using nlohmann::json;
using reference::FloatNpyArray;
using reference::TableNpyDType;

// Value streams of the generated KJT and gradients (Philox streams under the case's input seed).
constexpr uint64_t kLengthStream = 1, kWeightStream = 2, kPooledGradStream = 3;
constexpr uint64_t kIdStreamBase = 100, kSeqGradStreamBase = 200;

std::vector<float> BellFloats(uint64_t seed, uint64_t stream, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    v[i] = static_cast<float>(golden::RoundTo(golden::Bell(seed, stream, static_cast<uint64_t>(i)), ElementType::kFloat32));
  }
  return v;
}

// out/pooled.npy [B, W] and out/seq_<key>.npy per sequence feature, as `gemtb ref embed` writes them.
void AddForwardOutputs(const EmbeddingConfig& config, const reference::KeyedJaggedTensor& kjt,
                       const reference::KjtLayout& layout, int64_t batch, const reference::EmbeddingOutput& out,
                       std::vector<GoldenFile>& files) {
  if (out.pooled_width > 0) {
    files.push_back(OutputFile("out/pooled.npy", FloatNpyArray(out.pooled, {batch, out.pooled_width})));
  }
  for (size_t q = 0; q < out.sequence.size(); ++q) {
    const int f = out.sequence_keys[q];
    const int64_t dim = config.tables[config.features[layout.feature[f]].table].dim;
    files.push_back(OutputFile(absl::StrCat("out/seq_", kjt.keys[f], ".npy"),
                               FloatNpyArray(out.sequence[q], {static_cast<int64_t>(out.sequence[q].size()) / dim, dim})));
  }
}

absl::StatusOr<std::vector<GoldenFile>> Run(const json& j) {
  const golden::Params p(j);
  if (!p.Has("spec")) return absl::InvalidArgumentError("params.spec: required");
  absl::StatusOr<reference::EmbeddingSpec> spec = reference::ParseEmbeddingSpec(j["spec"]);
  if (!spec.ok()) return spec.status();
  const EmbeddingConfig& config = spec->config;
  int64_t input_seed = 1, max_len = 4, step_index = 0;
  bool step = false;
  GEMTB_RETURN_IF_ERROR(p.Int("input_seed", &input_seed));
  GEMTB_RETURN_IF_ERROR(p.Int("max_len", &max_len));
  GEMTB_RETURN_IF_ERROR(p.Int("step_index", &step_index));
  GEMTB_RETURN_IF_ERROR(p.Bool("step", &step));
  const uint64_t s = static_cast<uint64_t>(input_seed);
  const int64_t batch = spec->batch;

  // The KJT: lengths 0..max_len, ids uniform in the feature's [lo, hi) (default [0, rows)).
  reference::KeyedJaggedTensor kjt;
  kjt.keys = spec->keys;
  kjt.stride = batch;
  const int64_t num_keys = static_cast<int64_t>(kjt.keys.size());
  for (int64_t i = 0; i < num_keys * batch; ++i) {
    kjt.lengths.push_back(static_cast<int32_t>(golden::UniformInt(s, kLengthStream, static_cast<uint64_t>(i),
                                                                  static_cast<uint64_t>(max_len + 1))));
  }
  bool weighted = false;
  for (int64_t f = 0; f < num_keys; ++f) {
    const auto feature = std::find_if(config.features.begin(), config.features.end(),
                                      [&](const FeatureConfig& fc) { return fc.key == kjt.keys[f]; });
    if (feature == config.features.end()) return absl::InvalidArgumentError(absl::StrCat("params.spec.keys: '", kjt.keys[f], "'"));
    weighted = weighted || feature->pooling == Pooling::kWeightedSum;
    int64_t lo = 0, hi = config.tables[feature->table].rows;
    if (p.Has("id_ranges") && j["id_ranges"].contains(kjt.keys[f])) {
      const json& r = j["id_ranges"][kjt.keys[f]];
      if (!r.is_array() || r.size() != 2 || !r[0].is_number_integer() || !r[1].is_number_integer() ||
          r[0].get<int64_t>() >= r[1].get<int64_t>()) {
        return absl::InvalidArgumentError(absl::StrCat("params.id_ranges.", kjt.keys[f], ": want [lo, hi) with lo < hi"));
      }
      lo = r[0].get<int64_t>();
      hi = r[1].get<int64_t>();
    }
    int64_t count = 0;
    for (int64_t b = 0; b < batch; ++b) count += kjt.lengths[f * batch + b];
    const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
    for (int64_t i = 0; i < count; ++i) {
      kjt.values.push_back(static_cast<int64_t>(static_cast<uint64_t>(lo) +
                                                golden::UniformInt(s, kIdStreamBase + f, static_cast<uint64_t>(i), span)));
    }
  }
  if (weighted) {
    kjt.weights = BellFloats(s, kWeightStream, static_cast<int64_t>(kjt.values.size()));
    kjt.has_weights = true;
  }
  reference::KjtLayout layout;
  GEMTB_RETURN_IF_ERROR(reference::ValidateKjt(kjt, config, &layout));

  std::vector<GoldenFile> files;
  files.push_back(JsonFile("spec.json", j["spec"]));
  files.push_back(InputFile("lengths.npy", io::EncodeInt32(kjt.lengths, {static_cast<int64_t>(kjt.lengths.size())})));
  files.push_back(InputFile("ids.npy", io::EncodeInt64(kjt.values, {static_cast<int64_t>(kjt.values.size())})));
  if (weighted) {
    files.push_back(InputFile("weights.npy", FloatNpyArray(kjt.weights, {static_cast<int64_t>(kjt.weights.size())})));
  }

  reference::EmbeddingState state = reference::InitEmbeddingState(config);
  state.step = step_index;
  absl::StatusOr<reference::EmbeddingOutput> out = reference::EmbeddingForward(config, state, kjt);
  if (!out.ok()) return out.status();
  AddForwardOutputs(config, kjt, layout, batch, *out, files);
  std::vector<int64_t> seq_dims;
  for (size_t q = 0; q < out->sequence.size(); ++q) {
    seq_dims.push_back(config.tables[config.features[layout.feature[out->sequence_keys[q]]].table].dim);
  }
  if (!step) return files;

  // Upstream gradients in the forward's layout, then the fused optimizer step.
  reference::EmbeddingGrads grads;
  if (out->pooled_width > 0) {
    grads.pooled = BellFloats(s, kPooledGradStream, batch * out->pooled_width);
    files.push_back(InputFile("grads/pooled.npy", FloatNpyArray(grads.pooled, {batch, out->pooled_width})));
  }
  for (size_t q = 0; q < out->sequence.size(); ++q) {
    const int f = out->sequence_keys[q];
    grads.sequence.push_back(BellFloats(s, kSeqGradStreamBase + q, static_cast<int64_t>(out->sequence[q].size())));
    files.push_back(InputFile(absl::StrCat("grads/seq_", kjt.keys[f], ".npy"),
                              FloatNpyArray(grads.sequence.back(), {static_cast<int64_t>(out->sequence[q].size()) / seq_dims[q], seq_dims[q]})));
  }
  if (spec->plan) {
    // Sharded over virtual ranks, as `gemtb ref embed` runs a spec with a plan: the sharded forward
    // and step replace the unsharded ones, and the communication report is an output too.
    absl::StatusOr<ShardingPlanSpec> plan =
        ParseShardingPlan(*spec->plan, PlanTablesOf(config), spec->world_size, spec->gpus_per_host);
    if (!plan.ok()) return plan.status();
    absl::StatusOr<reference::ShardedRun> run = reference::RunSharded(config, *plan, spec->world_size, spec->gpus_per_host,
                                                                      state, kjt, &grads);
    if (!run.ok()) return run.status();
    out = std::move(run->output);
    state = std::move(run->state);
    files.erase(std::remove_if(files.begin(), files.end(), [](const GoldenFile& g) { return g.name.rfind("out/", 0) == 0; }),
                files.end());
    AddForwardOutputs(config, kjt, layout, batch, *out, files);
    GoldenFile report;
    report.name = "out/comm_report.json";
    report.text = reference::CommReportToJson(run->report).dump(2) + "\n";
    files.push_back(std::move(report));
  } else {
    GEMTB_RETURN_IF_ERROR(reference::EmbeddingBackwardStep(config, state, kjt, grads));
  }
  for (size_t t = 0; t < config.tables.size(); ++t) {
    const TableConfig& tc = config.tables[t];
    const reference::TableState& ts = state.tables[t];
    files.push_back(OutputFile(absl::StrCat("out/table_", tc.name, ".npy"),
                               FloatNpyArray(ts.weights, {tc.rows, tc.dim}, TableNpyDType(tc.dtype))));
    if (tc.optimizer.kind == OptimizerKind::kRowwiseAdagrad) {
      files.push_back(OutputFile(absl::StrCat("out/adagrad_", tc.name, ".npy"), FloatNpyArray(ts.adagrad, {tc.rows})));
    }
    if (tc.optimizer.kind == OptimizerKind::kAdam) {
      files.push_back(OutputFile(absl::StrCat("out/adam_m_", tc.name, ".npy"), FloatNpyArray(ts.adam_m, {tc.rows, tc.dim})));
      files.push_back(OutputFile(absl::StrCat("out/adam_v_", tc.name, ".npy"), FloatNpyArray(ts.adam_v, {tc.rows, tc.dim})));
      files.push_back(OutputFile(absl::StrCat("out/adam_step_", tc.name, ".npy"),
                                 FloatNpyArray({ts.adam_step.b1, ts.adam_step.b2}, {2})));
    }
  }
  return files;
}

json Table(const std::string& name, int64_t rows, int64_t dim, const std::string& dtype, const json& optimizer) {
  return {{"name", name}, {"rows", rows}, {"dim", dim}, {"dtype", dtype}, {"optimizer", optimizer}};
}

json Feature(const std::string& key, const std::string& table, const std::string& pooling) {
  return {{"key", key}, {"table", table}, {"pooling", pooling}};
}

// One table per optimizer and decay mode, all of one storage dtype; every pooling reads one of them.
json OptimizerModule(const std::string& dtype, bool stochastic_rounding) {
  const json sgd = {{"kind", "sgd"}, {"lr", 0.5}};
  const json adagrad = {{"kind", "rowwise_adagrad"}, {"lr", 0.1}};
  const json adagrad_l2 = {{"kind", "rowwise_adagrad"}, {"lr", 0.1}, {"weight_decay", 0.05}, {"decay_mode", "l2"}};
  const json adagrad_dec = {{"kind", "rowwise_adagrad"}, {"lr", 0.1}, {"weight_decay", 0.05}, {"decay_mode", "decoupled"}};
  const json adam = {{"kind", "adam"}, {"lr", 0.01}};
  const json adamw = {{"kind", "adam"}, {"lr", 0.01}, {"weight_decay", 0.1}, {"decay_mode", "decoupled"}};
  json tables = json::array({Table("sgd", 12, 8, dtype, sgd), Table("adagrad", 10, 4, dtype, adagrad),
                             Table("adagrad_l2", 10, 4, dtype, adagrad_l2), Table("adagrad_decoupled", 10, 4, dtype, adagrad_dec),
                             Table("adam", 8, 8, dtype, adam), Table("adamw", 8, 4, dtype, adamw)});
  for (json& t : tables) t["stochastic_rounding"] = stochastic_rounding;
  return {{"seed", 11}, {"batch", 4}, {"tables", tables},
          {"features", json::array({Feature("f_sgd", "sgd", "sum"), Feature("f_sgd_mean", "sgd", "mean"),
                                    Feature("f_adagrad", "adagrad", "sum"), Feature("f_adagrad_l2", "adagrad_l2", "weighted_sum"),
                                    Feature("f_adagrad_decoupled", "adagrad_decoupled", "mean"),
                                    Feature("f_adam", "adam", "sum"), Feature("f_adam_seq", "adam", "none"),
                                    Feature("f_adamw", "adamw", "sum")})}};
}

}  // namespace

absl::StatusOr<std::vector<GoldenFile>> RunEmbeddingProducer(const json& params) { return Run(params); }

void AddEmbeddingProducers(std::vector<GoldenProducer>& out) {
  auto add = [&](const std::string& name, json params) {
    out.push_back({absl::StrCat("embedding/", name), "embedding", std::move(params)});
  };
  const json sgd = {{"kind", "sgd"}, {"lr", 0.5}};
  // Forward of every pooling, on each storage dtype (features share tables, as items do).
  for (const char* dtype : {"fp32", "fp16", "bf16"}) {
    const json spec = {{"seed", 5}, {"batch", 5},
                       {"tables", json::array({Table("items", 16, 8, dtype, sgd), Table("ads", 12, 4, dtype, sgd)})},
                       {"features", json::array({Feature("f_sum", "items", "sum"), Feature("f_mean", "items", "mean"),
                                                 Feature("f_wsum", "ads", "weighted_sum"), Feature("f_seq", "items", "none"),
                                                 Feature("f_ads_seq", "ads", "none")})}};
    add(absl::StrCat("pooling_", dtype), {{"spec", spec}, {"input_seed", 1}, {"max_len", 4}});
  }
  // One fused optimizer step: every optimizer and decay mode, per storage dtype; fp16/bf16 updates
  // round stochastically (keyed by the step index) or, in the _rne set, to nearest even.
  add("step_fp32", {{"spec", OptimizerModule("fp32", true)}, {"input_seed", 2}, {"step", true}});
  add("step_fp16_sr", {{"spec", OptimizerModule("fp16", true)}, {"input_seed", 3}, {"step", true}, {"step_index", 2}});
  add("step_bf16_sr", {{"spec", OptimizerModule("bf16", true)}, {"input_seed", 4}, {"step", true}});
  add("step_bf16_rne", {{"spec", OptimizerModule("bf16", false)}, {"input_seed", 4}, {"step", true}});
  // Hashing and bounds: identity with each bounds mode, mod, splitmix64 over the whole id range.
  {
    const json adagrad = {{"kind", "rowwise_adagrad"}, {"lr", 0.1}};
    json tables = json::array({Table("identity", 8, 4, "fp32", sgd), Table("identity_zero", 8, 4, "fp32", sgd),
                               Table("identity_remap0", 8, 4, "fp32", adagrad), Table("mod", 8, 4, "fp32", sgd),
                               Table("mod_zero", 8, 4, "fp32", adagrad), Table("splitmix", 8, 4, "fp32", sgd),
                               Table("splitmix_seeded", 8, 4, "fp32", sgd)});
    tables[1]["bounds"] = "zero";
    tables[2]["bounds"] = "remap0";
    tables[3]["hashing"] = "mod";
    tables[4]["hashing"] = "mod";
    tables[4]["bounds"] = "zero";
    tables[5]["hashing"] = "splitmix64";
    tables[6]["hashing"] = "splitmix64";
    tables[6]["hash_seed"] = 12345;
    const json spec = {{"seed", 7}, {"batch", 4}, {"tables", tables},
                       {"features", json::array({Feature("h_id", "identity", "sum"), Feature("h_zero", "identity_zero", "mean"),
                                                 Feature("h_zero_seq", "identity_zero", "none"),
                                                 Feature("h_remap0", "identity_remap0", "sum"), Feature("h_mod", "mod", "sum"),
                                                 Feature("h_mod_zero", "mod_zero", "mean"), Feature("h_splitmix", "splitmix", "sum"),
                                                 Feature("h_splitmix_seeded", "splitmix_seeded", "none")})}};
    const json ranges = {{"h_zero", {-3, 16}}, {"h_zero_seq", {-3, 16}}, {"h_remap0", {-4, 20}},
                         {"h_mod", {0, 1000000000000}}, {"h_mod_zero", {-6, 40}},
                         {"h_splitmix", {-1000000000000000, 1000000000000000}},
                         {"h_splitmix_seeded", {-9000000000000000000, 9000000000000000000}}};
    add("hashing", {{"spec", spec}, {"input_seed", 6}, {"max_len", 5}, {"id_ranges", ranges}, {"step", true}});
  }
  // Sharded over 4 virtual ranks in 2 MP groups of 2 (2D), one table per sharding type: the same
  // forward and step through real collectives, plus the communication report.
  {
    const json adagrad = {{"kind", "rowwise_adagrad"}, {"lr", 0.1}};
    const json spec = {{"seed", 9}, {"batch", 8}, {"world_size", 4}, {"gpus_per_host", 2},
                       {"tables", json::array({Table("tw", 12, 4, "fp32", sgd), Table("rw", 16, 4, "fp32", adagrad),
                                               Table("cw", 10, 8, "fp32", adagrad), Table("twrw", 14, 4, "fp32", sgd),
                                               Table("dp", 6, 4, "fp32", sgd)})},
                       {"features", json::array({Feature("s_tw", "tw", "sum"), Feature("s_rw", "rw", "mean"),
                                                 Feature("s_cw", "cw", "sum"), Feature("s_cw_seq", "cw", "none"),
                                                 Feature("s_twrw", "twrw", "weighted_sum"), Feature("s_dp", "dp", "sum")})},
                       {"plan", {{"mp_group", 2},
                                 {"tables", {{"tw", {{"type", "TW"}, {"owner", 1}}}, {"rw", {{"type", "RW"}}},
                                             {"cw", {{"type", "CW"}, {"shards", 2}}}, {"twrw", {{"type", "TWRW"}}},
                                             {"dp", {{"type", "DP"}}}}}}}};
    add("sharded_2d", {{"spec", spec}, {"input_seed", 8}, {"max_len", 4}, {"step", true}});
  }
}

}  // namespace gemtb::golden
