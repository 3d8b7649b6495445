// gemtb check attention: random jagged cases per family (activation x mask), each run on the GPU
// kernels, the fp64 oracle and its emulate mode, and judged with spec §9's criteria:
//   primary   per tensor: max|gpu - ref| <= 2 max|emu - ref| + 2 ulp_dtype(max|ref|)
//   secondary O rel-L2 <= 5e-3; dQ, dK, dV rel-L2 <= 1e-2; LSE max abs error <= 1e-3 with -inf in
//             the same places.
// Every case has its own seed, printed with any failure, and `--family F --case-seed X` runs that
// one case again.
//
// Secondary bound, "relaxed" cases: where the emulate mode (a plain same-precision kernel) itself
// misses a secondary rel-L2 bound (very peaked softmax rows, where dS cancels), the GPU must stay
// within 2x the emulate's rel-L2 instead; where the reference is exactly 0 (softmax rows with one
// key give dS = 0) rel-L2 is undefined and only the primary, absolute bound applies. Such cases
// are counted per family ("relaxed"); the primary criterion is never relaxed.
//
// Kinks (relu, leaky_relu, hardswish): act' jumps at a kink, so a score that lies within fp32
// accumulation error of it can take the other side on the GPU than in the oracle, which moves dS by
// a whole dP (spec §4; tests/attention/emulate_test.cc leaves dQ/dK of these acts out of its bounds
// for the same reason). Emulate mode cannot show this error: it forms each dot product exactly and
// rounds once, which keeps the sign (relu's kink at 0). So a dQ or dK failure of a kinked act
// counts as "excused" when, and only when, some valid pair has |S - kink| <= 1e-5 * pre *
// sum_d |q_d k_d| (above the worst-case fp32 accumulation error D * 2^-24 * sum_d |q_d k_d| for
// D <= 128); excused cases are
// counted and listed, never silently passed. Everything else (O, LSE, dV, every other act) has no
// exemption.
#include <oneapi/tbb/parallel_for.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "model/common/status_macros.h"
#include "nlohmann/json.hpp"
#include "tests/testing/attention_cases.h"
#include "tests/testing/criteria.h"
#include "tests/testing/oracle_harness.h"
#include "tools/gemtb/command.h"
#include "tools/gemtb/flags.h"
#if GEMTB_HAVE_CUDA
#include "gpu/attention/api.h"
#include "tools/gemtb/gpu_case.h"
#endif

namespace gemtb::cli {
namespace {

constexpr char kCommand[] = "check attention";

struct Family {
  Activation act;
  MaskKind mask;
  std::string Name() const {
    return absl::StrCat(std::string(ActivationName(act)), "/", std::string(MaskKindName(mask)));
  }
};

const std::vector<Family>& AllFamilies() {
  static const std::vector<Family> families = [] {
    std::vector<Family> f;
    for (Activation act : {Activation::kSoftmax, Activation::kSilu, Activation::kGeluTanh,
                           Activation::kGelu, Activation::kRelu, Activation::kIdentity}) {
      for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausal, MaskKind::kWindow, MaskKind::kBlock}) {
        f.push_back({act, mask});
      }
    }
    return f;
  }();
  return families;
}

// "all", or comma-separated "act/mask" names; an act may also name any of the nine activations.
absl::StatusOr<std::vector<Family>> ParseFamilies(const std::string& text) {
  if (text == "all") return AllFamilies();
  std::vector<Family> out;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    const std::vector<std::string> parts = absl::StrSplit(item, '/');
    std::optional<Activation> act = parts.size() == 2 ? ParseActivation(parts[0]) : std::nullopt;
    std::optional<MaskKind> mask = parts.size() == 2 ? ParseMaskKind(parts[1]) : std::nullopt;
    if (!act || !mask) {
      return absl::InvalidArgumentError(
          absl::StrCat("--family=", text, ": '", item, "' is not act/mask (e.g. silu/causal) or all"));
    }
    out.push_back({*act, *mask});
  }
  return out;
}

#if GEMTB_HAVE_CUDA
// The seed of case `index` of family `family` under `seed`: SplitMix64 of the three, cut to 63
// bits so that it prints and parses as a flag value.
int64_t CaseSeed(int64_t seed, size_t family, int64_t index) {
  uint64_t z = static_cast<uint64_t>(seed) * 0x9E3779B97F4A7C15ull + family * 0xBF58476D1CE4E5B9ull +
               static_cast<uint64_t>(index) * 0x94D049BB133111EBull + 0x2545F4914F6CDD1Dull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<int64_t>((z ^ (z >> 31)) >> 1);
}

