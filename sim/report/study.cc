#include "sim/report/study.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/common/status_macros.h"
#include "sim/report/json_text.h"
#include "tbb/parallel_for_each.h"
#include "tbb/task_group.h"
#include "tbb/task_arena.h"

namespace gemtb::sim::report {
namespace {

const char* LevelLabel(int k) {
  static constexpr const char* kLabels[] = {"baseline",           "rerun 1 (ideal network)", "rerun 2 (+ SM-free)",
                                                 "rerun 3 (+ balance)", "rerun 4 (+ no noise)",    "rerun 5 (+ no recompute)"};
  return kLabels[static_cast<size_t>(k)];
}

int SwitchMask(const Counterfactuals& c) {
  return (c.ideal_network ? 1 : 0) | (c.sm_free ? 2 : 0) | (c.perfect_balance ? 4 : 0) | (c.no_noise ? 8 : 0) |
         (c.no_recompute ? 16 : 0);
}

Counterfactuals FromMask(int mask) { return MaskCounterfactuals(mask); }

// "shapley {comm+imbalance}": the causes a subset run switches off.
std::string SubsetLabel(int mask) {
  std::string keys;
  for (int k = 0; k < kLossCauses; ++k) {
    if ((mask & (1 << k)) != 0) absl::StrAppend(&keys, keys.empty() ? "" : "+", LossKey(k));
  }
  return absl::StrCat("shapley {", keys, "}");
}

// Every distinct scenario variant and every distinct run of a study; identical ones are shared.
class RunPlanner {
 public:
  RunPlanner(const StudyOptions& options, const SimulateFn& simulate) : options_(options), simulate_(simulate) {}

  int AddDoc(ScenarioDocument doc) {
    const std::string key = absl::StrCat(doc.json.dump(), "|rows*", FormatDouble(doc.model_rows_scale));
    auto [it, inserted] = doc_index_.emplace(key, static_cast<int>(docs_.size()));
    if (inserted) {
      docs_.push_back(std::move(doc));
      scenarios_.emplace_back(absl::UnknownError("not built"));
      built_.push_back(false);
    }
    return it->second;
  }

  // One run of document `doc` with the counterfactual switches `cf`.
  int AddJob(int doc, const Counterfactuals& cf, bool trace, std::string label, int gpus) {
    const int mask = SwitchMask(cf);
    auto [it, inserted] = job_index_.emplace(std::make_pair(doc, mask), static_cast<int>(jobs_.size()));
    if (inserted) {
      jobs_.push_back(Job{doc, mask, trace, std::move(label), gpus});
      results_.emplace_back(absl::UnknownError("not run"));
      done_.push_back(false);
    } else {
      jobs_[static_cast<size_t>(it->second)].trace |= trace;
    }
    return it->second;
  }

  const ScenarioDocument& doc(int i) const { return docs_[static_cast<size_t>(i)]; }
  const absl::StatusOr<Scenario>& scenario(int i) const { return scenarios_[static_cast<size_t>(i)]; }
  const absl::StatusOr<SimResult>& result(int job) const { return results_[static_cast<size_t>(job)]; }

  // Builds the scenarios not built yet (in parallel).
  void BuildPending(tbb::task_arena& arena) {
    std::vector<size_t> pending;
    for (size_t i = 0; i < docs_.size(); ++i) {
      if (!built_[i]) pending.push_back(i);
    }
    arena.execute([&] {
      tbb::parallel_for_each(pending.begin(), pending.end(), [&](size_t i) { scenarios_[i] = BuildScenario(docs_[i]); });
    });
    for (size_t i : pending) built_[i] = true;
  }

