// gemtb bench layers: the GEM article's Local MFU measured on one GPU. The GPU trainer
// (gpu/train/trainer.h) trains the model for --warmup + --steps steps; on the last --steps it times
// every layer (model region) forward and backward with CUDA events. On one GPU a layer runs alone: no
// recompute, no communication. Each layer's FLOPs and HBM bytes on the batches it ran come from the
// model description (model/description/region_costs.h), so per layer: MFU, its roofline (FLOPs at
// peak or bytes at HBM bandwidth, whichever binds) and the time it loses against it; over all layers
// the FLOP-weighted Local MFU. Writes the per-layer calibration that `gemtb whatif --layer-calibration`
// reads (docs/layer-calibration.md), the report, and a one-GPU scenario of the same model, local batch
// and measured sequence lengths, so the simulator's prediction of the step can be set beside the
// measured step.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "model/common/status_macros.h"
#include "model/description/data_dir.h"
#include "model/description/model_config.h"
#include "model/description/model_graph.h"
#include "model/description/region_costs.h"
#include "nlohmann/json.hpp"
#include "tools/gemtb/command.h"
#include "tools/gemtb/flags.h"
#include "tools/gemtb/gpu_numerics_flags.h"
#include "tools/gemtb/step_times_json.h"
#include "tools/gemtb/output_set.h"
#include "tools/gemtb/train_common.h"
#include "tools/gemtb/version.h"

#if GEMTB_HAVE_CUDA
#include "gpu/bench/attention_bench.h"
#include "gpu/train/trainer.h"
#endif