// A random case the kernels run: bf16 or fp16, Dqk = Dv in {64, 128}, every pairing (self, cross,
// kv_index, broadcast_q), GQA, both alignments, random window/block parameters and scales; length
// scales from a few keys to `max_length`, and a quarter of the cases on edge lengths
// (0, 1, 2, 63, 64, 65, 127, 128, 129).
testing::AttentionCase DrawCase(int64_t case_seed, const Family& family, int64_t max_length) {
  std::mt19937_64 rng(static_cast<uint64_t>(case_seed));
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  testing::CaseConfig config;
  config.acts = {family.act};
  config.masks = {family.mask};
  config.max_sequences = 3;
  config.max_heads = 4;
  config.max_dim = 2;  // replaced below
  config.dense_bias = config.rel_bias = config.time_bias = config.rope = false;
  config.input_type = pick(0, 1) ? ElementType::kBFloat16 : ElementType::kFloat16;
  const int64_t scales[] = {8, 40, 100, 200, 300};
  config.max_length = std::min(max_length, scales[pick(0, 4)]);
  testing::CaseShape shape = testing::RandomCaseShape(rng, config);
  shape.dqk = shape.dv = pick(0, 1) ? 128 : 64;
  // Softmax scales relative to the default 1/sqrt(Dqk): randn rows of 128 dims with pre = 1.5
  // give logits of standard deviation 17, where even a plain same-precision kernel misses the
  // secondary bound (see Judge).
  if (family.act == Activation::kSoftmax && shape.options.pre_scale) {
    *shape.options.pre_scale /= std::sqrt(static_cast<double>(shape.dqk));
  }
  if (pick(0, 3) == 0) {
    // A function of the length, so that lengths which were equal (self-attention) stay equal.
    const int64_t edges[] = {0, 1, 2, 63, 64, 65, 127, 128, 129};
    auto edge = [&](int64_t l) { return std::min(max_length, edges[l % 9]); };
    for (int64_t& l : shape.q_lengths) l = edge(l);
    for (int64_t& l : shape.kv_lengths) l = edge(l);
  }
  return testing::BuildCase(shape);
}

bool HasKink(Activation act) {
  return act == Activation::kRelu || act == Activation::kLeakyRelu || act == Activation::kHardswish;
}

// Whether some valid pair's score lies within fp32 accumulation reach of a kink (see the top).
bool ScoreNearKink(const testing::AttentionCase& c) {
  const double pre = testing::PreScale(c);
  const int64_t h_count = c.heads(), group = c.heads() / c.kv_heads(), d = c.dqk();
  std::vector<double> kinks = {0.0};
  if (c.options.act == Activation::kHardswish) kinks = {-3.0, 3.0};
  for (const testing::SequencePair& s : testing::PairSequences(c)) {
    for (int64_t h = 0; h < h_count; ++h) {
      for (int64_t i = 0; i < s.lq; ++i) {
        const KeyRange r = ValidKeys(c.options, i, s.lq, s.lk);
        const double* q = c.q.data.data() + ((s.q_begin + i) * h_count + h) * d;
        for (int64_t j = r.begin; j < r.end; ++j) {
          const double* k = c.k.data.data() + ((s.k_begin + j) * c.kv_heads() + h / group) * d;
          double dot = 0, mag = 0;
          for (int64_t e = 0; e < d; ++e) {
            dot += q[e] * k[e];
            mag += std::fabs(q[e] * k[e]);
          }
          for (double kink : kinks) {
            if (std::fabs(pre * dot - kink) <= 1e-5 * std::fabs(pre) * mag) return true;
          }
        }
      }
    }
  }
  return false;
}

constexpr const char* kTensors[] = {"O", "LSE", "dQ", "dK", "dV"};
constexpr int kNumTensors = 5;

struct CaseResult {
  int64_t case_seed = 0;
  std::string description;
  bool pass = true;
  bool excused = false;          // failed only on dQ/dK of a kinked act with a near-kink score
  int relaxed = 0;               // secondary verdicts judged against 2x the emulate error
  std::vector<std::string> failures;
  double ratio[kNumTensors][2] = {};  // measured / bound: primary, secondary
};