  // Runs the jobs not run yet (in parallel, largest worlds first for balance). A rerun whose switches
  // change nothing for its scenario (SM-free on an SM-free plan, no noise without noise) shares the
  // result of the run it equals instead of running again.
  void RunPending(tbb::task_arena& arena, std::vector<RunPerf>* perf) {
    std::vector<size_t> pending;
    std::vector<std::pair<size_t, size_t>> aliases;  // (job, the job whose result it takes)
    for (size_t j = 0; j < jobs_.size(); ++j) {
      if (done_[j]) continue;
      auto [it, inserted] = canonical_.emplace(RunKey(jobs_[j]), j);
      Job& canonical = jobs_[it->second];
      if (inserted) {
        pending.push_back(j);
      } else if (jobs_[j].trace && !canonical.trace && done_[it->second]) {
        pending.push_back(j);  // the earlier run kept no trace: run again with one
      } else {
        canonical.trace |= jobs_[j].trace;  // a traced run serves untraced ones too
        aliases.emplace_back(j, it->second);
      }
    }
    total_ += pending.size();
    // Largest worlds first, taken one at a time from a shared queue by every thread of the arena
    // (longest-processing-time-first list scheduling): the long 16,384-GPU runs start at once and
    // the short ones fill the gaps at the end, so no thread waits alone on a long run. (A
    // parallel_for_each would split the list in halves and leave the order to work stealing.)
    std::stable_sort(pending.begin(), pending.end(),
                     [&](size_t a, size_t b) { return jobs_[a].gpus > jobs_[b].gpus; });
    if (options_.progress && !pending.empty()) {
      options_.progress(absl::StrCat(finished_ == 0 ? "" : "then ", pending.size(), " runs on ", arena.max_concurrency(),
                                     " threads, largest worlds first",
                                     aliases.empty() ? std::string()
                                                     : absl::StrCat(" (", aliases.size(),
                                                                    " more share a run they cannot differ from)")));
    }
    std::vector<double> wall(jobs_.size(), 0);
    std::atomic<size_t> next{0};
    const auto run_one = [&](size_t j) {
      const Job& job = jobs_[j];
      const absl::StatusOr<Scenario>& scenario = scenarios_[static_cast<size_t>(job.doc)];
      const auto start = std::chrono::steady_clock::now();
      if (!scenario.ok()) {
        results_[j] = scenario.status();
      } else {
        SimOptions sim;
        sim.threads = 1;  // the study is parallel across runs
        sim.trace = job.trace;
        sim.trace_ranks = options_.trace_ranks;
        sim.trace_step = options_.trace_step;
        sim.warmup_steps = options_.warmup_steps;
        sim.measured_steps = options_.measured_steps;
        sim.batch_cache = &batch_cache_;
        results_[j] = simulate_(*scenario, FromMask(job.switches), sim);
      }
      wall[j] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (options_.progress) {
        std::lock_guard<std::mutex> lock(progress_mutex_);
        ++finished_;
        const absl::StatusOr<SimResult>& r = results_[j];
        const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
        options_.progress(absl::StrCat("[", finished_, "/", total_, "] ", job.label, ": ",
                                       r.ok() ? absl::StrCat("T = ", FormatShort(r->step_mean_s * 1e3), " ms")
                                              : absl::StrCat("error: ", r.status().message()),
                                       " (", FormatShort(wall[j], 3), " s; ", FormatShort(elapsed, 3),
                                       " s elapsed)"));
      }
    };
    arena.execute([&] {
      tbb::task_group workers;
      for (int w = 0; w < arena.max_concurrency(); ++w) {
        workers.run([&] {
          for (size_t k = next++; k < pending.size(); k = next++) run_one(pending[k]);
        });
      }
      workers.wait();
    });
    for (size_t j : pending) {
      done_[j] = true;
      const absl::StatusOr<SimResult>& r = results_[j];
      perf->push_back(RunPerf{jobs_[j].label, jobs_[j].gpus, r.ok() ? r->events : 0, wall[j]});
    }
    for (const auto& [j, from] : aliases) {
      results_[j] = results_[from];
      done_[j] = true;
    }
  }

