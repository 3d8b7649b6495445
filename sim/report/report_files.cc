#include "sim/report/report_files.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "sim/report/json_text.h"
#include "sim/report/run_summary.h"
#include "sim/report/sweep_plot.h"
#include "sim/report/trace.h"

namespace gemtb::sim::report {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kLocalMfuDefinition =
    "the GEM article's: every op of every layer (GEMMs, attention, norms, pointwise ops, the loss, the "
    "embedding lookup) run alone on one GPU at its own efficiency, no recompute, no communication; "
    "sum of FLOPs / (peak x sum of times), i.e. per-layer MFUs weighted by FLOPs";
constexpr const char* kScalingRatioDefinition = "E2E MFU / Local MFU = T_local / T";
constexpr const char* kNonLayerDefinition =
    "work that is neither a layer nor communication (dense optimizer step, embedding update, gaps): "
    "T_ideal - T_local, its own loss line";

std::string Pct(double fraction) { return absl::StrCat(FormatShort(100 * fraction, 3), "%"); }

Json SettingsJson(const std::vector<std::pair<std::string, std::string>>& settings) {
  Json j = Json::object();
  for (const auto& [path, value] : settings) j[path] = value;
  return j;
}

Json AssumptionJson(const Assumption& a) {
  Json j;
  j["name"] = a.name;
  j["paths"] = a.paths;
  j["value"] = a.value;
  j["low"] = a.low;
  j["high"] = a.high;
  // Absolute low/high around a value of 0 have no factors: null.
  j["low_factor"] = std::isfinite(a.low_factor) ? Json(a.low_factor) : Json(nullptr);
  j["high_factor"] = std::isfinite(a.high_factor) ? Json(a.high_factor) : Json(nullptr);
  j["note"] = a.note;
  return j;
}

Json SweepPointJson(const SweepPoint& p) {
  Json j;
  j["gpus"] = p.gpus;
  j["settings"] = SettingsJson(p.settings);
  if (!p.status.ok()) {
    j["status"] = "invalid";
    j["error"] = std::string(p.status.message());
    return j;
  }
  const SimResult& r = *p.base;
  j["status"] = r.memory.fits ? "ok" : "does_not_fit";
  j["fits"] = r.memory.fits;
  j["needed_bytes"] = r.memory.needed_bytes;
  j["available_bytes"] = r.memory.available_bytes;
  j["step_mean_s"] = r.step_mean_s;
  j["step_p99_s"] = r.step_p99_s;
  j["t_local_s"] = r.t_local_s;
  j["local_mfu"] = r.local_mfu;
  j["e2e_mfu"] = r.e2e_mfu;
  j["scaling_ratio"] = r.scaling_ratio;
  j["imbalance"] = r.imbalance;
  if (p.attribution) {
    Json losses;
    for (int k = 0; k < kLossCauses; ++k) losses[std::string(LossKey(k))] = p.attribution->delta_s[static_cast<size_t>(k)];
    losses["non_layer"] = p.attribution->non_layer_s;
    j["losses_s"] = losses;
    j["biggest_loss"] = std::string(LossKey(p.attribution->biggest));
    j["biggest_loss_cause"] = std::string(LossCause(p.attribution->biggest));
  }
  if (p.shapley) {
    Json shares;
    for (int k = 0; k < kLossCauses; ++k) shares[std::string(LossKey(k))] = p.shapley->delta_s[static_cast<size_t>(k)];
    shares["non_layer"] = p.shapley->non_layer_s;
    j["shapley_losses_s"] = shares;
    j["shapley_biggest_loss"] = std::string(LossKey(p.shapley->biggest));
  }
  j["warnings"] = p.warnings;
  return j;
}

Json CaseJson(const SensitivityCase& c) {
  Json j;
  j["value"] = c.value;
  if (!c.status.ok()) {
    j["error"] = std::string(c.status.message());
    return j;
  }
  j["scaling_ratio"] = c.scaling_ratio;
  j["step_mean_s"] = c.step_s;
  j["status"] = c.fits ? "ok" : "does_not_fit";
  return j;
}

// The layer calibration's provenance and how many (op, direction) pairs took each efficiency source.
Json LayerCalibrationJson(const LayerCalibrationUse& use) {
  Json j;
  j["version"] = use.file.version;
  j["hardware"] = use.file.hardware;
  j["commit"] = use.file.commit;
  j["command"] = use.file.command;
  j["config"] = use.file.config;
  Json sources;
  sources["measured_op"] = use.counts.measured_op;
  sources["measured_layer"] = use.counts.measured_layer;
  sources["measured_kind"] = use.counts.measured_kind;
  sources["kind_default"] = use.counts.kind_default;
  j["efficiency_sources"] = sources;
  return j;
}

Json Definitions() {
  Json d;
  d["local_mfu"] = kLocalMfuDefinition;
  d["scaling_ratio"] = kScalingRatioDefinition;
  d["non_layer"] = kNonLayerDefinition;
  return d;
}

}  // namespace

