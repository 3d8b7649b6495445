// gemtb check attention: random jagged cases per family (activation x mask), each run on the GPU
// kernels, the fp64 oracle and its emulate mode, and judged with spec §9's criteria
// (tools/check/attention_check.h says which and how). This file holds the flags, the run over
// chunks of cases, and the printing. Every case has its own seed, printed with any failure, and
// `--family F --case-seed X` runs that one case again.
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
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
#include "tools/gemtb/command.h"
#include "tools/gemtb/flags.h"
#if GEMTB_HAVE_CUDA
#include "gpu/attention/api.h"
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

constexpr char kCommand[] = "check attention";

absl::Status Run(const std::vector<std::string>& args, bool* all_pass) {
  int64_t cases = 100, seed = 1, max_length = 300;
  std::optional<int64_t> case_seed;
  std::string family_text = "all", json_path;
  bool verbose = false, tanh_approx = false;
  FlagSet flags("gemtb check attention --cases N [--seed S] [--family F] [--case-seed X]",
                "Draws N random jagged attention cases per family (activation x mask: softmax, silu,\n"
                "gelu_tanh, gelu, relu, identity x none, causal, window, block), mixing bf16/fp16, head\n"
                "dims 64/128, pairings (self, cross, kv_index, broadcast_q), GQA, both alignments, empty\n"
                "and length-1 sequences; runs each on the GPU kernels (forward and backward), the fp64\n"
                "oracle and its emulate mode, and applies spec §9's primary and secondary criteria per\n"
                "tensor. Prints every failure with its replay flags and a summary per family; exit 0\n"
                "only if every case passes (1 otherwise, 2 without CUDA or a GPU).");
  flags.Int64("cases", &cases, "cases per family (default 100)");
  flags.Int64("seed", &seed, "run seed (default 1); each case's seed derives from it");
  flags.String("family", &family_text, "all (default) or comma-separated act/mask, e.g. silu/causal");
  flags.OptionalInt64("case-seed", &case_seed, "replay one case of one --family with this case seed");
  flags.Int64("max-length", &max_length, "longest sequence drawn (default 300)");
  flags.String("json", &json_path, "also write the counts and failures as JSON to this file");
  flags.Bool("verbose", &verbose, "print every case, not only failures");
  flags.Bool("tanh-approx", &tanh_approx,
             "run the GPU with AttentionOptions::tanh_approx (silu, gelu_tanh through tanh.approx); the "
             "oracle keeps the exact act");
  GEMTB_RETURN_IF_ERROR(flags.Parse(args));
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return absl::OkStatus();
  }
  if (cases < 0) return absl::InvalidArgumentError(absl::StrCat("--cases=", cases, ": must be >= 0"));
  if (max_length < 0 || max_length > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("--max-length=", max_length, ": want 0..4096"));
  }
  absl::StatusOr<std::vector<Family>> families = check::ParseFamilies(family_text);
  if (!families.ok()) return families.status();
  if (case_seed && families->size() != 1) {
    return absl::InvalidArgumentError("--case-seed: needs exactly one --family");
  }
#if !GEMTB_HAVE_CUDA
  *all_pass = false;
  return absl::FailedPreconditionError(
      "this gemtb was built without CUDA (nvcc not found at configure time): no GPU kernels to check");
