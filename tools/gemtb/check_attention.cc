// gemtb check attention: random jagged cases per family (activation x mask), each run on the GPU
// kernels, the fp64 oracle and its emulate mode, and judged with the acceptance criteria
// (tools/check/attention_check.h says which and how). Tiers: small cases judged whole, scale-tier
// batches (tools/check/scale_case.h) and the eight benchmark cases judged on a sample of their
// sequences (tools/check/scale_sample.h). This file holds the flags, the runs and the printing.
// Every case has its own seed, printed with any failure, and `--family F --case-seed X` (with the
// tier) runs that one case again.
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/common/status_macros.h"
#include "nlohmann/json.hpp"
#include "tools/check/attention_cases.h"
#include "tools/check/attention_check.h"
#include "tools/check/gpu_watchdog.h"
#include "tools/check/oracle_run.h"
#include "tools/check/scale_case.h"
#include "tools/check/scale_sample.h"
#include "tools/gemtb/command.h"
#include "tools/gemtb/flags.h"
#if GEMTB_HAVE_CUDA
#include "gpu/attention/api.h"
#include "gpu/attention/kernel_policy.h"
#include "gpu/bench/bench_cases.h"
#include "tools/check/attention_gpu.h"
#endif

namespace gemtb::cli {
namespace {

using check::CaseResult;
using check::Family;
using check::FamilyStats;
using check::GpuOutputs;
using check::kNumTensors;
using check::kTensors;
using Clock = std::chrono::steady_clock;

constexpr char kCommand[] = "check attention";
constexpr int64_t kScaleSeedSalt = 1000;  // scale-tier case seeds: CaseSeed(seed, salt + family, i)
constexpr int64_t kBenchSeedSalt = 2000;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Settings {
  bool small = false, scale = false, bench = false;
  int64_t small_cases = 100, scale_cases = 20;
  int64_t seed = 1;
  std::optional<int64_t> case_seed;
  std::vector<Family> families;
  int64_t small_max_length = 300, scale_max_length = 8192;
  std::optional<check::ScalePairing> pairing;
  int64_t sample_budget = check::kSamplePairBudget;
  std::vector<std::string> bench_cases;
  std::string kernel_flags;  // " --forward-kernel K ..." for replay lines
  std::optional<int64_t> time_limit;  // seconds; scale and bench tiers
  int64_t gpu_timeout = 300;          // seconds one case's GPU call may take before it counts as hung
  std::string json_path;
  bool verbose = false, tanh_approx = false;
};

int64_t ScaleSeed(const Settings& s, const Family& f, int64_t i) {
  return s.case_seed ? *s.case_seed
                     : check::CaseSeed(s.seed, kScaleSeedSalt + check::FamilyIndex(f), i);
}

// Case i of a family takes pairing i mod 4, so that every family meets every pairing; a replayed
// case (--case-seed) draws its pairing unless --pairing names it.
std::optional<check::ScalePairing> ScalePairingOf(const Settings& s, int64_t i) {
  if (s.pairing || s.case_seed) return s.pairing;
  return check::kAllScalePairings[i % 4];
}

#if GEMTB_HAVE_CUDA
// The summary table of one tier, and its JSON.
nlohmann::json Summarise(const std::string& tier, const std::vector<std::string>& names,
                         std::map<std::string, FamilyStats>& stats, FamilyStats& sum) {
  std::cout << "\n" << tier << " tier\n"
            << absl::StrFormat("%-20s %6s %6s %5s %7s %7s %7s  %s\n", "family", "cases", "pass", "fail",
                               "excused", "relaxed", "skipped", "worst error/bound, primary|secondary: O LSE dQ dK dV");
  nlohmann::json per_family = nlohmann::json::object();
  for (const std::string& name : names) {
    const FamilyStats& st = stats[name];
    std::string worst;
    nlohmann::json jw = nlohmann::json::object();
    for (int t = 0; t < kNumTensors; ++t) {
      absl::StrAppendFormat(&worst, " %.2f|%.2f", st.worst[t][0], st.worst[t][1]);
      jw[kTensors[t]] = {{"primary", st.worst[t][0]}, {"secondary", st.worst[t][1]}};
    }
    std::cout << absl::StrFormat("%-20s %6d %6d %5d %7d %7d %7d %s\n", name, st.cases, st.pass, st.fail,
                                 st.excused, st.relaxed, st.skipped, worst);
    per_family[name] = {{"cases", st.cases},       {"pass", st.pass},
                        {"fail", st.fail},         {"kink_excused", st.excused},
                        {"secondary_relaxed_cases", st.relaxed},
                        {"skipped_kernel_cannot_run", st.skipped},
                        {"bf16_cases", st.bf16},   {"worst_error_over_bound", jw}};
    for (int i = 0; i < check::kNumCheckHeadDims; ++i) {  // "d16_cases" .. "d128_cases"
      per_family[name][absl::StrCat("d", check::kCheckHeadDims[i], "_cases")] = st.by_dim[i];
    }
    sum.cases += st.cases;
    sum.pass += st.pass;
    sum.fail += st.fail;
    sum.excused += st.excused;
    sum.relaxed += st.relaxed;
    sum.skipped += st.skipped;
  }
  return per_family;
}

nlohmann::json Totals(const FamilyStats& sum) {
  return {{"cases", sum.cases}, {"pass", sum.pass}, {"fail", sum.fail}, {"kink_excused", sum.excused},
          {"secondary_relaxed_cases", sum.relaxed}, {"skipped_kernel_cannot_run", sum.skipped}};
}

// Prints a failed or excused case; returns its JSON.
nlohmann::json ReportFailure(const std::string& label, const CaseResult& r, const std::string& replay) {
  std::cout << (r.excused ? "EXCUSED (score at a kink) " : "FAIL ") << label << ": " << r.description << "\n";
  for (const std::string& m : r.failures) std::cout << "    " << m << "\n";
  std::cout << "    replay: " << replay << std::endl;
  return {{"case", label}, {"case_seed", r.case_seed}, {"excused", r.excused},
          {"description", r.description}, {"messages", r.failures}, {"replay", replay}};
}

#endif

#if GEMTB_HAVE_CUDA
// The eight benchmark cases (gpu/bench/bench_cases.h: lengths, heads, D, act and mask) as
// scale-tier cases in bf16 with randn values.
struct BenchEntry {
  check::ScaleCase c;
  int64_t seed;
  std::string replay;
};

absl::StatusOr<std::vector<BenchEntry>> BenchCases(const Settings& s) {
  std::vector<gpu::bench::BenchCase> specs;
  if (s.bench_cases.empty()) {
    specs = gpu::bench::SpecCases();
  } else {
    for (const std::string& name : s.bench_cases) {
      absl::StatusOr<gpu::bench::BenchCase> bc = gpu::bench::FindCase(name);
      if (!bc.ok()) return absl::InvalidArgumentError(absl::StrCat("--bench-cases: ", bc.status().message()));
      specs.push_back(*bc);
    }
  }
  std::vector<BenchEntry> out;
  for (size_t i = 0; i < specs.size(); ++i) {
    const gpu::bench::BenchCase& b = specs[i];
    const gpu::bench::CaseLengths lengths = gpu::bench::DrawLengths(b);
    check::ScaleCase c;
    c.name = b.name;
    c.pairing = b.seeds > 0 ? check::ScalePairing::kBroadcast
                            : (b.dense_kv > 0 ? check::ScalePairing::kCross : check::ScalePairing::kSelf);
    c.q_lengths = b.seeds > 0 ? std::vector<int64_t>{b.seeds} : lengths.q;
    c.kv_lengths = lengths.kv;
    c.max_lq = b.max_lq;
    c.max_lk = b.max_lk;
    c.heads = c.kv_heads = b.heads;
    c.head_dim = b.head_dim;
    c.options = b.options;
    c.input_type = ElementType::kBFloat16;
    c.values = check::ValueDistribution::kNormal;
    c.rule_max_q = b.seeds > 0 ? 0 : b.max_lq;
    c.rule_sparsity_q = b.sparsity;
    // The case's position in the benchmark list, so that --bench-cases picks the same values.
    size_t index = 0;
    for (size_t k = 0; k < gpu::bench::SpecCases().size(); ++k) {
      if (gpu::bench::SpecCases()[k].name == b.name) index = k;
    }
    const int64_t seed = check::CaseSeed(s.seed, kBenchSeedSalt, static_cast<int64_t>(index));
    c.value_seed = static_cast<uint64_t>(seed);
    out.push_back({c, seed,
                   absl::StrCat("gemtb check attention --tier bench --bench-cases ", b.name, " --seed ", s.seed,
                                s.kernel_flags)});
  }
  return out;
}

// Generates the whole batch's inputs (Q, K, V, dO as 16-bit patterns, one tensor at a time) as the
// GPU call does, and prints their size and time (the bench tier's dry run, which CUDA builds have).
void TimeInputs(const check::ScaleCase& c) {
  int64_t elements = 0;
  const auto t0 = Clock::now();
  for (check::ScaleTensor t : {check::ScaleTensor::kQ, check::ScaleTensor::kK, check::ScaleTensor::kV,
                               check::ScaleTensor::kDo}) {
    elements += static_cast<int64_t>(check::ScaleBits(c, t).size());
  }
  std::cout << absl::StrFormat("      inputs: %d elements (Q, K, V, dO) in %.2f s on %d threads\n", elements,
                               Since(t0), tbb::this_task_arena::max_concurrency())
            << std::flush;
}
#endif

// Prints one sampled case (shape, item count, sample) and times the oracle's part of its judgement
// (forward and backward, fp64 and emulate) on `threads` threads (0 = all).
absl::StatusOr<double> DryRunCase(const std::string& label, const check::ScaleCase& c, int64_t seed,
                                  int64_t sample_budget, int threads) {
  const int64_t items = check::ForwardItems(c);
  const check::ScaleSample sample = check::DrawSample(c, static_cast<uint64_t>(seed), sample_budget);
  const auto t0 = Clock::now();
  const check::AttentionCase sampled = check::SampledCase(c, sample);
  const std::vector<double> d_o = check::SampledCotangent(c, sample);
  for (reference::Precision p : {reference::Precision::kOracle, reference::Precision::kEmulate}) {
    absl::StatusOr<check::OracleRun> run = check::RunOracle(sampled, d_o, {p, threads});
    if (!run.ok()) return run.status();
  }
  const double seconds = Since(t0);
  std::cout << absl::StrFormat("  %s: %s\n      TQ=%d TK=%d TO=%d items=%d (%.1f per SM)\n      sample: %s; oracle %.2f s\n",
                               label, check::DescribeScale(c), check::ScaleQueryTokens(c), check::ScaleKvTokens(c),
                               check::ScaleOutputTokens(c), items, static_cast<double>(items) / check::kH200Sms,
                               check::DescribeSample(c, sample), seconds);
  return seconds;
}

// --dry-run: what the tiers draw, with the oracle's time on each scale-tier sample (forward and
// backward, fp64 and emulate, on one thread, as the judgement runs it). Needs no GPU.
absl::Status DryRun(const Settings& s) {
  if (s.small) {
    std::cout << "small tier: " << s.small_cases << " cases per family, lengths 0.." << s.small_max_length
              << ", 1-3 K/V sequences, up to 4 outputs, H <= 4\n";
    for (const Family& f : s.families) {
      int64_t longest = 0;
      for (int64_t i = 0; i < (s.case_seed ? 1 : s.small_cases); ++i) {
        const int64_t seed = s.case_seed ? *s.case_seed : check::CaseSeed(s.seed, check::FamilyIndex(f), i);
        const check::AttentionCase c = check::DrawCase(seed, f, s.small_max_length);
        for (int64_t l : c.shape.q_lengths) longest = std::max(longest, l);
        for (int64_t l : c.shape.kv_lengths) longest = std::max(longest, l);
        if (s.verbose) std::cout << "  " << f.Name() << " case " << i << " seed " << seed << ": " << c << "\n";
      }
      std::cout << absl::StrFormat("  %-20s longest sequence drawn %d\n", f.Name(), longest);
    }
  }
  if (s.scale) {
    std::cout << "scale tier: " << s.scale_cases << " cases per family; oracle time on the sample, one thread\n";
    double total = 0, worst = 0;
    for (const Family& f : s.families) {
      for (int64_t i = 0; i < (s.case_seed ? 1 : s.scale_cases); ++i) {
        const int64_t seed = ScaleSeed(s, f, i);
        const check::ScaleCase c = check::DrawScaleCase(seed, f, s.scale_max_length, ScalePairingOf(s, i));
        absl::StatusOr<double> seconds = DryRunCase(absl::StrFormat("%s case %d seed %d", f.Name(), i, seed), c,
                                                    seed, s.sample_budget, 1);
        if (!seconds.ok()) return seconds.status();
        total += *seconds;
        worst = std::max(worst, *seconds);
      }
    }
    std::cout << absl::StrFormat("scale tier oracle: %.1f s in all, %.2f s at most per case (this machine, one thread)\n",
                                 total, worst);
  }
  if (s.bench) {
#if GEMTB_HAVE_CUDA
    std::cout << "bench tier: oracle time on the sample and input generation time, all threads\n";
    absl::StatusOr<std::vector<BenchEntry>> entries = BenchCases(s);
    if (!entries.ok()) return entries.status();
    for (const BenchEntry& e : *entries) {
      absl::StatusOr<double> seconds = DryRunCase("bench case", e.c, e.seed, s.sample_budget, 0);
      if (!seconds.ok()) return seconds.status();
      TimeInputs(e.c);
    }
#else
    std::cout << "bench tier: the benchmark cases come from gpu/bench, which only a CUDA build has\n";
#endif
  }
  return absl::OkStatus();
}

#if GEMTB_HAVE_CUDA
// A case whose GPU call never returned: reported as a failure with its replay flags (and in --json),
// then the process ends, since the stuck kernel cannot be cancelled and the CUDA context cannot be
// torn down while it runs. Runs on the watchdog's thread while the main thread waits in the call.
[[noreturn]] void ReportHang(const Settings& s, const std::string& label, std::chrono::milliseconds limit) {
  const double seconds = static_cast<double>(limit.count()) / 1000.0;
  std::cout << std::flush;
  std::cout << absl::StrFormat("FAILED (hung) %s: the GPU call did not return within %.0f s (--gpu-timeout); a "
                               "kernel waits on something that never comes\n",
                               label, seconds)
            << std::flush;
  if (!s.json_path.empty()) {
    std::ofstream out(s.json_path);
    out << nlohmann::json{{"seed", s.seed}, {"hung", {{"case", label}, {"gpu_timeout_seconds", seconds}}}}.dump(2)
        << "\n";
  }
  std::_Exit(kExitCheckFailed);
}

struct Runner {
  const Settings& s;
  gpu::KernelOverride kernels;
  check::GpuWatchdog& watchdog;
  nlohmann::json failures = nlohmann::json::array();
  bool all_pass = true;