Json SummaryJson(const Study& study) {
  Json j;
  j["scenario"] = study.scenario;
  j["seed"] = study.seed;
  if (study.layer_calibration) j["layer_calibration"] = LayerCalibrationJson(*study.layer_calibration);
  j["definitions"] = Definitions();
  const SweepPoint& ref = study.points[static_cast<size_t>(study.reference)];
  Json reference;
  reference["gpus"] = ref.gpus;
  reference["settings"] = SettingsJson(ref.settings);
  if (ref.base) {
    const Json run = RunSummaryJson(*ref.base, ref.attribution ? &*ref.attribution : nullptr);
    for (const auto& [key, value] : run.items()) reference[key] = value;
    if (ref.shapley) reference["shapley"] = AttributionJson(*ref.shapley, /*ordered=*/false);
  } else {
    reference["error"] = std::string(ref.status.message());
  }
  reference["warnings"] = ref.warnings;
  j["reference"] = reference;
  Json sweep = Json::array();
  for (const SweepPoint& p : study.points) sweep.push_back(SweepPointJson(p));
  j["sweep"] = sweep;
  Json assumptions = Json::array();
  for (const Assumption& a : study.assumptions) assumptions.push_back(AssumptionJson(a));
  j["assumptions"] = assumptions;
  if (!study.sensitivity.empty()) {
    Json s;
    s["gpus"] = ref.gpus;
    s["baseline_scaling_ratio"] = ref.base ? ref.base->scaling_ratio : 0.0;
    Json rows = Json::array();
    for (const SensitivityRow& row : study.sensitivity) {
      Json r;
      r["name"] = row.assumption.name;
      r["low"] = CaseJson(row.low);
      r["high"] = CaseJson(row.high);
      r["swing"] = row.swing;
      rows.push_back(r);
    }
    s["one_at_a_time"] = rows;
    if (study.grid) {
      const SensitivityGrid& g = *study.grid;
      Json grid;
      grid["a"] = study.assumptions[static_cast<size_t>(g.a)].name;
      grid["b"] = study.assumptions[static_cast<size_t>(g.b)].name;
      const std::vector<int> rows_a = SensitivityGrid::Shown(g.values_a), cols_b = SensitivityGrid::Shown(g.values_b);
      Json values_a = Json::array(), values_b = Json::array();
      for (int i : rows_a) values_a.push_back(g.values_a[i]);
      for (int k : cols_b) values_b.push_back(g.values_b[k]);
      grid["values_a"] = values_a;
      grid["values_b"] = values_b;
      Json sr = Json::array();
      for (int i : rows_a) {
        Json row = Json::array();
        for (int k : cols_b) row.push_back(g.ok[i][k] ? Json(g.scaling_ratio[i][k]) : Json(nullptr));
        sr.push_back(row);
      }
      grid["scaling_ratio"] = sr;
      s["grid"] = grid;
    }
    j["sensitivity"] = s;
  }
  if (study.checks) {
    const Checks& c = *study.checks;
    Json checks;
    checks["gpus"] = c.gpus;
    if (!c.status.ok()) {
      checks["error"] = std::string(c.status.message());
    } else {
      checks["imbalance_random"] = c.imbalance_random;
      checks["imbalance_bbs"] = c.imbalance_bbs;
      if (study.published_targets) {
        checks["random_within_10_20_percent"] = c.imbalance_random >= 0.10 && c.imbalance_random <= 0.20;
        checks["bbs_halves_excess"] = c.imbalance_bbs <= 0.5 * c.imbalance_random;
      }
      checks["imbalance_random_with_recompute"] = c.imbalance_random_recompute;
      checks["imbalance_bbs_with_recompute"] = c.imbalance_bbs_recompute;
      checks["step_sm_based_s"] = c.step_sm_based_s;
      checks["step_sm_free_s"] = c.step_sm_free_s;
      checks["sm_free_recovery"] = c.sm_free_recovery;
      if (study.published_targets) {
        checks["sm_free_within_3_8_percent"] = c.sm_free_recovery >= 0.03 && c.sm_free_recovery <= 0.08;
      }
    }
    j["checks"] = checks;
  }
  if (study.levers) {
    const LeverTable& t = *study.levers;
    Json levers;
    levers["gpus"] = t.gpus;
    levers["baseline_step_s"] = t.base_step_s;
    levers["baseline_peak_memory_bytes"] = t.base_peak_memory_bytes;
    levers["baseline_static_bytes"] = t.base_static_bytes;
    Json rows = Json::array();
    for (const LeverRow& row : t.rows) {
      Json r;
      r["lever_off"] = row.lever.name;
      r["settings"] = SettingsJson(row.lever.settings);
      r["published"] = row.lever.published;
      if (!row.status.ok()) {
        r["error"] = std::string(row.status.message());
      } else {
        r["status"] = row.fits ? "ok" : "does_not_fit";
        r["step_mean_s"] = row.step_s;
        r["lever_qps_gain"] = row.qps_gain;
        r["peak_memory_bytes"] = row.peak_memory_bytes;
        r["static_bytes"] = row.static_bytes;
      }
      rows.push_back(r);
    }
    levers["rows"] = rows;
    j["levers"] = levers;
  }
  return j;
}

