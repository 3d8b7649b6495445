// Simulate(): wires the parts together. Groups and the step template from the plan and model,
// batch draws per rank and step, noise and memory decisions, the event run, then the summary.
#include "sim/engine/simulate.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/description/model_graph.h"
#include "model/numerics/philox.h"
#include "model/random/splitmix64.h"
#include "sim/engine/collective_timing.h"
#include "sim/engine/engine.h"
#include "sim/engine/memory_model.h"
#include "sim/workload/alltoallv_traffic.h"
#include "sim/workload/batch_draw.h"
#include "sim/workload/rank_groups.h"
#include "sim/workload/step_template.h"

namespace gemtb::sim {
namespace {

constexpr uint64_t kPurposeNoise = 0x4E4F4953;  // "NOIS"
constexpr uint64_t kPurposeSlow = 0x534C4F57;   // "SLOW"

double Normal(uint64_t seed, uint64_t stream, uint64_t element) {
  const numerics::Philox4x32 w = numerics::PhiloxBlock(seed, stream, element);
  const double u1 = (static_cast<double>((static_cast<uint64_t>(w.v[0]) << 21) ^ w.v[1]) + 1.0) *
                    (1.0 / 9007199254740993.0);
  const double u2 = static_cast<double>(w.v[2]) * (1.0 / 4294967296.0);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925 * u2);
}

// The self-attention mask of sequence j: the first attention op on j whose FLOPs count pairs.
AttentionMask SequenceMask(const model::ModelGraph& m, int j) {
  for (const model::Op& op : m.ops) {
    if (op.seq == j && op.attn.has_value() && (op.flops.fwd.P != 0 || op.flops.bwd.P != 0)) return op.attn->mask;
  }
  return AttentionMask{};
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

}  // namespace

absl::StatusOr<SimResult> Simulate(const Scenario& scenario, const Counterfactuals& cf, const SimOptions& options) {
  if (scenario.model == nullptr) return absl::InvalidArgumentError("model: missing (no model graph)");
  const model::ModelGraph& m = *scenario.model;
  const int world = scenario.cluster.world_size;
  if (world < 1) return absl::InvalidArgumentError(absl::StrCat("cluster.world_size: ", world, " must be >= 1"));
  const int W = options.warmup_steps >= 0 ? options.warmup_steps : scenario.batches.warmup_steps;
  const int M = options.measured_steps >= 0 ? options.measured_steps : scenario.batches.measured_steps;
  if (W < 0 || M < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batches.measured_steps: ", M, " must be >= 1 (warmup ", W, ")"));
  }
  const int steps = W + M;

  absl::StatusOr<RankGroups> groups = BuildRankGroups(scenario.plan, world);
  if (!groups.ok()) return groups.status();
  absl::StatusOr<StepTemplate> tpl_or = BuildStepTemplate(scenario, *groups);
  if (!tpl_or.ok()) return tpl_or.status();
  StepTemplate& tpl = *tpl_or;
  absl::StatusOr<CollectiveTiming> timing = CollectiveTiming::Create(scenario.cluster, scenario.plan.collectives,
                                                                     tpl.layouts);
  if (!timing.ok()) return timing.status();

  // Batches.
  BatchDrawConfig bc;
  bc.seed = scenario.seed;
  bc.world = world;
  bc.steps = steps;
  double pooled_features = 0, pooled_ids = 0, seq_features = 0;
  for (const model::GraphTable& t : m.tables) {
    for (const std::string& f : t.features) {
      const bool pooled = f.find('.') == std::string::npos;
      (pooled ? pooled_features : seq_features) += 1;
      if (pooled) pooled_ids += scenario.batches.PoolingOf(t.name);
    }
  }
  for (int j = 0; j < static_cast<int>(m.sequences.size()); ++j) {
    bc.sequences.push_back({m.sequences[j].n_s, SequenceMask(m, j), m.sequences[j].lmax});
  }
  const double J = std::max<double>(1, static_cast<double>(m.sequences.size()));
  bc.kjt_per_sample = 4.0 * (pooled_features + seq_features) + 8.0 * pooled_ids;
  bc.kjt_per_token = 8.0 * seq_features / J;
  // The drawn statistics, shared with the study's other runs of the same batches (read only).
  BatchStatsCache::Stats drawn;
  if (options.batch_cache != nullptr) {
    absl::StatusOr<BatchStatsCache::Stats> shared = options.batch_cache->Get(bc, scenario.batches, options.threads);
    if (!shared.ok()) return shared.status();
    drawn = *std::move(shared);
  } else {
    absl::StatusOr<std::vector<double>> own = DrawBatchStats(bc, scenario.batches, options.threads);
    if (!own.ok()) return own.status();
    drawn = std::make_shared<const std::vector<double>>(*std::move(own));
  }
  const int width = tpl.layout.size();
  // The sparse all-to-allvs at their slowest member's bytes (placement and hot ids), at the mean
  // rank-step's batch (the same for every counterfactual: perfect balance keeps the mean).
  {
    const std::vector<double>& d = *drawn;
    std::vector<double> mean(width, 0.0);
    for (size_t row = 0; row < d.size() / width; ++row) {
      for (int k = 0; k < width; ++k) mean[k] += d[row * width + k];
    }
    for (double& v : mean) v /= static_cast<double>(d.size() / width);
    ApplyAllToAllvMaxRowEquivalent(tpl, AllToAllvMaxRowFactors(tpl, mean));
  }
  // Perfect balance gives every rank of a step the step's mean row: a copy of its own.
  std::vector<double> balanced;
  if (cf.perfect_balance) {
    balanced = *drawn;
    for (int s = 0; s < steps; ++s) {
      std::vector<double> mean(width, 0.0);
      double* base = balanced.data() + static_cast<size_t>(s) * world * width;
      for (int r = 0; r < world; ++r) for (int k = 0; k < width; ++k) mean[k] += base[static_cast<size_t>(r) * width + k];
      for (double& x : mean) x /= world;
      for (int r = 0; r < world; ++r) std::copy(mean.begin(), mean.end(), base + static_cast<size_t>(r) * width);
    }
  }
  const std::vector<double>& stats = cf.perfect_balance ? balanced : *drawn;

  // Noise: persistent slow ranks x per-step lognormal with mean 1.
  const Noise& nz = scenario.noise;
  std::vector<double> noise(static_cast<size_t>(steps) * world, 1.0);
  if (!cf.no_noise) {
    std::vector<double> slow(world, 1.0);
    for (int r : nz.slow_ranks) if (r >= 0 && r < world) slow[r] = nz.slow_factor;
    if (nz.slow_fraction > 0) {
      for (int r = 0; r < world; ++r) {
        const double u = static_cast<double>(numerics::PhiloxWord(scenario.seed, kPurposeSlow, static_cast<uint64_t>(r))) /
                         4294967296.0;
        if (u < nz.slow_fraction) slow[r] = nz.slow_factor;
      }
    }
    const double sg = nz.step_sigma;
    for (int s = 0; s < steps; ++s) {
      for (int r = 0; r < world; ++r) {
        double f = slow[r];
        if (sg > 0) {
          const uint64_t stream = SplitMix64(kPurposeNoise ^ static_cast<uint64_t>(r));
          f *= std::exp(sg * Normal(scenario.seed, stream, static_cast<uint64_t>(s)) - 0.5 * sg * sg);
        }
        noise[static_cast<size_t>(s) * world + r] = f;
      }
    }
  }

  MemoryPlanOutput mem = PlanMemory(tpl, scenario, stats, steps, world, cf.no_recompute);

  // Contention: SM-based collectives hold kappa per op (the calibration's per-op value,
  // else its measured kappa, else s / (n_SM - s)); SM-free ones the copy engine's kappa. The
  // counterfactual sm_free is contention-free (κ = 0).
  const CollectivesPlan& cp = scenario.plan.collectives;
  const Calibration& cal = scenario.cluster.calibration;
  std::array<double, 5> kappa{};
  if (!cf.sm_free && cp.library == "sm_based") {
    const double s = cp.sms_per_collective;
    const double n = scenario.cluster.gpu.sm_count;
    const double base = cal.kappa.has_value() ? *cal.kappa : (n > s ? s / (n - s) : 1.0);
    for (size_t o = 0; o < kappa.size(); ++o) kappa[o] = cal.kappa_ops[o].value_or(base);
  } else if (!cf.sm_free) {
    kappa.fill(cal.kappa_copy_engine.value_or(0.0));
  }

  EngineInput in;
  in.tpl = &tpl;
  in.timing = &*timing;
  in.world = world;
  in.steps = steps;
  in.warmup = W;
  in.stats = &stats;
  in.checkpointed = &mem.checkpointed;
  in.noise = &noise;
  in.kappa = kappa;
  in.copy_engine = cp.library != "sm_based";
  in.processor_sharing = cp.flow == "maxmin";
  in.ideal_network = cf.ideal_network;
  in.jitter_sigma = cf.no_noise ? 0.0 : nz.collective_jitter_sigma;
  in.a2av_per_rank = scenario.plan.collectives.a2av_end == "per_rank";
  in.seed = scenario.seed;
  in.trace_step = options.trace_step >= 0 ? options.trace_step : W;
  if (options.trace) {
    in.traced.assign(world, 0);
    if (options.trace_ranks.empty()) {
      for (int r = 0; r < std::min(world, 8); ++r) in.traced[r] = 1;
    } else {
      for (int r : options.trace_ranks) if (r >= 0 && r < world) in.traced[r] = 1;
    }
    if (options.trace_slowest && in.trace_step < steps) {
      // The slowest rank of the traced step, by its model FLOPs and noise (known before the run).
      int slowest = 0;
      double worst = -1;
      for (int r = 0; r < world; ++r) {
        const absl::Span<const double> x(stats.data() + (static_cast<size_t>(in.trace_step) * world + r) * width, width);
        const double w = tpl.model_flops.Eval(x) * noise[static_cast<size_t>(in.trace_step) * world + r];
        if (w > worst) { worst = w; slowest = r; }
      }
      in.traced[slowest] = 1;
    }
  }
  absl::StatusOr<EngineOutput> run = RunEngine(in);
  if (!run.ok()) return run.status();

  // ---- the summary ----
  SimResult res;
  res.world_size = world;
  res.events = run->events;
  for (int s = W; s < steps; ++s) res.step_times_s.push_back(run->step_end_s[s] - (s > 0 ? run->step_end_s[s - 1] : 0.0));
  res.step_mean_s = std::accumulate(res.step_times_s.begin(), res.step_times_s.end(), 0.0) / M;
  res.step_p50_s = Percentile(res.step_times_s, 0.5);
  res.step_p99_s = Percentile(res.step_times_s, 0.99);
  res.ranks = std::move(run->ranks);
  double flops_total = 0, work_sum = 0, work_max = 0, bound = 0;
  std::vector<double> mean_stats(width, 0.0);
  for (int r = 0; r < world; ++r) {
    RankStats& x = res.ranks[r];
    for (int s = W; s < steps; ++s) {
      const absl::Span<const double> row(stats.data() + (static_cast<size_t>(s) * world + r) * width, width);
      x.flops += tpl.model_flops.Eval(row);
      for (int k = 0; k < width; ++k) mean_stats[k] += row[k];
    }
    for (double* f : {&x.compute_s, &x.exposed_comm_s, &x.wait_s, &x.recompute_s, &x.contention_s,
                      &x.nonlayer_compute_s, &x.flops, &x.work_s}) {
      *f /= M;
    }
    x.static_bytes = mem.static_bytes[r];
    x.peak_activation_bytes = mem.peak_activation_bytes[r];
    flops_total += x.flops;
    work_sum += x.work_s;
    work_max = std::max(work_max, x.work_s);
    bound = std::max(bound, std::max(x.work_s, run->comm_s[r] / M));
  }
  for (double& v : mean_stats) v /= static_cast<double>(world) * M;
  res.step_latency_bound_s = bound;
  (void)work_sum;
  (void)work_max;
  // Imbalance per measured step (max_r W_r / mean_r W_r - 1), averaged over the steps: a policy that
  // moves work between steps (BBS) must not look balanced just because its step sums are.
  res.imbalance = 0;
  for (int s = W; s < steps; ++s) {
    const double* w = run->step_work_s.data() + static_cast<size_t>(s) * world;
    const double mean = std::accumulate(w, w + world, 0.0) / world;
    const auto [mn, mx] = std::minmax_element(w, w + world);
    // Identical ranks are balanced exactly (the mean of equal values can round one ulp off).
    if (*mn != *mx && mean > 0) res.imbalance += std::max(0.0, *mx / mean - 1.0) / M;
  }
  const double peak = tpl.peak_flops;
  const absl::Span<const double> ms(mean_stats);
  const double local_f = tpl.local_flops.Eval(ms);
  const double local_t = EvalTime(tpl.local_time, tpl.local_curve_terms, ms);
  res.local_mfu = local_t > 0 ? local_f / (peak * local_t) : 0.0;
  const double f_mean = flops_total / world;
  res.t_local_s = res.local_mfu > 0 ? f_mean / (peak * res.local_mfu) : 0.0;
  res.e2e_mfu = res.step_mean_s > 0 ? flops_total / (world * peak * res.step_mean_s) : 0.0;
  res.scaling_ratio = res.step_mean_s > 0 ? res.t_local_s / res.step_mean_s : 0.0;

  double compute_mean = 0, comm_mean = 0, exposed_mean = 0, contention_mean = 0, recompute_mean = 0;
  for (int r = 0; r < world; ++r) {
    const RankStats& x = res.ranks[r];
    compute_mean += (x.compute_s + x.recompute_s + x.nonlayer_compute_s) / world;
    comm_mean += run->comm_s[r] / M / world;
    exposed_mean += (x.exposed_comm_s + x.wait_s) / world;
    contention_mean += x.contention_s / world;
    recompute_mean += x.recompute_s / world;
  }
  res.indicators.c1_compute_over_comm = comm_mean > 0 ? compute_mean / comm_mean : 0.0;
  res.indicators.c2_exposed_and_contention_share = res.step_mean_s > 0 ? (exposed_mean + contention_mean) / res.step_mean_s : 0;
  res.indicators.c3_recompute_share = res.step_mean_s > 0 ? recompute_mean / res.step_mean_s : 0.0;
  res.indicators.c4_imbalance = res.imbalance;
  res.memory = mem.fit;

  for (int i = 0; i < static_cast<int>(tpl.tasks.size()); ++i) {
    const TaskTemplate& t = tpl.tasks[i];
    const EngineOutput::CollSite& s = run->sites[i];
    if (!t.collective || s.calls == 0) continue;
    CollectiveStats c;
    c.group_class = t.group_class;
    c.op = t.op;
    c.name = t.name;
    c.algo = s.algo;
    c.members = tpl.layouts[t.layout].size;
    c.bytes = s.bytes / s.calls;
    c.duration_s = s.duration_s / s.calls;
    c.algbw_Bps = c.duration_s > 0 ? c.bytes / c.duration_s : 0.0;
    c.busbw_Bps = c.algbw_Bps * BusBwFactor(t.op, c.members);
    c.exposed_fraction = s.member_time_s > 0 ? std::min(1.0, s.exposed_s / s.member_time_s) : 0.0;
    c.calls_per_step = s.calls / (static_cast<double>(M) * tpl.layouts[t.layout].count);
    res.collectives.push_back(std::move(c));
  }
  res.stream_names = StreamNames();
  res.trace = std::move(run->trace);
  std::stable_sort(res.trace.begin(), res.trace.end(), [](const TraceEvent& a, const TraceEvent& b) {
    return a.rank != b.rank ? a.rank < b.rank : (a.stream != b.stream ? a.stream < b.stream : a.start_s < b.start_s);
  });
  return res;
}

}  // namespace gemtb::sim