  bool Skipped(const absl::Status& st) const { return st.code() == absl::StatusCode::kUnimplemented; }

  // The small tier: chunks of cases drawn in parallel, run on the GPU one after another, judged by
  // the oracle in parallel (one case per task); the results print in case order.
  nlohmann::json Small() {
    std::map<std::string, FamilyStats> stats;
    std::vector<std::string> names;
    constexpr int64_t kChunk = 64;
    double gpu_seconds = 0, judge_seconds = 0;
    const auto start = Clock::now();
    for (const Family& family : s.families) {
      names.push_back(family.Name());
      const size_t family_index = check::FamilyIndex(family);
      FamilyStats& st = stats[family.Name()];
      const int64_t total = s.case_seed ? 1 : s.small_cases;
      for (int64_t c0 = 0; c0 < total; c0 += kChunk) {
        const int64_t n = std::min(kChunk, total - c0);
        std::vector<check::AttentionCase> batch(n);
        std::vector<std::vector<double>> d_o(n);
        std::vector<int64_t> seeds(n);
        std::vector<GpuOutputs> gpu(n);
        std::vector<CaseResult> results(n);
        tbb::parallel_for(int64_t{0}, n, [&](int64_t i) {  // each case from its own seed alone
          seeds[i] = s.case_seed ? *s.case_seed : check::CaseSeed(s.seed, family_index, c0 + i);
          batch[i] = check::DrawCase(seeds[i], family, s.small_max_length);
          batch[i].options.tanh_approx = s.tanh_approx;  // read by the GPU call only
          d_o[i] = check::RandomCotangent(batch[i], static_cast<uint64_t>(seeds[i]) ^ 0x5DEECE66Dull);
        });
        const auto t_gpu = Clock::now();
        for (int64_t i = 0; i < n; ++i) {
          const check::GpuWatchdog::Guard guard = watchdog.Arm(absl::StrCat(
              family.Name(), " case ", c0 + i, "; replay: gemtb check attention --family ", family.Name(),
              " --case-seed ", seeds[i], s.tanh_approx ? " --tanh-approx" : "", s.kernel_flags));
          gpu[i] = check::RunGpu(batch[i], d_o[i], kernels);
        }
        const auto t_judge = Clock::now();
        tbb::parallel_for(int64_t{0}, n, [&](int64_t i) {
          if (Skipped(gpu[i].status)) return;
          results[i] = check::Judge(batch[i], d_o[i], gpu[i]);
          results[i].case_seed = seeds[i];
        });
        gpu_seconds += std::chrono::duration<double>(t_judge - t_gpu).count();
        judge_seconds += Since(t_judge);
        for (int64_t i = 0; i < n; ++i) {
          if (Skipped(gpu[i].status)) {
            ++st.skipped;
            if (s.verbose) std::cout << "skipped " << family.Name() << ": " << gpu[i].status.message() << std::endl;
            continue;
          }
          const CaseResult& r = results[i];
          check::Tally(batch[i].input_type, batch[i].dqk(), r, st);
          if (r.pass && !r.excused) {
            // Flushed: under a sanitizer with a time limit, the log shows how far the run came.
            if (s.verbose) std::cout << "pass " << family.Name() << " " << r.description << std::endl;
            continue;
          }
          const std::string replay =
              absl::StrCat("gemtb check attention --family ", family.Name(), " --case-seed ", r.case_seed,
                           s.tanh_approx ? " --tanh-approx" : "", s.kernel_flags);
          failures.push_back(ReportFailure(absl::StrCat(family.Name(), " case ", c0 + i), r, replay));
        }
      }
    }
    FamilyStats sum;
    nlohmann::json j = {{"cases_per_family", s.case_seed ? 1 : s.small_cases},
                        {"max_length", s.small_max_length},
                        {"families", Summarise("small", names, stats, sum)}};
    const double seconds = Since(start);
    std::cout << absl::StrFormat("%-20s %6d %6d %5d %7d %7d %7d   (%.1f s: GPU calls %.1f s, oracle and criteria %.1f s)\n",
                                 "total", sum.cases, sum.pass, sum.fail, sum.excused, sum.relaxed, sum.skipped,
                                 seconds, gpu_seconds, judge_seconds);
    all_pass = all_pass && sum.fail == 0;
    j["total"] = Totals(sum);
    j["seconds"] = seconds;
    j["gpu_call_seconds"] = gpu_seconds;
    j["oracle_seconds"] = judge_seconds;
    return j;
  }