std::string SweepCsv(const Study& study) {
  std::vector<std::string> set_paths;
  if (!study.points.empty()) {
    for (const auto& [path, value] : study.points.front().settings) set_paths.push_back(path);
  }
  std::string out = "gpus,";
  for (const std::string& p : set_paths) absl::StrAppend(&out, CsvField(p), ",");
  out +=
      "status,fits,needed_bytes,available_bytes,step_mean_s,step_p99_s,t_local_s,local_mfu,e2e_mfu,scaling_ratio,"
      "imbalance,loss_comm_s,loss_contention_s,loss_imbalance_s,loss_stragglers_s,loss_recompute_s,non_layer_s,"
      "biggest_loss,biggest_loss_cause";
  const bool shapley = std::any_of(study.points.begin(), study.points.end(), [](const SweepPoint& p) { return p.shapley.has_value(); });
  if (shapley) {
    for (int k = 0; k < kLossCauses; ++k) absl::StrAppend(&out, ",shapley_", LossKey(k), "_s");
  }
  out += "\n";
  for (const SweepPoint& p : study.points) {
    absl::StrAppend(&out, p.gpus, ",");
    for (const auto& [path, value] : p.settings) absl::StrAppend(&out, CsvField(value), ",");
    if (!p.status.ok()) {
      absl::StrAppend(&out, CsvField(absl::StrCat("invalid: ", p.status.message())), ",,,,,,,,,,,,,,,,,,",
                      shapley ? ",,,,," : "", "\n");
      continue;
    }
    const SimResult& r = *p.base;
    absl::StrAppend(&out, r.memory.fits ? "ok" : "does_not_fit", ",", r.memory.fits ? "true" : "false", ",",
                    FormatDouble(r.memory.needed_bytes), ",", FormatDouble(r.memory.available_bytes), ",",
                    FormatDouble(r.step_mean_s), ",", FormatDouble(r.step_p99_s), ",", FormatDouble(r.t_local_s), ",",
                    FormatDouble(r.local_mfu), ",", FormatDouble(r.e2e_mfu), ",", FormatDouble(r.scaling_ratio), ",",
                    FormatDouble(r.imbalance));
    if (p.attribution) {
      for (double d : p.attribution->delta_s) absl::StrAppend(&out, ",", FormatDouble(d));
      absl::StrAppend(&out, ",", FormatDouble(p.attribution->non_layer_s), ",", std::string(LossKey(p.attribution->biggest)),
                      ",", CsvField(LossCause(p.attribution->biggest)));
    } else {
      out += ",,,,,,,,";
    }
    if (shapley) {
      if (p.shapley) {
        for (double d : p.shapley->delta_s) absl::StrAppend(&out, ",", FormatDouble(d));
      } else {
        out += ",,,,,";
      }
    }
    out += "\n";
  }
  return out;
}