namespace gemtb::cli {
namespace {

constexpr char kCommand[] = "bench layers";

struct Flags {
  std::string config = "small", out_dir, commit;
  int64_t local_batch = 256, warmup = 3, steps = 10, seed = 1, data_seed = 1;
  std::optional<double> peak_tflops, hbm_tbps;
  bool force = false;
  NumericsFlags numerics;
};

// One layer's pass, summed over the timed steps.
struct LayerPass {
  std::string region;
  bool backward = false;
  double ms = 0;
  gemtb::model::PassCost cost;
};

// What the timed steps measured.
struct Measured {
  std::vector<LayerPass> passes;                 // regions in model order, forward then backward
  std::vector<std::map<int32_t, int64_t>> lengths;  // per sequence: events -> samples
  double step_ms = 0;
  gpu::train::StepTimes phases;  // summed over the timed steps
  int64_t steps = 0;
  int64_t peak_memory_bytes = 0;  // the trainer's pool's high-water mark (gpu/train/trainer.h)
  std::string hardware;
};

absl::Status Bad(const std::string& message) { return absl::InvalidArgumentError(message); }

#if GEMTB_HAVE_CUDA
absl::StatusOr<Measured> Measure(const Flags& f, const gemtb::model::ModelConfig& config,
                                 const gemtb::model::RegionCosts& costs, const gpu::train::GemModelOptions& numerics) {
  using Clock = std::chrono::steady_clock;
  gpu::train::TrainerOptions o;
  o.seed = static_cast<uint64_t>(f.seed);
  o.data_seed = static_cast<uint64_t>(f.data_seed);
  o.batch = f.local_batch;
  o.total_steps = f.warmup + f.steps;
  std::unique_ptr<gpu::train::GpuTrainer> trainer;
  GEMTB_ASSIGN_OR_RETURN(trainer, gpu::train::GpuTrainer::Create(config, o, numerics));
  Measured m;
  m.hardware = gpu::bench::DeviceDescription();
  m.lengths.resize(config.sequences.size());
  std::map<std::pair<std::string, bool>, size_t> index;
  for (bool backward : {false, true})
    for (const std::string& region : costs.regions()) {
      index[{region, backward}] = m.passes.size();
      m.passes.push_back({region, backward, 0, {}});
    }
  for (int64_t s = 0; s < f.warmup + f.steps; ++s) {
    const bool timed = s >= f.warmup;
    trainer->TimeRegions(timed);
    const Clock::time_point t0 = Clock::now();
    gpu::train::TrainerStep step;
    GEMTB_ASSIGN_OR_RETURN(step, trainer->Step());
    const double step_ms = 1e3 * std::chrono::duration<double>(Clock::now() - t0).count();
    if (!timed) continue;
    ++m.steps;
    m.step_ms += step_ms;
    m.phases += step.times;
    std::vector<gemtb::model::RegionCost> rc;
    GEMTB_ASSIGN_OR_RETURN(rc, costs.Of(step.seq_lengths, f.local_batch));
    for (const gemtb::model::RegionCost& c : rc) {
      m.passes[index.at({c.region, false})].cost += c.fwd;
      m.passes[index.at({c.region, true})].cost += c.bwd;
    }
    for (const gpu::train::RegionTime& r : step.regions) {
      const auto it = index.find({r.region, r.backward});
      if (it == index.end())
        return absl::InternalError(absl::StrCat("the trainer timed region '", r.region, "', which the model graph lacks"));
      m.passes[it->second].ms += r.ms();
    }
    for (size_t j = 0; j < m.lengths.size(); ++j)
      for (int64_t b = 0; b < f.local_batch; ++b) ++m.lengths[j][step.seq_lengths[j * f.local_batch + b]];
  }
  GEMTB_ASSIGN_OR_RETURN(m.peak_memory_bytes, gpu::train::PeakStepMemoryBytes());
  return m;
}

// Per layer pass, averaged over the timed steps, with its MFU, roofline and loss against it.
struct LayerRow {
  std::string region;
  bool backward = false;
  double ms = 0, flops = 0, model_flops = 0, bytes = 0;
  double mfu = 0;          // model FLOPs / (peak x time)
  double efficiency = 0;   // every op's FLOPs / (peak x time): what the simulator prices the layer at
  double roofline_ms = 0;  // max(FLOPs / peak, bytes / HBM bandwidth)
  bool bytes_bound = false;
  double lost_ms() const { return ms - roofline_ms; }
};

// The timed layer passes; `untimed` gets the regions the trainer ran without timing them (the
// embedding lookups of the TBE, inside its embedding phases).
std::vector<LayerRow> Rows(const Measured& m, double peak, double hbm, std::vector<std::string>* untimed) {
  std::vector<LayerRow> rows;
  const double n = static_cast<double>(m.steps);
  for (const LayerPass& p : m.passes) {
    if (!(p.ms > 0)) {
      if (!p.backward) untimed->push_back(p.region);
      continue;
    }
    LayerRow r;
    r.region = p.region;
    r.backward = p.backward;
    r.ms = p.ms / n;
    r.flops = p.cost.flops / n;
    r.model_flops = p.cost.model_flops / n;
    r.bytes = p.cost.bytes / n;
    const double s = r.ms * 1e-3;
    r.mfu = s > 0 ? r.model_flops / (peak * s) : 0;
    r.efficiency = s > 0 ? r.flops / (peak * s) : 0;
    const double flops_ms = 1e3 * r.flops / peak, bytes_ms = 1e3 * r.bytes / hbm;
    r.roofline_ms = std::max(flops_ms, bytes_ms);
    r.bytes_bound = bytes_ms > flops_ms;
    rows.push_back(r);
  }
  return rows;
}

std::string PassName(bool backward) { return backward ? "bwd" : "fwd"; }

// The `untimed` regions (the TBE's lookups) priced from the embedding phases they run in: the forward
// phase's mean time (the KJT upload, the lookups, their outputs to the host) shared among their
// forward passes, the backward phase's (the gradients up, the backward with its fused optimizer)
// among their backward passes, each in proportion to its model.json bytes. Their efficiencies let the
// simulator's step carry what those phases cost this trainer.
std::vector<LayerRow> PhaseRows(const Measured& m, const std::vector<std::string>& untimed, double peak) {
  const double n = static_cast<double>(m.steps);
  std::vector<const LayerPass*> lookups;
  for (const LayerPass& p : m.passes)
    if (std::find(untimed.begin(), untimed.end(), p.region) != untimed.end()) lookups.push_back(&p);
  std::vector<LayerRow> rows;
  for (const bool backward : {false, true}) {
    const double phase_ms = (backward ? m.phases.embedding_bwd_ms : m.phases.embedding_fwd_ms) / n;
    double total_bytes = 0;
    for (const LayerPass* p : lookups)
      if (p->backward == backward) total_bytes += p->cost.bytes;
    if (!(total_bytes > 0) || !(phase_ms > 0)) continue;
    for (const LayerPass* p : lookups) {
      if (p->backward != backward) continue;
      LayerRow r;
      r.region = p->region;
      r.backward = backward;
      r.ms = phase_ms * p->cost.bytes / total_bytes;
      r.flops = p->cost.flops / n;
      r.model_flops = p->cost.model_flops / n;
      r.bytes = p->cost.bytes / n;
      r.efficiency = r.ms > 0 ? r.flops / (peak * r.ms * 1e-3) : 0;
      rows.push_back(r);
    }
  }
  return rows;
}

// The layer calibration (docs/layer-calibration.md): per layer and pass, the efficiency at which the
// simulator's pricing of the layer's ops by FLOPs gives the measured time.
nlohmann::json CalibrationJson(const Flags& f, const std::string& config_name, const std::string& hardware,
                               const std::string& commit, const std::string& command, const std::vector<LayerRow>& rows,
                               const std::vector<LayerRow>& phase_rows) {
  nlohmann::json layers = nlohmann::json::object();
  std::vector<LayerRow> all = rows;
  all.insert(all.end(), phase_rows.begin(), phase_rows.end());
  for (const LayerRow& r : all) {
    if (!(r.flops > 0) || !(r.efficiency > 0)) continue;
    // A layer faster than the peak allows (impossible, barring a timing fault) is priced at the peak.
    layers[r.region][PassName(r.backward)] = std::min(1.0, r.efficiency);
  }
  return {{"format", "gemtb-layer-calibration"},
          {"version", 1},
          {"hardware", hardware},
          {"commit", commit},
          {"command", command},
          {"config", config_name},
          {"layers", layers},
          {"note", absl::StrCat("measured by the GPU trainer at local batch ", f.local_batch, " over ", f.steps,
                                " steps after ", f.warmup, " warm-up steps; a layer's efficiency is the FLOPs of all its ops "
                                "(model.json) over peak x its measured time; the embedding lookups' regions take "
                                "the embedding phases' times, shared by their bytes")}};
}

// --config as the scenario names its model: a built-in name as it is, a file by its absolute path
// (a relative one would resolve against the scenario's folder).
std::string ModelRef(const std::string& config) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(config, ec)) return config;
  return std::filesystem::absolute(config, ec).string();
}