#else
  GEMTB_RETURN_IF_ERROR(gpu::DeviceAvailable());
  const auto start = std::chrono::steady_clock::now();
  std::map<std::string, FamilyStats> stats;
  nlohmann::json failures = nlohmann::json::array();
  // Cases go through in chunks: drawn in parallel, run on the GPU one after another, judged by the
  // oracle in parallel (one case per task); the results print in case order.
  constexpr int64_t kChunk = 64;
  double gpu_seconds = 0, judge_seconds = 0;
  for (size_t fi = 0; fi < families->size(); ++fi) {
    const Family& family = (*families)[fi];
    const size_t family_index = check::FamilyIndex(family);
    FamilyStats& st = stats[family.Name()];
    const int64_t total = case_seed ? 1 : cases;
    for (int64_t c0 = 0; c0 < total; c0 += kChunk) {
      const int64_t n = std::min(kChunk, total - c0);
      std::vector<check::AttentionCase> batch(n);
      std::vector<std::vector<double>> d_o(n);
      std::vector<int64_t> seeds(n);
      std::vector<GpuOutputs> gpu(n);
      std::vector<CaseResult> results(n);
      tbb::parallel_for(int64_t{0}, n, [&](int64_t i) {  // each case from its own seed alone
        seeds[i] = case_seed ? *case_seed : check::CaseSeed(seed, family_index, c0 + i);
        batch[i] = check::DrawCase(seeds[i], family, max_length);
        batch[i].options.tanh_approx = tanh_approx;  // read by the GPU call only
        d_o[i] = check::RandomCotangent(batch[i], static_cast<uint64_t>(seeds[i]) ^ 0x5DEECE66Dull);
      });
      const auto t_gpu = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < n; ++i) gpu[i] = check::RunGpu(batch[i], d_o[i]);
      const auto t_judge = std::chrono::steady_clock::now();
      tbb::parallel_for(int64_t{0}, n, [&](int64_t i) {
        results[i] = check::Judge(batch[i], d_o[i], gpu[i]);
        results[i].case_seed = seeds[i];
      });
      gpu_seconds += std::chrono::duration<double>(t_judge - t_gpu).count();
      judge_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t_judge).count();
      for (int64_t i = 0; i < n; ++i) {
        const CaseResult& r = results[i];
        check::Tally(batch[i], r, st);
        const std::string replay = absl::StrCat("gemtb check attention --family ", family.Name(),
                                                " --case-seed ", r.case_seed, tanh_approx ? " --tanh-approx" : "");
        if (r.pass && !r.excused) {
          // Flushed: under a sanitizer with a time limit, the log shows how far the run came.
          if (verbose) std::cout << "pass " << family.Name() << " " << r.description << std::endl;
          continue;
        }
        std::cout << (r.excused ? "EXCUSED (score at a kink) " : "FAIL ") << family.Name()
                  << " case " << c0 + i << ": " << r.description << "\n";
        for (const std::string& m : r.failures) std::cout << "    " << m << "\n";
        std::cout << "    replay: " << replay << "\n";
        failures.push_back({{"family", family.Name()}, {"case_seed", r.case_seed},
                            {"excused", r.excused}, {"case", r.description},
                            {"messages", r.failures}, {"replay", replay}});
      }
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::cout << "\n"
            << absl::StrFormat("%-20s %6s %6s %5s %7s %7s  %s\n", "family", "cases", "pass", "fail",
                               "excused", "relaxed", "worst error/bound, primary|secondary: O LSE dQ dK dV");
  FamilyStats sum;
  nlohmann::json per_family = nlohmann::json::object();
  for (const Family& family : *families) {
    const FamilyStats& st = stats[family.Name()];
    std::string worst;
    nlohmann::json jw = nlohmann::json::object();
    for (int t = 0; t < kNumTensors; ++t) {
      absl::StrAppendFormat(&worst, " %.2f|%.2f", st.worst[t][0], st.worst[t][1]);
      jw[kTensors[t]] = {{"primary", st.worst[t][0]}, {"secondary", st.worst[t][1]}};
    }
    std::cout << absl::StrFormat("%-20s %6d %6d %5d %7d %7d %s\n", family.Name(), st.cases, st.pass,
                                 st.fail, st.excused, st.relaxed, worst);
    per_family[family.Name()] = {{"cases", st.cases},       {"pass", st.pass},
                                 {"fail", st.fail},         {"kink_excused", st.excused},
                                 {"secondary_relaxed_cases", st.relaxed},
                                 {"bf16_cases", st.bf16},   {"d128_cases", st.d128},
                                 {"worst_error_over_bound", jw}};
    sum.cases += st.cases;
    sum.pass += st.pass;
    sum.fail += st.fail;
    sum.excused += st.excused;
    sum.relaxed += st.relaxed;
  }
  std::cout << absl::StrFormat("%-20s %6d %6d %5d %7d %7d   (%.1f s: GPU calls %.1f s, oracle and criteria %.1f s)\n",
                               "total", sum.cases, sum.pass, sum.fail, sum.excused, sum.relaxed,
                               seconds, gpu_seconds, judge_seconds);
  *all_pass = sum.fail == 0;
  if (!json_path.empty()) {
    nlohmann::json j = {{"seed", seed},
                        {"cases_per_family", case_seed ? 1 : cases},
                        {"max_length", max_length},
                        {"tanh_approx", tanh_approx},
                        {"families", per_family},
                        {"total", {{"cases", sum.cases}, {"pass", sum.pass}, {"fail", sum.fail},
                                   {"kink_excused", sum.excused},
                                   {"secondary_relaxed_cases", sum.relaxed}}},
                        {"failures", failures},
                        {"seconds", seconds},
                        {"gpu_call_seconds", gpu_seconds},
                        {"oracle_seconds", judge_seconds}};
    if (case_seed) j["case_seed"] = *case_seed;
    std::ofstream out(json_path);
    out << j.dump(2) << "\n";
    if (!out) return absl::PermissionDeniedError(absl::StrCat("--json=", json_path, ": cannot write"));
  }
  return absl::OkStatus();
#endif
}

}  // namespace

int RunCheckAttention(const std::vector<std::string>& args) {
  bool all_pass = true;
  if (absl::Status s = Run(args, &all_pass); !s.ok()) return ReportError(kCommand, s);
  return all_pass ? kExitOk : kExitCheckFailed;
}

}  // namespace gemtb::cli