std::string PerfJson(const Study& study) {
  Json j;
  j["note"] = "wall-clock times: the only output that differs between identical runs";
  j["threads"] = study.threads;
  j["wall_s"] = study.wall_s;
  uint64_t events = 0;
  double run_wall = 0;
  Json runs = Json::array();
  for (const RunPerf& p : study.perf) {
    Json r;
    r["label"] = p.label;
    r["gpus"] = p.gpus;
    r["events"] = p.events;
    r["wall_s"] = p.wall_s;
    r["events_per_s"] = p.wall_s > 0 ? static_cast<double>(p.events) / p.wall_s : 0.0;
    runs.push_back(r);
    events += p.events;
    run_wall += p.wall_s;
  }
  j["runs_total"] = study.perf.size();
  j["events_total"] = events;
  j["run_seconds_total"] = run_wall;
  j["events_per_s"] = run_wall > 0 ? static_cast<double>(events) / run_wall : 0.0;
  j["runs"] = runs;
  return JsonText(j);
}

std::vector<std::pair<std::string, std::string>> RenderReport(const Study& study) {
  std::vector<std::pair<std::string, std::string>> files;
  files.emplace_back("summary.json", JsonText(SummaryJson(study)));
  const SweepPoint& ref = study.points[static_cast<size_t>(study.reference)];
  if (ref.base) {
    files.emplace_back("ranks.csv", RanksCsv(*ref.base));
    files.emplace_back("collectives.csv", CollectivesCsv(*ref.base));
    files.emplace_back("trace.json", TraceJson(*ref.base));
  }
  files.emplace_back("sweep.csv", SweepCsv(study));
  files.emplace_back("sweep.svg", SweepSvg(study));
  files.emplace_back("perf.json", PerfJson(study));
  return files;
}