// A one-GPU scenario of the measured job: same model, local batch and sequence lengths (the measured
// batches' histogram), noise off.
nlohmann::json ScenarioJson(const Flags& f, const gemtb::model::ModelConfig& config, const Measured& m) {
  nlohmann::json features = nlohmann::json::array();
  for (const std::map<int32_t, int64_t>& hist : m.lengths) {
    nlohmann::json bins = nlohmann::json::array();
    for (const auto& [length, count] : hist) bins.push_back({length, count});
    features.push_back({{"histogram", {{"bins", bins}}}});
  }
  return {{"name", absl::StrCat("one-gpu-", config.name, "-b", f.local_batch)},
          {"description", absl::StrCat("written by `gemtb bench layers`: the ", config.name, " model on one GPU at local batch ",
                                       f.local_batch, ", sequence lengths as the measured batches had them; predict the "
                                       "measured step with --layer-calibration layers.json")},
          {"seed", 1},
          {"model", ModelRef(f.config)},
          {"cluster", gemtb::model::DataDir() + "/sim/network/default_cluster.json"},
          {"overrides", {{"cluster.world_size", 1}}},
          {"plan", nlohmann::json::object()},
          {"batches", {{"local_batch", f.local_batch}, {"features", features}, {"warmup_steps", 1}, {"measured_steps", 4}}},
          {"noise", {{"step_sigma", 0}, {"collective_jitter_sigma", 0}}}};
}

#endif  // GEMTB_HAVE_CUDA