 private:
  struct Job {
    int doc;
    int switches;  // SwitchMask of its counterfactuals
    bool trace;
    std::string label;
    int gpus;
  };

  // What a run of `job` depends on, so that runs that cannot differ share one result: its document
  // without the parts that cannot act, and the switches that can change it. SM-free on an SM-free
  // plan changes nothing unless the copy engine contends (kappa_copy_engine > 0: the switch sets
  // every kappa to 0); the no-noise switch equals the same document without noise (the engine
  // takes noise only from the scenario's noise section, which the switch zeroes); a world inside
  // one AI zone never uses the cross-zone tier (no cross-zone bandwidth; shared links are the
  // NVLink port and the NIC); the SM-based kappas do nothing on an SM-free plan. E.g. the sensitivity case "noise
  // low" (sigma 0) and the BBS check (no noise) of gem-default, or a zone of the whole world under
  // every oversubscription of the grid, run once.
  std::string RunKey(const Job& job) const {
    const ScenarioDocument& doc = docs_[static_cast<size_t>(job.doc)];
    const absl::StatusOr<Scenario>& s = scenarios_[static_cast<size_t>(job.doc)];
    int mask = job.switches;
    if (!s.ok()) return absl::StrCat("invalid document ", job.doc, "|", mask);
    nlohmann::json json = doc.json;
    if (s->plan.collectives.library == "sm_free" && !(s->cluster.calibration.kappa_copy_engine.value_or(0) > 0)) {
      mask &= ~2;
    }
    // The SM-based kappas act only where collectives are SM-based (simulate.cc): the sensitivity's
    // kappa low and high equal the baseline on an SM-free plan.
    if (s->plan.collectives.library != "sm_based" && json.contains("cluster") && json["cluster"].is_object() &&
        json["cluster"].contains("calibration") && json["cluster"]["calibration"].is_object()) {
      json["cluster"]["calibration"].erase("kappa");
      json["cluster"]["calibration"].erase("kappa_ops");
    }
    const Noise& n = s->noise;
    const bool slow = (!n.slow_ranks.empty() || n.slow_fraction > 0) && n.slow_factor != 1;
    if ((n.step_sigma == 0 && n.collective_jitter_sigma == 0 && !slow) || (mask & 8) != 0) {
      json["noise"] = "none";
      mask &= ~8;
    }
    const Cluster& c = s->cluster;
    const bool one_zone = c.zone_size <= 0 || c.world_size <= c.zone_size;
    if (one_zone && json.contains("cluster") && json["cluster"].is_object()) {
      nlohmann::json& tiers = json["cluster"]["tiers"];
      if (tiers.is_array() && tiers.size() >= 3) tiers[2] = "unused";
    }
    return absl::StrCat(json.dump(), "|rows*", FormatDouble(doc.model_rows_scale), "|", mask);
  }
  const StudyOptions& options_;
  const SimulateFn& simulate_;
  std::vector<ScenarioDocument> docs_;
  std::vector<absl::StatusOr<Scenario>> scenarios_;
  std::vector<bool> built_;
  std::map<std::string, int> doc_index_;
  std::vector<Job> jobs_;
  std::vector<absl::StatusOr<SimResult>> results_;
  std::vector<bool> done_;
  std::map<std::pair<int, int>, int> job_index_;
  BatchStatsCache batch_cache_;  // runs that draw the same batches share one draw
  std::map<std::string, size_t> canonical_;  // RunKey -> the job that runs (traced if any of its aliases is)
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::mutex progress_mutex_;
  size_t finished_ = 0, total_ = 0;
};

// The cross product of the swept fields' values, first field outermost.
std::vector<std::vector<std::pair<std::string, std::string>>> SettingCombos(const std::vector<FieldSweep>& sets) {
  std::vector<std::vector<std::pair<std::string, std::string>>> combos = {{}};
  for (const FieldSweep& f : sets) {
    std::vector<std::vector<std::pair<std::string, std::string>>> next;
    for (const auto& c : combos) {
      for (const std::string& v : f.values) {
        auto extended = c;
        extended.emplace_back(f.path, v);
        next.push_back(std::move(extended));
      }
    }
    combos = std::move(next);
  }
  return combos;
}

std::string PointLabel(int gpus, const std::vector<std::pair<std::string, std::string>>& settings) {
  std::string label = absl::StrCat(gpus, " GPUs");
  for (const auto& [path, value] : settings) absl::StrAppend(&label, ", ", path, "=", value);
  return label;
}

// The largest rank's static plus peak activation bytes.
double PeakMemoryBytes(const SimResult& r) {
  double peak = 0;
  for (const RankStats& x : r.ranks) peak = std::max(peak, x.static_bytes + x.peak_activation_bytes);
  return peak;
}

absl::Status CheckOptions(const StudyOptions& options) {
  for (int g : options.gpus) {
    if (g < 1 || g > (1 << 22)) return absl::InvalidArgumentError(absl::StrCat("--gpus: ", g, " must be in [1, 4194304]"));
  }
  for (const FieldSweep& f : options.sets) {
    if (f.path.empty() || f.values.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--set ", f.path, ": needs path=value[,value...]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<Lever> ArticleLevers(int gpus) {
  const std::string world = absl::StrCat(gpus);
  return {
      {"2D FSDP -> 1D FSDP", {{"plan.dense.fsdp_shard_group", world}},
       "C1: 2D FSDP, shard groups of 128-256 GPUs inside an AI zone + DDP across them, keeps the parameter "
       "gathers off the oversubscribed links (no figure published)"},
      {"V3 fully sharded -> V2 2D sparse",
       {{"plan.sparse.fully_sharded", "false"}, {"plan.layout.sparse_shard_group", "0"}},
       "C1: fully sharded 2D stores the MP shard once per host at the cost of an NVLink all-gather/"
       "reduce-scatter (memory, no time figure published)"},
      {"V3 fully sharded -> V1 1D sparse",
       {{"plan.sparse.fully_sharded", "false"}, {"plan.sparse.mp_group", world}, {"plan.layout.sparse_shard_group", "0"}},
       "C1: 2D MP groups of ~256 replace one world-wide embedding all-to-all (no figure published)"},
      {"SM-free -> SM-based collectives", {{"plan.collectives.library", "sm_based"}},
       "C2: SM-free all-gather on 1 SM instead of ~24, about +5% E2E QPS"},
      {"BBS -> random batches", {{"batches.assignment.policy", "random"}},
       "C4: Base Batch Shuffling, +4% QPS and -4% peak memory"},
      {"per-region -> uniform checkpointing", {{"plan.memory.budget_policy", "uniform"}},
       "C3: per-region activation checkpointing budgets (no figure published)"},
      {"FP8 -> bf16 saved activations", {{"plan.memory.act_quant", "bf16"}},
       "C3: saved activations quantized to FP8/MX4 for local batches of 1k+ (no figure published)"},
  };
}

std::vector<int> DefaultGpuSweep() {
  std::vector<int> gpus;
  for (int g = 64; g <= 16384; g *= 2) gpus.push_back(g);
  return gpus;
}

absl::StatusOr<Study> RunStudy(const ScenarioDocument& doc, const StudyOptions& options, const SimulateFn& simulate) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  const auto study_start = std::chrono::steady_clock::now();
  absl::StatusOr<Scenario> given = BuildScenario(doc);
  if (!given.ok()) return given.status();

  Study study;
  study.scenario = given->name;
  study.seed = given->seed;
  if (const std::optional<LayerCalibration>& layers = given->cluster.calibration.layers; layers && given->model) {
    GEMTB_RETURN_IF_ERROR(CheckLayerCalibration(*given->model, *layers));
    study.layer_calibration = LayerCalibrationUse{*layers, CountEfficiencySources(*given->model, given->cluster.calibration)};
  }
  study.assumptions = given->assumptions;
  tbb::task_arena arena(options.threads > 0 ? options.threads : tbb::task_arena::automatic);
  study.threads = arena.max_concurrency();
  study.published_targets = options.published_targets;
  RunPlanner planner(options, simulate);

  // Points: field settings (outer) x GPU counts (inner).
  const std::vector<int> gpus = options.gpus.empty() ? std::vector<int>{given->cluster.world_size} : options.gpus;
  std::vector<int> point_doc;
  for (const auto& settings : SettingCombos(options.sets)) {
    for (int g : gpus) {
      SweepPoint point;
      point.gpus = g;
      point.settings = settings;
      ScenarioDocument variant = doc;
      for (const auto& [path, value] : settings) {
        if (absl::Status s = SetField(variant, path, value); !s.ok() && point.status.ok()) point.status = s;
      }
      if (absl::Status s = SetWorldSize(variant, g); !s.ok() && point.status.ok()) point.status = s;
      point_doc.push_back(point.status.ok() ? planner.AddDoc(std::move(variant)) : -1);
      study.points.push_back(std::move(point));
    }
  }
  planner.BuildPending(arena);
  for (size_t p = 0; p < study.points.size(); ++p) {
    SweepPoint& point = study.points[p];
    if (point_doc[p] < 0) continue;
    const absl::StatusOr<Scenario>& s = planner.scenario(point_doc[p]);
    if (!s.ok()) {
      point.status = s.status();
    } else {
      point.warnings = s->warnings;
    }
  }

  // The reference point: the first valid one at reference_gpus, else the (first) largest valid one.
  for (size_t p = 0; p < study.points.size() && study.reference < 0; ++p) {
    if (study.points[p].status.ok() && study.points[p].gpus == options.reference_gpus) study.reference = static_cast<int>(p);
  }
  if (study.reference < 0) {
    int best = -1;
    for (size_t p = 0; p < study.points.size(); ++p) {
      if (!study.points[p].status.ok()) continue;
      if (best < 0 || study.points[p].gpus > study.points[static_cast<size_t>(best)].gpus) best = static_cast<int>(p);
    }
    study.reference = best;
  }
  if (study.reference < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("no valid point in the sweep; at ", study.points.front().gpus, " GPUs: ", study.points.front().status.message()));
  }

  // Runs: each point's baseline and reruns.
  std::vector<std::vector<int>> point_jobs(study.points.size());
  const int levels = options.attribution ? kLossCauses + 1 : 1;
  for (size_t p = 0; p < study.points.size(); ++p) {
    if (!study.points[p].status.ok()) continue;
    const std::string label = PointLabel(study.points[p].gpus, study.points[p].settings);
    for (int k = 0; k < levels; ++k) {
      // Only the reference baseline is traced (trace.json).
      point_jobs[p].push_back(planner.AddJob(point_doc[p], CumulativeCounterfactuals(k),
                                             static_cast<int>(p) == study.reference && k == 0,
                                             absl::StrCat(label, " ", LevelLabel(k)), study.points[p].gpus));
    }
  }
  // The order-free split: every subset of the five switches (the cumulative ones are among them and
  // run once).
  std::vector<std::vector<int>> point_subset_jobs(study.points.size());
  for (size_t p = 0; p < study.points.size() && options.shapley; ++p) {
    if (!study.points[p].status.ok()) continue;
    const std::string label = PointLabel(study.points[p].gpus, study.points[p].settings);
    for (int mask = 0; mask < kShapleyRuns; ++mask) {
      point_subset_jobs[p].push_back(planner.AddJob(point_doc[p], MaskCounterfactuals(mask), false,
                                                    absl::StrCat(label, " ", SubsetLabel(mask)), study.points[p].gpus));
    }
  }
  const SweepPoint& ref = study.points[static_cast<size_t>(study.reference)];
  // A copy: adding variants grows the planner's documents.
  const ScenarioDocument ref_doc = planner.doc(point_doc[static_cast<size_t>(study.reference)]);
  const std::string ref_label = PointLabel(ref.gpus, ref.settings);

  // Sensitivity: each assumption low and high at the reference point.
  struct CaseJob {
    absl::Status status;
    int job = -1;
  };
  std::vector<std::array<CaseJob, 2>> case_jobs;
  const bool sensitivity = options.sensitivity && !study.assumptions.empty();
  auto add_variant = [&](const std::vector<std::pair<size_t, AssumptionCase>>& cases, const std::string& label) {
    CaseJob cj;
    ScenarioDocument variant = ref_doc;
    for (const auto& [a, which] : cases) {
      if (absl::Status s = ApplyAssumption(variant, study.assumptions[a], which); !s.ok()) {
        cj.status = s;
        return cj;
      }
    }
    cj.job = planner.AddJob(planner.AddDoc(std::move(variant)), Counterfactuals{}, false, label, ref.gpus);
    return cj;
  };
  if (sensitivity) {
    for (size_t a = 0; a < study.assumptions.size(); ++a) {
      const std::string name = absl::StrCat(ref_label, " sensitivity '", study.assumptions[a].name, "'");
      case_jobs.push_back({add_variant({{a, AssumptionCase::kLow}}, name + " low"),
                           add_variant({{a, AssumptionCase::kHigh}}, name + " high")});
    }
  }
  // Checks: random vs bbs assignment, twice: the load imbalance of the batches alone (noise off, else
  // the slowest rank's noise draw adds ~3.5 sigma that no batch policy can remove; recompute off, since
  // Checkpointing is decided per rank and step, so an over-budget heavy rank recomputes more and
  // amplifies the batches' imbalance) and with the scenario's per-rank recompute (noise still off);
  // then SM-based vs SM-free collectives (as the scenario runs, noise on).
  constexpr size_t kCheckJobs = 6;
  std::array<CaseJob, kCheckJobs> check_jobs;
  if (options.checks) {
    Counterfactuals batches_alone;
    batches_alone.no_noise = true;
    batches_alone.no_recompute = true;
    Counterfactuals quiet;
    quiet.no_noise = true;
    const Counterfactuals check_switches[kCheckJobs] = {batches_alone, batches_alone, quiet, quiet,
                                                        Counterfactuals{}, Counterfactuals{}};
    const std::pair<const char*, const char*> variants[kCheckJobs] = {{"batches.assignment.policy", "random"},
                                                                      {"batches.assignment.policy", "bbs"},
                                                                      {"batches.assignment.policy", "random"},
                                                                      {"batches.assignment.policy", "bbs"},
                                                                      {"plan.collectives.library", "sm_based"},
                                                                      {"plan.collectives.library", "sm_free"}};
    for (size_t v = 0; v < kCheckJobs; ++v) {
      ScenarioDocument variant = ref_doc;
      check_jobs[v].status = SetField(variant, variants[v].first, variants[v].second);
      if (check_jobs[v].status.ok()) {
        check_jobs[v].job = planner.AddJob(planner.AddDoc(std::move(variant)), check_switches[v], false,
                                           absl::StrCat(ref_label, " check ", variants[v].first, "=", variants[v].second,
                                                        v < 2 ? " (no recompute)" : ""),
                                           ref.gpus);
      }
    }
  }
  // Levers: each switched off alone, as the scenario runs (noise on).
  std::vector<CaseJob> lever_jobs;
  const std::vector<Lever> levers = options.levers ? ArticleLevers(ref.gpus) : std::vector<Lever>{};
  for (const Lever& lever : levers) {
    CaseJob cj;
    ScenarioDocument variant = ref_doc;
    for (const auto& [path, value] : lever.settings) {
      if (absl::Status s = SetField(variant, path, value); !s.ok() && cj.status.ok()) cj.status = s;
    }
    if (cj.status.ok()) {
      cj.job = planner.AddJob(planner.AddDoc(std::move(variant)), Counterfactuals{}, false,
                              absl::StrCat(ref_label, " lever off: ", lever.name), ref.gpus);
    }
    lever_jobs.push_back(cj);
  }
  planner.BuildPending(arena);
  planner.RunPending(arena, &study.perf);

  // Points: baseline, attribution.
  for (size_t p = 0; p < study.points.size(); ++p) {
    SweepPoint& point = study.points[p];
    if (!point.status.ok()) continue;
    const absl::StatusOr<SimResult>& base = planner.result(point_jobs[p][0]);
    if (!base.ok()) {
      point.status = base.status();
      continue;
    }
    point.base = *base;
    if (!point_subset_jobs[p].empty()) {
      std::vector<SimResult> subsets;
      for (int job : point_subset_jobs[p]) {
        if (!planner.result(job).ok()) break;
        subsets.push_back(*planner.result(job));
      }
      if (subsets.size() == point_subset_jobs[p].size()) {
        absl::StatusOr<Attribution> a = AttributeShapley(subsets);
        if (a.ok()) point.shapley = *a;
      }
    }
    if (!options.attribution) continue;
    std::vector<SimResult> runs;
    for (int job : point_jobs[p]) {
      if (!planner.result(job).ok()) break;
      runs.push_back(*planner.result(job));
    }
    if (runs.size() == point_jobs[p].size()) {
      absl::StatusOr<Attribution> a = Attribute(runs);
      if (a.ok()) point.attribution = *a;
    }
  }
  // By value: later phases add runs to the planner.
  const absl::StatusOr<SimResult>& ref_run = planner.result(point_jobs[static_cast<size_t>(study.reference)][0]);
  const bool ref_ok = ref_run.ok();
  const double ref_scaling_ratio = ref_ok ? ref_run->scaling_ratio : 0.0;

  // The lever table (before the grid's runs grow the planner's results under ref_run).
  if (options.levers && ref_ok) {
    LeverTable table;
    table.gpus = ref.gpus;
    table.base_step_s = ref_run->step_mean_s;
    table.base_peak_memory_bytes = PeakMemoryBytes(*ref_run);
    table.base_static_bytes = ref_run->memory.static_bytes;
    for (size_t i = 0; i < levers.size(); ++i) {
      LeverRow row;
      row.lever = levers[i];
      row.status = lever_jobs[i].status;
      if (row.status.ok() && !planner.result(lever_jobs[i].job).ok()) row.status = planner.result(lever_jobs[i].job).status();
      if (row.status.ok()) {
        const SimResult& r = *planner.result(lever_jobs[i].job);
        row.fits = r.memory.fits;
        row.step_s = r.step_mean_s;
        row.qps_gain = table.base_step_s > 0 ? r.step_mean_s / table.base_step_s - 1 : 0;
        row.peak_memory_bytes = PeakMemoryBytes(r);
        row.static_bytes = r.memory.static_bytes;
      }
      table.rows.push_back(std::move(row));
    }
    study.levers = std::move(table);
  }


  // Sensitivity rows and the grid of the two that move SR most.
  if (sensitivity && ref_ok) {
    auto fill = [&](const CaseJob& cj, double value) {
      SensitivityCase c;
      c.value = value;
      c.status = cj.status;
      if (c.status.ok() && !planner.result(cj.job).ok()) c.status = planner.result(cj.job).status();
      if (c.status.ok()) {
        c.scaling_ratio = planner.result(cj.job)->scaling_ratio;
        c.step_s = planner.result(cj.job)->step_mean_s;
        c.fits = planner.result(cj.job)->memory.fits;
      }
      return c;
    };
    for (size_t a = 0; a < study.assumptions.size(); ++a) {
      SensitivityRow row;
      row.assumption = study.assumptions[a];
      row.low = fill(case_jobs[a][0], row.assumption.low);
      row.high = fill(case_jobs[a][1], row.assumption.high);
      if (row.low.status.ok() && row.high.status.ok()) row.swing = std::fabs(row.high.scaling_ratio - row.low.scaling_ratio);
      study.sensitivity.push_back(std::move(row));
    }
    std::vector<int> order;
    for (size_t a = 0; a < study.sensitivity.size(); ++a) {
      if (study.sensitivity[a].low.status.ok() && study.sensitivity[a].high.status.ok()) order.push_back(static_cast<int>(a));
    }
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) {
      return study.sensitivity[static_cast<size_t>(x)].swing > study.sensitivity[static_cast<size_t>(y)].swing;
    });
    if (order.size() >= 2) {
      SensitivityGrid grid;
      grid.a = order[0];
      grid.b = order[1];
      const Assumption& aa = study.assumptions[static_cast<size_t>(grid.a)];
      const Assumption& ab = study.assumptions[static_cast<size_t>(grid.b)];
      const double va[3] = {aa.low, aa.value, aa.high}, vb[3] = {ab.low, ab.value, ab.high};
      const std::optional<AssumptionCase> cases[3] = {AssumptionCase::kLow, std::nullopt, AssumptionCase::kHigh};
      CaseJob cells[3][3];
      for (int i = 0; i < 3; ++i) {
        grid.values_a[i] = va[i];
        grid.values_b[i] = vb[i];
        for (int j = 0; j < 3; ++j) {
          std::vector<std::pair<size_t, AssumptionCase>> applied;
          if (cases[i]) applied.emplace_back(static_cast<size_t>(grid.a), *cases[i]);
          if (cases[j]) applied.emplace_back(static_cast<size_t>(grid.b), *cases[j]);
          if (applied.empty()) continue;  // the centre is the reference baseline
          cells[i][j] = add_variant(applied, absl::StrCat(ref_label, " sensitivity grid ", aa.name, " x ", ab.name));
        }
      }
      planner.BuildPending(arena);
      planner.RunPending(arena, &study.perf);
      for (int i = 0; i < 3; ++i) {
        for (int j = 0; j < 3; ++j) {
          if (i == 1 && j == 1) {
            grid.scaling_ratio[i][j] = ref_scaling_ratio;
            grid.ok[i][j] = true;
            continue;
          }
          const CaseJob& cj = cells[i][j];
          grid.ok[i][j] = cj.status.ok() && planner.result(cj.job).ok();
          if (grid.ok[i][j]) grid.scaling_ratio[i][j] = planner.result(cj.job)->scaling_ratio;
        }
      }
      study.grid = grid;
    }
  }