std::string ConsoleReport(const Study& study) {
  std::string out = absl::StrCat("scenario ", study.scenario, " (seed ", study.seed, ")\n",
                                 "Local MFU: ", kLocalMfuDefinition, ".\nSR = ", kScalingRatioDefinition,
                                 "; non-layer: ", kNonLayerDefinition, ".\n");
  if (study.layer_calibration) {
    const LayerCalibrationUse& use = *study.layer_calibration;
    absl::StrAppend(&out, "layer calibration: ", use.file.config, " on ", use.file.hardware, " (", use.file.command,
                    ") prices ", use.counts.measured_op, " op passes by op name, ", use.counts.measured_layer,
                    " by layer, ", use.counts.measured_kind, " by op kind; ", use.counts.kind_default,
                    " keep the cluster's per-kind efficiency\n");
  }
  out += "\n";
  char line[256];
  std::snprintf(line, sizeof(line), "%7s %10s %10s %9s %7s  %s\n", "GPUs", "step ms", "Local MFU", "E2E MFU", "SR",
                "biggest loss (share of step time)");
  out += line;
  for (const SweepPoint& p : study.points) {
    std::string label = absl::StrCat(p.gpus);
    std::string settings;
    for (const auto& [path, value] : p.settings) absl::StrAppend(&settings, settings.empty() ? "" : ", ", path, "=", value);
    if (!p.status.ok()) {
      absl::StrAppend(&out, absl::StrFormat("%7s  invalid: %s", label, std::string(p.status.message())),
                      settings.empty() ? "" : absl::StrCat("  [", settings, "]"), "\n");
      continue;
    }
    const SimResult& r = *p.base;
    std::string loss = "-";
    if (p.attribution) {
      const Attribution& a = *p.attribution;
      loss = absl::StrCat(LossCause(a.biggest), " (", Pct(a.t_s > 0 ? a.Loss(a.biggest) / a.t_s : 0), ")");
    }
    std::snprintf(line, sizeof(line), "%7s %10.1f %10.3f %9.3f %7.3f  ", label.c_str(), r.step_mean_s * 1e3, r.local_mfu,
                  r.e2e_mfu, r.scaling_ratio);
    absl::StrAppend(&out, line, loss);
    if (!r.memory.fits) {
      absl::StrAppend(&out, "  [does_not_fit: needs ", FormatShort(r.memory.needed_bytes / 1e9), " GB, ",
                      FormatShort(r.memory.available_bytes / 1e9), " GB available]");
    }
    if (!settings.empty()) absl::StrAppend(&out, "  [", settings, "]");
    out += "\n";
  }

  if (std::any_of(study.points.begin(), study.points.end(), [](const SweepPoint& p) { return p.shapley.has_value(); })) {
    absl::StrAppend(&out, "\nloss split order-free (Shapley over the 32 subsets of the reruns; share of step time):\n");
    std::snprintf(line, sizeof(line), "%7s", "GPUs");
    out += line;
    for (int k = 0; k < kLossCauses; ++k) {
      std::snprintf(line, sizeof(line), " %11s", LossKey(k));
      out += line;
    }
    out += "  biggest\n";
    for (const SweepPoint& p : study.points) {
      if (!p.shapley) continue;
      const Attribution& a = *p.shapley;
      std::snprintf(line, sizeof(line), "%7d", p.gpus);
      out += line;
      for (int k = 0; k < kLossCauses; ++k) {
        std::snprintf(line, sizeof(line), " %11s", Pct(a.t_s > 0 ? a.delta_s[static_cast<size_t>(k)] / a.t_s : 0).c_str());
        out += line;
      }
      absl::StrAppend(&out, "  ", LossCause(a.biggest), "\n");
    }
  }

  if (study.checks) {
    const Checks& c = *study.checks;
    const bool targets = study.published_targets;
    absl::StrAppend(&out, "\nchecks at ", c.gpus, " GPUs", targets ? " (beside the GEM article's figures)" : "", ":\n");
    if (!c.status.ok()) {
      absl::StrAppend(&out, "  could not run: ", c.status.message(), "\n");
    } else {
      absl::StrAppend(&out, "  heaviest rank above the mean (batches alone: noise and recompute off), random assignment: ",
                      Pct(c.imbalance_random),
                      targets ? absl::StrCat(" (article: ~15%; within 10-20%: ",
                                             c.imbalance_random >= 0.10 && c.imbalance_random <= 0.20 ? "yes" : "no", ")")
                              : std::string(),
                      "\n");
      absl::StrAppend(&out, "  heaviest rank above the mean (batches alone: noise and recompute off), BBS:               ",
                      Pct(c.imbalance_bbs),
                      targets ? absl::StrCat(" (halves the excess or better: ",
                                             c.imbalance_bbs <= 0.5 * c.imbalance_random ? "yes" : "no", ")")
                              : std::string(),
                      "\n");
      absl::StrAppend(&out, "  the same with the scenario's per-rank recompute (noise off): random ",
                      Pct(c.imbalance_random_recompute), ", BBS ", Pct(c.imbalance_bbs_recompute),
                      " (an over-budget heavy rank recomputes more)\n");
      absl::StrAppend(&out, "  SM-free collectives recover ", Pct(c.sm_free_recovery), " of step time (",
                      FormatShort(c.step_sm_based_s * 1e3), " -> ", FormatShort(c.step_sm_free_s * 1e3),
                      " ms",
                      targets ? absl::StrCat("; article: about 5%, within 3-8%: ",
                                             c.sm_free_recovery >= 0.03 && c.sm_free_recovery <= 0.08 ? "yes" : "no")
                              : std::string(),
                      ")\n");
    }
  }

  if (study.levers) {
    const LeverTable& t = *study.levers;
    absl::StrAppend(&out, "\nlevers of the GEM article at ", t.gpus, " GPUs, each switched off alone (baseline ",
                    FormatShort(t.base_step_s * 1e3, 5), " ms, peak memory ", FormatShort(t.base_peak_memory_bytes / 1e9, 4),
                    " GB, static ", FormatShort(t.base_static_bytes / 1e9, 4), " GB):\n");
    std::snprintf(line, sizeof(line), "  %-36s %9s %9s %9s %9s  %s\n", "lever switched off", "step ms", "lever QPS",
                  "peak GB", "static GB", "the article");
    out += line;
    for (const LeverRow& row : t.rows) {
      if (!row.status.ok()) {
        absl::StrAppend(&out, "  ", row.lever.name, ": error: ", row.status.message(), "\n");
        continue;
      }
      const std::string qps = absl::StrCat(row.qps_gain >= 0 ? "+" : "", Pct(row.qps_gain));
      std::snprintf(line, sizeof(line), "  %-36s %9.1f %9s %9.1f %9.1f  ", row.lever.name.c_str(), row.step_s * 1e3,
                    qps.c_str(), row.peak_memory_bytes / 1e9, row.static_bytes / 1e9);
      absl::StrAppend(&out, line, row.lever.published, row.fits ? "" : "  [does_not_fit]", "\n");
    }
    out += "  (lever QPS: T_off / T_baseline - 1, the QPS the lever brings; peak: static + saved activations, max over ranks)\n";
  }

  if (!study.assumptions.empty()) {
    out += "\nassumptions (unpublished values; low / high for the sensitivity analysis):\n";
    for (const Assumption& a : study.assumptions) {
      absl::StrAppend(&out, "  ", a.name, ": ", FormatShort(a.value, 6), " (", FormatShort(a.low, 6), " / ",
                      FormatShort(a.high, 6), ")  [", absl::StrJoin(a.paths, ", "), "]",
                      a.note.empty() ? "" : absl::StrCat("  ", a.note), "\n");
    }
  }
  if (!study.sensitivity.empty()) {
    const SweepPoint& ref = study.points[static_cast<size_t>(study.reference)];
    absl::StrAppend(&out, "\nsensitivity of SR at ", ref.gpus, " GPUs (baseline SR ",
                    ref.base ? FormatShort(ref.base->scaling_ratio, 4) : std::string("-"), "):\n");
    for (const SensitivityRow& row : study.sensitivity) {
      auto show = [](const SensitivityCase& c) {
        if (!c.status.ok()) return absl::StrCat("error: ", c.status.message());
        return absl::StrCat(FormatShort(c.scaling_ratio, 4), c.fits ? "" : " [does_not_fit]");
      };
      absl::StrAppend(&out, "  ", row.assumption.name, ": low -> SR ", show(row.low), ", high -> SR ", show(row.high),
                      " (swing ", FormatShort(row.swing, 3), ")\n");
    }
    if (study.grid) {
      const SensitivityGrid& g = *study.grid;
      const std::string& na = study.assumptions[static_cast<size_t>(g.a)].name;
      const std::string& nb = study.assumptions[static_cast<size_t>(g.b)].name;
      const std::vector<int> rows_a = SensitivityGrid::Shown(g.values_a), cols_b = SensitivityGrid::Shown(g.values_b);
      absl::StrAppend(&out, "  SR on the ", rows_a.size(), " x ", cols_b.size(), " grid of the two most influential (rows: ", na,
                      ", columns: ", nb, "):\n");
      std::snprintf(line, sizeof(line), "  %14s", "");
      out += line;
      for (int j : cols_b) {
        std::snprintf(line, sizeof(line), " %10s", FormatShort(g.values_b[j], 4).c_str());
        out += line;
      }
      out += "\n";
      for (int i : rows_a) {
        std::snprintf(line, sizeof(line), "  %14s", FormatShort(g.values_a[i], 4).c_str());
        out += line;
        for (int j : cols_b) {
          std::snprintf(line, sizeof(line), " %10s", g.ok[i][j] ? FormatShort(g.scaling_ratio[i][j], 4).c_str() : "-");
          out += line;
        }
        out += "\n";
      }
    }
  }
  const SweepPoint& ref = study.points[static_cast<size_t>(study.reference)];
  if (!ref.warnings.empty()) {
    absl::StrAppend(&out, "\nwarnings at ", ref.gpus, " GPUs:\n");
    for (const std::string& w : ref.warnings) absl::StrAppend(&out, "  ", w, "\n");
  }
  return out;
}

}  // namespace gemtb::sim::report