absl::Status Run(const std::vector<std::string>& args) {
  Flags f;
  FlagSet flags(
      "gemtb bench layers --out-dir D [--config small] [--local-batch 256] [--steps 10] [flags]",
      "The GEM article's Local MFU on one GPU: the GPU trainer trains --config for --warmup + --steps steps\n"
      "(in --matmul / --attention precision, as `gemtb train`) and times every layer (model region), forward and backward, with CUDA events\n"
      "over the last --steps. A layer runs alone there: no recompute, no communication. Per layer: mean ms,\n"
      "model FLOPs, MFU, its roofline (FLOPs at --peak-tflops or model.json's HBM bytes at --hbm-tbps,\n"
      "whichever binds) and the time it loses against it; the report ranks layers by that loss. Local MFU =\n"
      "the layers' model FLOPs / (peak x their time). Writes D/bench_layers.json (the report),\n"
      "D/layers.json (the layer calibration, docs/layer-calibration.md) and D/scenario.json (one GPU, the\n"
      "measured local batch and sequence lengths, noise off) for\n"
      "  gemtb whatif D/scenario.json --layer-calibration D/layers.json --no-sensitivity --no-checks --no-levers\n"
      "Exit 0; 2 on bad input or without a usable GPU.");
  flags.String("out-dir", &f.out_dir, "output folder (created; its parent must exist)");
  flags.Bool("force", &f.force, "replace an --out-dir that already holds files, as a whole");
  flags.String("config", &f.config, "model config: tiny | small | path to a JSON (default small)");
  flags.Int64("local-batch", &f.local_batch, "samples per step (default 256)");
  flags.Int64("warmup", &f.warmup, "untimed steps first (default 3)");
  flags.Int64("steps", &f.steps, "timed steps (default 10)");
  flags.Int64("seed", &f.seed, "parameter and table init seed (default 1)");
  flags.Int64("data-seed", &f.data_seed, "data generator seed (default 1)");
  flags.OptionalDouble("peak-tflops", &f.peak_tflops, "peak TFLOP/s for MFU and the roofline (default 989: H200 dense bf16)");
  flags.OptionalDouble("hbm-tbps", &f.hbm_tbps, "HBM bandwidth for the roofline, TB/s (default 4.8: H200)");
  f.numerics.Register(flags, "tf32", "bf16");
  flags.String("commit", &f.commit, "the commit recorded in layers.json (default: the one this gemtb was built from)");
  GEMTB_RETURN_IF_ERROR(flags.Parse(args));
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return absl::OkStatus();
  }
  if (f.out_dir.empty()) return Bad("--out-dir: required");
  if (f.local_batch < 1 || f.local_batch > (1 << 20))
    return Bad(absl::StrCat("--local-batch: ", f.local_batch, " must be in [1, 1048576]"));
  gpu::train::GemModelOptions numerics;
  GEMTB_ASSIGN_OR_RETURN(numerics, f.numerics.Resolve());
  if (f.warmup < 0) return Bad(absl::StrCat("--warmup: ", f.warmup, " must be >= 0"));
  if (f.steps < 1) return Bad(absl::StrCat("--steps: ", f.steps, " must be >= 1"));
  if (f.seed < 0) return Bad(absl::StrCat("--seed: ", f.seed, " must be >= 0"));
  if (f.data_seed < 0) return Bad(absl::StrCat("--data-seed: ", f.data_seed, " must be >= 0"));
  for (const auto& [name, value] : {std::pair{"--peak-tflops", f.peak_tflops}, std::pair{"--hbm-tbps", f.hbm_tbps}})
    if (value && !(std::isfinite(*value) && *value > 0 && *value <= 1e6))
      return Bad(absl::StrCat(name, ": ", Exact(*value), " must be in (0, 1e6]"));
  absl::StatusOr<gemtb::model::ModelConfig> config = gemtb::model::LoadModelConfig(f.config);
  if (!config.ok()) return Bad(absl::StrCat("--config: ", config.status().message()));
  absl::StatusOr<gemtb::model::ModelGraph> graph = gemtb::model::ExpandModel(*config);
  if (!graph.ok()) return Bad(absl::StrCat("--config ", f.config, ": ", graph.status().message()));
  const gemtb::model::RegionCosts costs = gemtb::model::RegionCosts::Create(*graph);
  absl::StatusOr<OutputSet> output = OutputSet::Prepare("--out-dir", f.out_dir, {.force = f.force, .fail_write_at = {}});
  if (!output.ok()) return output.status();
#if !GEMTB_HAVE_CUDA
  return absl::FailedPreconditionError(
      "this gemtb was built without CUDA (nvcc not found at configure time): no GPU trainer to time");