  if (options.checks) {
    Checks checks;
    checks.gpus = ref.gpus;
    const absl::StatusOr<SimResult>* r[kCheckJobs];
    for (size_t v = 0; v < kCheckJobs; ++v) {
      if (!check_jobs[v].status.ok() && checks.status.ok()) checks.status = check_jobs[v].status;
      r[v] = check_jobs[v].job >= 0 ? &planner.result(check_jobs[v].job) : nullptr;
      if (r[v] != nullptr && !r[v]->ok() && checks.status.ok()) checks.status = r[v]->status();
    }
    if (checks.status.ok()) {
      checks.imbalance_random = (*r[0])->imbalance;
      checks.imbalance_bbs = (*r[1])->imbalance;
      checks.imbalance_random_recompute = (*r[2])->imbalance;
      checks.imbalance_bbs_recompute = (*r[3])->imbalance;
      checks.step_sm_based_s = (*r[4])->step_mean_s;
      checks.step_sm_free_s = (*r[5])->step_mean_s;
      checks.sm_free_recovery =
          checks.step_sm_based_s > 0 ? (checks.step_sm_based_s - checks.step_sm_free_s) / checks.step_sm_based_s : 0;
    }
    study.checks = checks;
  }
  study.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - study_start).count();
  return study;
}

}  // namespace gemtb::sim::report