struct GpuOutputs {
  absl::Status status;
  std::vector<double> o, lse, dq, dk, dv;
};

GpuOutputs RunGpu(const testing::AttentionCase& c, const std::vector<double>& d_o) {
  GpuOutputs out;
  const std::vector<int64_t> o_shape = {testing::OutputRows(c), c.heads(), c.dv()};
  const GpuCall call = MakeGpuCall(c.View(), c.options, d_o, o_shape);
  absl::StatusOr<gpu::ForwardResult> fwd = gpu::Forward(call.args);
  if (!fwd.ok()) {
    out.status = fwd.status();
    return out;
  }
  absl::StatusOr<gpu::BackwardResult> bwd = gpu::Backward(call.args, call.DoView(), *fwd);
  if (!bwd.ok()) {
    out.status = bwd.status();
    return out;
  }
  out.o = BitsToValues(fwd->o, c.input_type);
  out.lse.assign(fwd->lse.begin(), fwd->lse.end());
  out.dq = BitsToValues(bwd->dq, c.input_type);
  out.dk = BitsToValues(bwd->dk, c.input_type);
  out.dv = BitsToValues(bwd->dv, c.input_type);
  return out;
}

CaseResult Judge(const testing::AttentionCase& c, const std::vector<double>& d_o, const GpuOutputs& gpu) {
  CaseResult res;
  res.description = testing::Describe(c);
  auto fail = [&](std::string message) {
    res.pass = false;
    res.failures.push_back(std::move(message));
  };
  if (!gpu.status.ok()) {
    fail(absl::StrCat("GPU: ", gpu.status.ToString()));
    return res;
  }
  const reference::ExecutionOptions oracle{reference::Precision::kOracle, 1};
  const reference::ExecutionOptions emulate{reference::Precision::kEmulate, 1};
  absl::StatusOr<testing::OracleRun> ref = testing::RunOracle(c, d_o, oracle);
  absl::StatusOr<testing::OracleRun> emu = testing::RunOracle(c, d_o, emulate);
  if (!ref.ok() || !emu.ok()) {
    fail(absl::StrCat("oracle: ", ref.status().ToString(), " / ", emu.status().ToString()));
    return res;
  }
  const ElementType dtype = c.input_type;
  const std::vector<double>* got[kNumTensors] = {&gpu.o, &gpu.lse, &gpu.dq, &gpu.dk, &gpu.dv};
  const std::vector<double>* want[kNumTensors] = {&ref->fwd.o, &ref->fwd.lse, &ref->bwd.dq,
                                                  &ref->bwd.dk, &ref->bwd.dv};
  const std::vector<double>* emulated[kNumTensors] = {&emu->fwd.o, &emu->fwd.lse, &emu->bwd.dq,
                                                      &emu->bwd.dk, &emu->bwd.dv};
  bool kink_only = true;  // every failure so far is a dQ/dK one
  for (int t = 0; t < kNumTensors; ++t) {
    std::vector<testing::Verdict> verdicts;
    if (t == 1) {
      if (c.options.act != Activation::kSoftmax) continue;
      verdicts.push_back(testing::LseMatches(kTensors[t], *got[t], *want[t]));
      verdicts.push_back(verdicts.back());
    } else {
      const double tolerance = t == 0 ? testing::kForwardRelL2Tolerance : testing::kGradientRelL2Tolerance;
      verdicts.push_back(testing::GpuPrimary(kTensors[t], *got[t], *emulated[t], *want[t], dtype));
      verdicts.push_back(testing::GpuSecondaryRelL2(kTensors[t], *got[t], *want[t], tolerance));
      // Where the emulate mode (a plain same-precision kernel) misses the secondary bound itself,
      // the case is too ill-conditioned for it (e.g. very peaked softmax rows, where dS cancels);
      // the GPU must then stay within 2x the emulate's rel-L2, and the case is counted.
      // A reference that is exactly zero (softmax rows with one key: dS = 0) has no relative error;
      // there the primary bound, absolute, is the criterion.
      const double emu_rel = testing::RelL2(*emulated[t], *want[t]);
      if (std::isinf(emu_rel)) {
        verdicts.back() = {true, 0.0, 0.0, absl::StrCat(kTensors[t], ": rel-L2 not applicable, reference is 0")};
        ++res.relaxed;
      } else if (emu_rel > tolerance) {
        verdicts.back() = testing::GpuSecondaryRelL2(kTensors[t], *got[t], *want[t], 2 * emu_rel);
        verdicts.back().message += " (bound = 2x emulate rel-L2)";
        ++res.relaxed;
      }
    }
    for (int k = 0; k < 2; ++k) {
      const testing::Verdict& v = verdicts[k];
      res.ratio[t][k] = v.bound > 0 ? v.measured / v.bound : (v.measured > 0 ? INFINITY : 0.0);
      if (std::isnan(res.ratio[t][k])) res.ratio[t][k] = INFINITY;
      if (!v.pass && (k == 0 || t != 1)) {
        // What a plain same-precision kernel (emulate mode) measures on the same criterion.
        const double emu_measured = t == 1 ? testing::LseMatches("", *emulated[t], *want[t]).measured
                                    : k == 0 ? testing::MaxAbsDiff(*emulated[t], *want[t])
                                             : testing::RelL2(*emulated[t], *want[t]);
        fail(absl::StrFormat("%s [emulate: %.6g]", v.message, emu_measured));
        kink_only = kink_only && (t == 2 || t == 3);
      }
    }
  }
  if (!res.pass && kink_only && HasKink(c.options.act) && ScoreNearKink(c)) {
    res.excused = true;
    res.pass = true;
  }
  return res;
}