#else
  const double peak = f.peak_tflops.value_or(989) * 1e12, hbm = f.hbm_tbps.value_or(4.8) * 1e12;
  Measured m;
  GEMTB_ASSIGN_OR_RETURN(m, Measure(f, *config, costs, numerics));
  std::vector<std::string> untimed;
  std::vector<LayerRow> rows = Rows(m, peak, hbm, &untimed);
  const std::vector<LayerRow> phase_rows = PhaseRows(m, untimed, peak);
  const double n = static_cast<double>(m.steps);
  double layer_ms = 0, layer_model_flops = 0;
  for (const LayerRow& r : rows) {
    layer_ms += r.ms;
    layer_model_flops += r.model_flops;
  }
  const double local_mfu = layer_ms > 0 ? layer_model_flops / (peak * layer_ms * 1e-3) : 0;
  const double step_ms = m.step_ms / n;
  const double e2e_mfu = layer_model_flops / (peak * step_ms * 1e-3);
  std::sort(rows.begin(), rows.end(), [](const LayerRow& a, const LayerRow& b) { return a.lost_ms() > b.lost_ms(); });

  std::cout << absl::StrFormat("%-12s %4s %10s %12s %8s %12s %6s %10s\n", "layer", "pass", "ms", "model GFLOP", "MFU %",
                               "roofline ms", "bound", "lost ms");
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerRow& r : rows) {
    std::cout << absl::StrFormat("%-12s %4s %10.4f %12.3f %8.3f %12.4f %6s %10.4f\n", r.region, PassName(r.backward), r.ms,
                                 r.model_flops * 1e-9, 100 * r.mfu, r.roofline_ms, r.bytes_bound ? "bytes" : "flops",
                                 r.lost_ms());
    layers.push_back({{"layer", r.region}, {"pass", PassName(r.backward)}, {"ms", r.ms}, {"model_flops", r.model_flops},
                      {"flops", r.flops}, {"bytes", r.bytes}, {"mfu", r.mfu}, {"efficiency", r.efficiency},
                      {"roofline_ms", r.roofline_ms}, {"bound", r.bytes_bound ? "bytes" : "flops"},
                      {"lost_ms", r.lost_ms()}});
  }
  const gpu::train::StepTimes mean = m.phases.Over(n);
  const nlohmann::json phases = StepTimesJson(mean);
  std::cout << absl::StrFormat(
      "\nlayers %.3f ms of a %.3f ms step (model phase %.3f, embedding fwd %.3f, bwd+update %.3f, optimizer %.3f, data "
      "%.3f); Local MFU %.3f%%, E2E MFU %.3f%% (peak %.0f TFLOP/s); peak step memory %.2f GB\n",
      layer_ms, step_ms, mean.model_ms, mean.embedding_fwd_ms, mean.embedding_bwd_ms, mean.optimizer_ms, mean.data_ms,
      100 * local_mfu, 100 * e2e_mfu, peak * 1e-12, static_cast<double>(m.peak_memory_bytes) * 1e-9);
  if (!untimed.empty())
    std::cout << "not timed as layers (the TBE's lookups, inside the embedding phases; calibrated from those "
                 "phases' times): "
              << absl::StrJoin(untimed, ", ") << "\n";
  nlohmann::json phase_layers = nlohmann::json::array();
  for (const LayerRow& r : phase_rows)
    phase_layers.push_back({{"layer", r.region}, {"pass", PassName(r.backward)}, {"ms", r.ms}, {"flops", r.flops},
                            {"bytes", r.bytes}, {"efficiency", r.efficiency}});
  const std::string commit = f.commit.empty() ? BuildCommit() : f.commit;
  const std::string command = absl::StrCat("gemtb bench layers ", absl::StrJoin(args, " "));
  const nlohmann::json report = {
      {"config", config->name}, {"local_batch", f.local_batch}, {"numerics", NumericsJson(numerics)},
      {"warmup", f.warmup},     {"steps", f.steps},
      {"hardware", m.hardware}, {"commit", commit},             {"command", command}, {"peak_flops", peak},
      {"hbm_Bps", hbm},         {"step_ms_mean", step_ms},      {"samples_per_s", 1e3 * static_cast<double>(f.local_batch) / step_ms},
      {"phase_ms_mean", phases}, {"layers_ms", layer_ms},       {"local_mfu", local_mfu}, {"e2e_mfu", e2e_mfu},
      {"layers", layers},       {"untimed_layers", untimed}, {"embedding_phase_layers", phase_layers},
      {"peak_step_memory_bytes", m.peak_memory_bytes}};
  output->AddText("bench_layers.json", report.dump(2) + "\n");
  output->AddText("layers.json", CalibrationJson(f, config->name, m.hardware, commit, command, rows, phase_rows).dump(2) + "\n");
  output->AddText("scenario.json", ScenarioJson(f, *config, m).dump(2) + "\n");
  GEMTB_RETURN_IF_ERROR(output->Commit());
  std::cout << "wrote " << f.out_dir << "/bench_layers.json, layers.json, scenario.json\n";
  return absl::OkStatus();
#endif
}

}  // namespace

int RunBenchLayers(const std::vector<std::string>& args) {
  if (absl::Status s = Run(args); !s.ok()) return ReportError(kCommand, s);
  return kExitOk;
}

}  // namespace gemtb::cli