  // One case through the kernels; the outputs are cut to the sample at once (the batch's are freed).
  GpuOutputs RunSampled(const check::ScaleCase& c, const check::ScaleSample& sample) {
    check::ScaleCase run = c;
    run.options.tanh_approx = s.tanh_approx;  // read by the GPU call only
    const check::ScaleOutputs out = check::RunGpuScale(run, kernels);
    return check::GatherSample(c, sample, out);
  }

  // Scale-tier and benchmark cases, in chunks: a chunk's cases run on the GPU one after another
  // while the previous chunk's samples are judged by the oracle (one case per task, or every thread
  // on one case when `threads_per_case` is 0); results print in case order, each line flushed.
  // Once --time-limit has passed, no case starts on the GPU and no judgement starts (those under way
  // finish: one case's GPU call or oracle, seconds); the cases not run and those run but not judged
  // are counted and printed, and the summary is written as always.
  struct Chunk {
    size_t begin = 0;
    std::vector<check::ScaleSample> samples;
    std::vector<GpuOutputs> gpu;
    std::vector<CaseResult> results;
    std::vector<char> judged;
    std::vector<double> oracle_s, gpu_s;
  };

  nlohmann::json Sampled(const std::string& tier, const std::vector<std::pair<std::string, check::ScaleCase>>& cases,
                         const std::vector<int64_t>& seeds, const std::vector<std::string>& replays,
                         int threads_per_case) {
    std::map<std::string, FamilyStats> stats;
    std::vector<std::string> names;
    for (const auto& [name, c] : cases) {
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
    nlohmann::json per_case = nlohmann::json::array();
    const size_t chunk = threads_per_case == 0 ? 1 : 16;
    double gpu_seconds = 0, judge_seconds = 0;
    const auto start = Clock::now();
    auto expired = [&] { return s.time_limit && Since(start) > static_cast<double>(*s.time_limit); };
    size_t not_judged = 0;

    auto report = [&](Chunk& k) {
      for (size_t i = 0; i < k.gpu.size(); ++i) {
        const auto& [name, c] = cases[k.begin + i];
        FamilyStats& st = stats[name];
        const int64_t items = check::ForwardItems(c);
        const std::string label = absl::StrFormat("%s case %d [%s] B=%d items=%d (%.1f per SM)", name, k.begin + i,
                                                  check::ScalePairingName(c.pairing),
                                                  check::PairScaleSequences(c).size(), items,
                                                  static_cast<double>(items) / check::kH200Sms);
        nlohmann::json jc = {{"case", name}, {"case_seed", seeds[k.begin + i]},
                             {"pairing", check::ScalePairingName(c.pairing)},
                             {"outputs", check::PairScaleSequences(c).size()},
                             {"items", items}, {"gpu_seconds", k.gpu_s[i]}};
        if (Skipped(k.gpu[i].status)) {
          ++st.skipped;
          std::cout << "skipped " << label << ": " << k.gpu[i].status.message() << std::endl;
          jc["result"] = "skipped";
          per_case.push_back(jc);
          continue;
        }
        if (!k.judged[i]) {
          ++not_judged;
          std::cout << "not judged (--time-limit) " << label << std::endl;
          jc["result"] = "not_judged_time_limit";
          per_case.push_back(jc);
          continue;
        }
        const CaseResult& r = k.results[i];
        check::Tally(c.input_type, c.head_dim, r, st);
        jc["result"] = r.pass ? (r.excused ? "excused" : "pass") : "fail";
        jc["sample"] = check::DescribeSample(c, k.samples[i]);
        jc["oracle_seconds"] = k.oracle_s[i];
        per_case.push_back(jc);
        if (r.pass && !r.excused) {
          std::cout << absl::StrFormat("pass %s; inputs and GPU %.2f s, oracle %.2f s", label, k.gpu_s[i],
                                       k.oracle_s[i]);
          if (s.verbose) std::cout << "\n    " << r.description;
          std::cout << std::endl;
          continue;
        }
        failures.push_back(ReportFailure(label, r, replays[k.begin + i]));
      }
    };

    tbb::task_group judging;
    std::optional<Chunk> previous;
    size_t done = 0;
    for (size_t c0 = 0; c0 < cases.size() && !expired(); c0 += chunk) {
      Chunk k;
      k.begin = c0;
      size_t n = std::min(chunk, cases.size() - c0);
      k.samples.resize(n);
      k.gpu.resize(n);
      k.results.resize(n);
      k.judged.assign(n, 0);
      k.oracle_s.assign(n, 0);
      k.gpu_s.assign(n, 0);
      for (size_t i = 0; i < n; ++i) {
        if (expired()) {  // the chunk ends with the cases run so far
          n = i;
          k.samples.resize(n);
          k.gpu.resize(n);
          k.results.resize(n);
          k.judged.resize(n);
          k.oracle_s.resize(n);
          k.gpu_s.resize(n);
          break;
        }
        const check::ScaleCase& c = cases[c0 + i].second;
        k.samples[i] = check::DrawSample(c, static_cast<uint64_t>(seeds[c0 + i]), s.sample_budget);
        const auto t = Clock::now();
        const check::GpuWatchdog::Guard guard = watchdog.Arm(absl::StrFormat(
            "%s case %d [%s]; replay: %s", cases[c0 + i].first, c0 + i, check::ScalePairingName(c.pairing),
            replays[c0 + i]));
        k.gpu[i] = RunSampled(c, k.samples[i]);
        k.gpu_s[i] = Since(t);
        gpu_seconds += k.gpu_s[i];
      }
      const auto t_wait = Clock::now();
      judging.wait();
      judge_seconds += Since(t_wait);
      if (previous) report(*previous);
      previous = std::move(k);
      done = c0 + n;
      Chunk* p = &*previous;
      judging.run([this, p, &cases, &seeds, &expired, threads_per_case] {
        tbb::parallel_for(size_t{0}, p->gpu.size(), [&](size_t i) {
          if (Skipped(p->gpu[i].status) || expired()) return;
          const auto t = Clock::now();
          p->results[i] = check::JudgeSample(cases[p->begin + i].second, p->samples[i], p->gpu[i], threads_per_case);
          p->results[i].case_seed = seeds[p->begin + i];
          p->oracle_s[i] = Since(t);
          p->judged[i] = 1;
        });
      });
    }
    const auto t_wait = Clock::now();
    judging.wait();
    judge_seconds += Since(t_wait);
    if (previous) report(*previous);

    FamilyStats sum;
    nlohmann::json j = {{"families", Summarise(tier, names, stats, sum)}, {"cases", per_case}};
    const double seconds = Since(start);
    std::cout << absl::StrFormat("%-20s %6d %6d %5d %7d %7d %7d   (%.1f s: inputs and GPU calls %.1f s, "
                                 "waiting for the oracle on samples %.1f s)\n",
                                 "total", sum.cases, sum.pass, sum.fail, sum.excused, sum.relaxed, sum.skipped,
                                 seconds, gpu_seconds, judge_seconds)
              << std::flush;
    if (done < cases.size() || not_judged > 0) {
      std::cout << absl::StrFormat("STOPPED by --time-limit %d s: of %d cases, %d not run and %d run on the GPU "
                                   "but not judged\n",
                                   *s.time_limit, cases.size(), cases.size() - done, not_judged)
                << std::flush;
    }
    all_pass = all_pass && sum.fail == 0;
    j["total"] = Totals(sum);
    j["cases_not_run_time_limit"] = cases.size() - done;
    j["cases_not_judged_time_limit"] = not_judged;
    j["seconds"] = seconds;
    j["gpu_call_seconds"] = gpu_seconds;
    j["oracle_wait_seconds"] = judge_seconds;
    return j;
  }

  nlohmann::json Scale() {
    std::vector<std::pair<std::string, check::ScaleCase>> cases;
    std::vector<int64_t> seeds;
    std::vector<std::string> replays;
    // Case i of every family before case i + 1 of any, so that a --time-limit leaves every family
    // with about as many cases.
    for (int64_t i = 0; i < (s.case_seed ? 1 : s.scale_cases); ++i) {
      for (const Family& f : s.families) {
        const int64_t seed = ScaleSeed(s, f, i);
        const std::optional<check::ScalePairing> pairing = ScalePairingOf(s, i);
        cases.emplace_back(f.Name(), check::DrawScaleCase(seed, f, s.scale_max_length, pairing));
        seeds.push_back(seed);
        replays.push_back(absl::StrCat("gemtb check attention --tier scale --family ", f.Name(), " --case-seed ", seed,
                                       pairing ? absl::StrCat(" --pairing ", std::string(check::ScalePairingName(*pairing))) : "",
                                       " --max-length ", s.scale_max_length, s.tanh_approx ? " --tanh-approx" : "",
                                       s.kernel_flags));
      }
    }
    nlohmann::json j = Sampled("scale", cases, seeds, replays, 1);
    j["cases_per_family"] = s.case_seed ? 1 : s.scale_cases;
    j["max_length"] = s.scale_max_length;
    return j;
  }

  absl::StatusOr<nlohmann::json> Bench() {
    absl::StatusOr<std::vector<BenchEntry>> entries = BenchCases(s);
    if (!entries.ok()) return entries.status();
    std::vector<std::pair<std::string, check::ScaleCase>> cases;
    std::vector<int64_t> seeds;
    std::vector<std::string> replays;
    for (const BenchEntry& e : *entries) {
      cases.emplace_back(e.c.name, e.c);
      seeds.push_back(e.seed);
      replays.push_back(e.replay);
    }
    nlohmann::json j = Sampled("bench", cases, seeds, replays, 0);
    j["dtype"] = "bfloat16";
    return j;
  }
};
#endif

absl::Status Run(const std::vector<std::string>& args, bool* all_pass) {
  Settings s;
  std::optional<int64_t> cases, max_length;
  std::string tier = "small", family_text = "all", json_path, pairing_text = "mixed";
  std::string forward_kernel = "auto", backward_kernel = "auto";
  bool dry_run = false;
  FlagSet flags("gemtb check attention [--tier small|scale|bench|all] [--cases N] [--seed S] [--family F] [--case-seed X]",
                "Draws random jagged attention cases per family (activation x mask: softmax, silu,\n"
                "gelu_tanh, gelu, relu, identity x none, causal, window, block), mixing bf16/fp16, head\n"
                "dims 16/32/64/128, pairings (self, cross, kv_index, broadcast_q), GQA, both alignments;\n"
                "runs each on the GPU kernels (forward and backward), the fp64 oracle and its emulate mode,\n"
                "and applies the primary and secondary acceptance criteria per tensor\n"
                "(docs/attention-criteria.md). Tiers:\n"
                "  small (default): 1-3 K/V sequences (up to 4 outputs), H <= 4, lengths 0..--max-length\n"
                "    (default 300; a quarter of the cases on edge lengths 0-2, 63-65, 127-129), empty and\n"
                "    length-1 sequences; judged whole.\n"
                "  scale: batches of 64-2,048 sequences with the benchmark's length rule (each length uniform\n"
                "    in a range set by a maximum M and a sparsity s, both drawn at random) sized to\n"
                "    2^16-2^18 query rows (tokens x H), lengths up to 8,192 for window/block and\n"
                "    4,096 for none/causal (or --max-length); broadcast_q with 1,000-2,048 outputs of 1-48\n"
                "    shared query rows; H in {1,2,4,8}, Hkv | H; case i of a family takes pairing i mod 4;\n"
                "    every case has >= 528 (tile, head) items. Judged on a sample: random K/V sequences with\n"
                "    all their readers (up to 16, or about 1e6 valid pairs x heads), one K/V head with its\n"
                "    query heads; under broadcast_q the whole batch on that head.\n"
                "  bench: the eight cases of `gemtb bench attention` (self softmax and silu, cross gelu_tanh\n"
                "    and softmax with K/V of 256, causal window 512 over lengths to 8,192, block 64 over\n"
                "    lengths to 4,096, broadcast_q silu with 32 shared query rows, dense silu; other lengths\n"
                "    to 1,024; 1,152 sequences, 32 in the window case; H 4, D 128), bf16, judged on a sample\n"
                "    as the scale tier.\n"
                "  all: small, then scale.\n"
                "Prints every failure with its replay flags and a summary per family; exit 0 only if every\n"
                "case passes (1 otherwise, 2 for bad flags or without CUDA or a GPU). --dry-run needs no GPU.");
  flags.String("tier", &tier, "small (default) | scale | bench | all (small and scale)");
  flags.OptionalInt64("cases", &cases, "cases per family (default 100 small, 20 scale)");
  flags.Int64("seed", &s.seed, "run seed (default 1); each case's seed derives from it");
  flags.String("family", &family_text, "all (default) or comma-separated act/mask, e.g. silu/causal");
  flags.OptionalInt64("case-seed", &s.case_seed, "replay one case of one --family with this case seed");
  flags.OptionalInt64("max-length", &max_length,
                      "longest sequence drawn: small tier default 300 (at most 4096), scale tier default the "
                      "per-mask caps 8192/4096 (at most 8192)");
  flags.String("pairing", &pairing_text,
               "scale tier: mixed (default: case i takes pairing i mod 4; a replayed case draws it) | self | "
               "cross | kv_index | broadcast_q");
  flags.Int64("sample-pairs", &s.sample_budget,
              "scale and bench tiers: valid pairs x query heads the oracle's sample may cost (default 2^20)");
  flags.OptionalInt64("time-limit", &s.time_limit,
                      "scale and bench tiers: after this many seconds no case starts on the GPU and no judgement "
                      "starts (those under way finish); the cases not run or not judged are counted and "
                      "printed, and the summary and --json are written; default none");
  flags.StringList("bench-cases", &s.bench_cases,
                   "bench tier: these benchmark cases by name (default all eight: self_softmax, self_gdpa_silu, "
                   "cross_gdpa_gelu, cross_softmax, swa_causal_512, block64_softmax, pma_gdpa_silu, "
                   "dense_gdpa_silu)");
  flags.Int64("gpu-timeout", &s.gpu_timeout,
              "seconds one case's GPU call (with its input generation) may take; a case past it is reported "
              "as FAILED (hung), with its replay flags, the --json gets a \"hung\" entry, and the command "
              "exits 1 at once, since a hung kernel cannot be cancelled (default 300)");
  flags.String("json", &json_path, "also write the counts and failures as JSON to this file");
  flags.Bool("verbose", &s.verbose, "print every case, not only failures");
  flags.Bool("dry-run", &dry_run,
             "draw the tiers' cases and print their shapes, item counts, the oracle's time on each sample "
             "and (bench) the time to generate each case's inputs; no GPU needed");
  flags.Bool("tanh-approx", &s.tanh_approx,
             "run the GPU with AttentionOptions::tanh_approx (silu, gelu_tanh through tanh.approx); the "
             "oracle keeps the exact act");
  flags.String("forward-kernel", &forward_kernel,
               "auto | mma_sync | hopper_ws | hopper_tma | hopper_split | hopper_small (default auto: the "
               "library's choice, gpu/attention/kernel_policy.h); cases that kernel cannot run are counted as "
               "skipped");
  flags.String("backward-kernel", &backward_kernel,
               "auto | mma_sync | hopper_recompute | hopper_stored_ds | hopper_fused_dq (default auto)");
  GEMTB_RETURN_IF_ERROR(flags.Parse(args));
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return absl::OkStatus();
  }
  if (tier == "small" || tier == "all") s.small = true;
  if (tier == "scale" || tier == "all") s.scale = true;
  if (tier == "bench") s.bench = true;
  if (!s.small && !s.scale && !s.bench) {
    return absl::InvalidArgumentError(absl::StrCat("--tier=", tier, ": want small, scale, bench or all"));
  }
  if (cases && *cases < 0) return absl::InvalidArgumentError(absl::StrCat("--cases=", *cases, ": must be >= 0"));
  if (cases) s.small_cases = s.scale_cases = *cases;
  if (max_length) {
    const int64_t most = s.scale ? 8192 : 4096;
    if (*max_length < (s.scale ? 1 : 0) || *max_length > most) {
      return absl::InvalidArgumentError(
          absl::StrCat("--max-length=", *max_length, ": want ", s.scale ? 1 : 0, "..", most));
    }
    s.small_max_length = std::min<int64_t>(*max_length, 4096);
    s.scale_max_length = *max_length;
  }
  if (pairing_text != "mixed") {
    for (check::ScalePairing p : check::kAllScalePairings) {
      if (check::ScalePairingName(p) == pairing_text) s.pairing = p;
    }
    if (!s.pairing) {
      return absl::InvalidArgumentError(
          absl::StrCat("--pairing=", pairing_text, ": want mixed, self, cross, kv_index or broadcast_q"));
    }
  }
  if (s.time_limit && *s.time_limit < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--time-limit=", *s.time_limit, ": must be >= 1"));
  }
  if (s.gpu_timeout < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--gpu-timeout=", s.gpu_timeout, ": must be >= 1"));
  }
  if (s.sample_budget < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--sample-pairs=", s.sample_budget, ": must be >= 1"));
  }
  absl::StatusOr<std::vector<Family>> families = check::ParseFamilies(family_text);
  if (!families.ok()) return families.status();
  s.families = *families;
  if (s.case_seed && (s.families.size() != 1 || tier == "all" || s.bench)) {
    return absl::InvalidArgumentError("--case-seed: needs exactly one --family and --tier small or scale");
  }
  if (forward_kernel != "auto") absl::StrAppend(&s.kernel_flags, " --forward-kernel ", forward_kernel);
  if (backward_kernel != "auto") absl::StrAppend(&s.kernel_flags, " --backward-kernel ", backward_kernel);
  if (dry_run) return DryRun(s);
#if !GEMTB_HAVE_CUDA
  *all_pass = false;
  return absl::FailedPreconditionError(absl::StrCat(
      "--tier ", tier, " runs the GPU kernels, and this gemtb was built without CUDA (nvcc not found at "
      "configure time); --dry-run shows what the tier draws without a GPU"));
#else
  s.json_path = json_path;
  check::GpuWatchdog watchdog(std::chrono::seconds(s.gpu_timeout), [&s](const std::string& label,
                                                                       std::chrono::milliseconds limit) {
    ReportHang(s, label, limit);
  });
  Runner runner{s, {}, watchdog};
  absl::StatusOr<gpu::ForwardKernelKind> fk = gpu::ParseForwardKernel(forward_kernel);
  if (!fk.ok()) return absl::InvalidArgumentError(absl::StrCat("--forward-kernel: ", fk.status().message()));
  absl::StatusOr<gpu::BackwardKernelKind> bk = gpu::ParseBackwardKernel(backward_kernel);
  if (!bk.ok()) return absl::InvalidArgumentError(absl::StrCat("--backward-kernel: ", bk.status().message()));
  runner.kernels = {*fk, *bk};
  if (absl::Status device = gpu::DeviceAvailable(); !device.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("--tier ", tier, " runs the GPU kernels and needs an H200: ",
                                                      device.message(), " (--dry-run needs no GPU)"));
  }
  nlohmann::json j = {{"seed", s.seed}, {"tier", tier}, {"tanh_approx", s.tanh_approx},
                      {"forward_kernel", forward_kernel}, {"backward_kernel", backward_kernel}};
  if (s.case_seed) j["case_seed"] = *s.case_seed;
  if (s.small) {
    // The small tier's keys stay at the top level, as in the records made before the tiers.
    nlohmann::json small = runner.Small();
    for (auto& [key, value] : small.items()) j[key] = value;
  }
  if (s.scale) j["scale"] = runner.Scale();
  if (s.bench) {
    absl::StatusOr<nlohmann::json> bench = runner.Bench();
    if (!bench.ok()) return bench.status();
    j["bench"] = *bench;
  }
  j["failures"] = runner.failures;
  *all_pass = runner.all_pass;
  if (!json_path.empty()) {
    GEMTB_RETURN_IF_ERROR(WriteJsonReport(json_path, j));
  }
  return absl::OkStatus();
#endif
}

}  // namespace

int RunCheckAttention(const std::vector<std::string>& args) {
  bool all_pass = true;
  const absl::Status status = Run(args, &all_pass);
  return CheckCommandExit(kCommand, status, all_pass);
}

}  // namespace gemtb::cli
