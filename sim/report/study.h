// A what-if study: a scenario swept over GPU counts (weak scaling) and any
// fields (`--set plan.dense.fsdp_shard_group=128,256`), each point with its loss attribution
// (baseline + 5 cumulative counterfactual reruns), plus at the reference size (4,096 GPUs when
// swept) the sensitivity of SR to each assumption (low/high, then the two most influential on their
// 3 x 3 grid), the checks (imbalance random vs BBS, SM-free recovery) and the lever table (each of
// the GEM article's levers switched off alone).
//
// Every run is independent: they go in parallel on oneTBB, each result into its own slot, so the
// Study is identical for any thread count. Identical runs (same effective scenario and switches)
// are run once. The simulator is passed in (tests use hand-made results).
#ifndef GEMTB_SIM_REPORT_STUDY_H_
#define GEMTB_SIM_REPORT_STUDY_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sim/engine/simulate.h"
#include "sim/report/attribution.h"
#include "sim/scenario/op_efficiency.h"
#include "sim/scenario/result.h"
#include "sim/scenario/scenario.h"
#include "sim/scenario/scenario_json.h"

namespace gemtb::sim::report {

using SimulateFn =
    std::function<absl::StatusOr<SimResult>(const Scenario&, const Counterfactuals&, const SimOptions&)>;

// One swept field and its values (JSON text each).
struct FieldSweep {
  std::string path;
  std::vector<std::string> values;
};

// `--gpus 64,128,...` default of gem-default: 64 .. 16,384 in powers of two.
std::vector<int> DefaultGpuSweep();

struct StudyOptions {
  std::vector<int> gpus;           // empty: the scenario's own world size
  std::vector<FieldSweep> sets;    // cross product, first field outermost; GPU count innermost
  int warmup_steps = -1;           // overrides of the scenario's step counts when >= 0
  int measured_steps = -1;
  std::vector<int> trace_ranks;    // empty: the engine's default (ranks 0-7 + the slowest)
  int trace_step = -1;             // -1: the first measured step
  bool attribution = true;         // the 5 reruns per point
  bool shapley = false;            // also the order-free split: all 32 subsets of the reruns per point
  bool sensitivity = true;         // needs assumptions in the scenario
  bool checks = true;              // imbalance random vs bbs, SM-free recovery at the reference size
  bool levers = true;              // the lever table at the reference size
  // Whether the report compares the checks with the GEM article's published figures (the default
  // scenario, which models the article's job); a user's own scenario gets its numbers only.
  bool published_targets = false;
  int reference_gpus = 4096;       // used when swept, else the largest swept size
  int threads = 0;                 // 0: oneTBB's default
  std::function<void(const std::string&)> progress;  // one line per finished run, any order
};

struct SweepPoint {
  int gpus = 0;
  std::vector<std::pair<std::string, std::string>> settings;  // this point's --set values
  absl::Status status;                  // not OK: the scenario is invalid here (reported; the sweep goes on)
  std::vector<std::string> warnings;    // the scenario's warnings at this point
  std::optional<SimResult> base;        // the baseline run (traced at the reference point)
  std::optional<Attribution> attribution;
  std::optional<Attribution> shapley;   // --shapley: deltas are the Shapley shares (attribution.h)
};

struct SensitivityCase {
  double value = 0;  // the assumption's first field in this case
  absl::Status status;
  double scaling_ratio = 0;
  double step_s = 0;
  bool fits = true;  // false: does_not_fit (its SR is the step's if memory were no limit)
};

struct SensitivityRow {
  Assumption assumption;
  SensitivityCase low, high;
  double swing = 0;  // |SR(high) - SR(low)|
};

// SR on the 3 x 3 grid (low, value, high) of the two assumptions that moved SR most.
struct SensitivityGrid {
  int a = 0, b = 0;  // rows of Study::sensitivity
  double values_a[3] = {}, values_b[3] = {};  // low, the scenario's value, high
  double scaling_ratio[3][3] = {};  // [i over a][j over b]
  bool ok[3][3] = {};
  // The indices worth showing: the centre, and low and high where they differ from it (an assumption
  // whose low is its value, e.g. no hot-id skew, would repeat the centre's row).
  static std::vector<int> Shown(const double (&values)[3]) {
    std::vector<int> shown;
    for (int i = 0; i < 3; ++i) {
      if (i == 1 || values[i] != values[1]) shown.push_back(i);
    }
    return shown;
  }
};

// The checks at the reference size, each beside the GEM article's published figure.
struct Checks {
  int gpus = 0;
  absl::Status status;
  // Heaviest rank over the mean, minus 1, of the batches alone (noise off: a per-rank noise draw adds
  // its own maximum, which no batch policy removes; recompute off: per-rank checkpoint decisions
  // amplify the batches' imbalance). The article's ~15% and "BBS halves it" are judged on these.
  double imbalance_random = 0, imbalance_bbs = 0;
  // The same with the scenario's per-rank recompute (noise off), reported beside them.
  double imbalance_random_recompute = 0, imbalance_bbs_recompute = 0;
  double step_sm_based_s = 0, step_sm_free_s = 0;  // as the scenario runs (noise on)
  double sm_free_recovery = 0;  // (T_sm_based - T_sm_free) / T_sm_based
};

// One of the GEM article's levers switched off alone at the reference size (every other field as
// the scenario has it), beside the effect the article publishes.
struct Lever {
  std::string name;       // e.g. "SM-free -> SM-based collectives"
  std::vector<std::pair<std::string, std::string>> settings;  // the fields set to switch it off
  std::string published;  // the article's effect of the lever (and where it says so)
};

// The GEM article's levers as fields of a scenario at `gpus` GPUs (1D FSDP and V1 use the world).
std::vector<Lever> ArticleLevers(int gpus);

struct LeverRow {
  Lever lever;
  absl::Status status;
  bool fits = true;
  double step_s = 0;
  double qps_gain = 0;            // the QPS the lever brings: T_off / T_baseline - 1 (as the article states it)
  double peak_memory_bytes = 0;   // max over ranks of static + peak activation bytes
  double static_bytes = 0;        // max over ranks
};

struct LeverTable {
  int gpus = 0;
  double base_step_s = 0, base_peak_memory_bytes = 0, base_static_bytes = 0;
  std::vector<LeverRow> rows;
};

struct RunPerf {
  std::string label;
  int gpus = 0;
  uint64_t events = 0;
  double wall_s = 0;
};

// The measured per-layer calibration the scenario reads, and how many (op, direction) pairs of its
// model take each efficiency source.
struct LayerCalibrationUse {
  LayerCalibration file;
  EfficiencySourceCounts counts;
};

struct Study {
  std::string scenario;
  uint64_t seed = 0;
  std::optional<LayerCalibrationUse> layer_calibration;  // none: every op at its kind's efficiency
  std::vector<Assumption> assumptions;
  std::vector<SweepPoint> points;  // sets outermost, GPU counts innermost, in the order given
  int reference = -1;              // index into points (sensitivity, checks, trace, ranks.csv)
  std::vector<SensitivityRow> sensitivity;
  std::optional<SensitivityGrid> grid;
  std::optional<Checks> checks;
  std::optional<LeverTable> levers;
  bool published_targets = false;
  // Wall clock (perf.json only).
  std::vector<RunPerf> perf;
  double wall_s = 0;
  int threads = 0;
};

// Fails (InvalidArgument) only when the scenario is invalid at its own world size as given, when an
// option is malformed, or when no point of the sweep is valid.
absl::StatusOr<Study> RunStudy(const ScenarioDocument& doc, const StudyOptions& options, const SimulateFn& simulate);

}  // namespace gemtb::sim::report

#endif  // GEMTB_SIM_REPORT_STUDY_H_