struct FamilyStats {
  int64_t cases = 0, pass = 0, fail = 0, excused = 0, relaxed = 0, bf16 = 0, d128 = 0;
  double worst[kNumTensors][2] = {};
};
#endif

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
  absl::StatusOr<std::vector<Family>> families = ParseFamilies(family_text);
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
    size_t family_index = 0;
    for (size_t a = 0; a < AllFamilies().size(); ++a) {
      if (AllFamilies()[a].Name() == family.Name()) family_index = a;
    }
    FamilyStats& st = stats[family.Name()];
    const int64_t total = case_seed ? 1 : cases;
    for (int64_t c0 = 0; c0 < total; c0 += kChunk) {
      const int64_t n = std::min(kChunk, total - c0);
      std::vector<testing::AttentionCase> batch(n);
      std::vector<std::vector<double>> d_o(n);
      std::vector<int64_t> seeds(n);
      std::vector<GpuOutputs> gpu(n);
      std::vector<CaseResult> results(n);
      tbb::parallel_for(int64_t{0}, n, [&](int64_t i) {  // each case from its own seed alone
        seeds[i] = case_seed ? *case_seed : CaseSeed(seed, family_index, c0 + i);
        batch[i] = DrawCase(seeds[i], family, max_length);
        batch[i].options.tanh_approx = tanh_approx;  // read by the GPU call only
        d_o[i] = testing::RandomCotangent(batch[i], static_cast<uint64_t>(seeds[i]) ^ 0x5DEECE66Dull);
      });
      const auto t_gpu = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < n; ++i) gpu[i] = RunGpu(batch[i], d_o[i]);
      const auto t_judge = std::chrono::steady_clock::now();
      tbb::parallel_for(int64_t{0}, n, [&](int64_t i) {
        results[i] = Judge(batch[i], d_o[i], gpu[i]);
        results[i].case_seed = seeds[i];
      });
      gpu_seconds += std::chrono::duration<double>(t_judge - t_gpu).count();
      judge_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t_judge).count();
      for (int64_t i = 0; i < n; ++i) {
        const CaseResult& r = results[i];
        ++st.cases;
        st.bf16 += batch[i].input_type == ElementType::kBFloat16 ? 1 : 0;
        st.d128 += batch[i].dqk() == 128 ? 1 : 0;
        st.relaxed += r.relaxed > 0 ? 1 : 0;
        for (int t = 0; t < kNumTensors; ++t) {
          for (int k = 0; k < 2; ++k) st.worst[t][k] = std::max(st.worst[t][k], r.ratio[t][k]);
        }
        const std::string replay = absl::StrCat("gemtb check attention --family ", family.Name(),
                                                " --case-seed ", r.case_seed, tanh_approx ? " --tanh-approx" : "");
        if (r.pass && !r.excused) {
          ++st.pass;
          // Flushed: under a sanitizer with a time limit, the log shows how far the run came.
          if (verbose) std::cout << "pass " << family.Name() << " " << r.description << std::endl;
          continue;
        }
        (r.excused ? st.excused : st.fail) += 1;
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
