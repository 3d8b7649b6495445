// gemtb bench attention: effective TFLOP/s of the CUDA attention kernels on the benchmark cases
// (gpu/bench/attention_bench.h says how it times). Writes <out-dir>/bench_attention.json and, per
// case, <out-dir>/<case>.npy with the lengths it used (int64 [2, B]: q lengths, kv lengths), which
// ../shared/peers/torch_peers.py --lengths <out-dir> reads to time the peers on the same lengths.
// Built without CUDA it reports so and exits 2, as `gemtb gpu attention` does.
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "model/common/status_macros.h"
#include "nlohmann/json.hpp"
#include "tools/gemtb/command.h"
#include "tools/gemtb/flags.h"
#include "tools/gemtb/output_set.h"
#if GEMTB_HAVE_CUDA
#include "gpu/bench/attention_bench.h"
#endif

namespace gemtb::cli {
namespace {

constexpr char kCommand[] = "bench attention";

#if GEMTB_HAVE_CUDA
nlohmann::json TimingJson(const gpu::bench::Timing& t, double flops) {
  nlohmann::json j = {{"median_ms", t.median_ms}, {"min_ms", t.min_ms}, {"max_ms", t.max_ms}, {"reps", t.reps},
                      {"tflops", t.median_ms > 0 ? flops / (t.median_ms * 1e9) : 0.0},
                      {"samples_ms", t.samples_ms}};
  const gpu::bench::KernelTime& k = t.kernel;
  if (k.ran) {
    j["kernel"] = {{"median_ms", k.median_ms}, {"mean_ms", k.mean_ms}, {"period_ms", k.period_ms},
                   {"activities_per_run", k.activities_per_run},
                   {"tflops", k.median_ms > 0 ? flops / (k.median_ms * 1e9) : 0.0}};
  } else if (!k.error.empty()) {
    j["kernel"] = {{"error", k.error}};
  }
  return j;
}
#endif

absl::Status Run(const std::vector<std::string>& args) {
  std::string cases, out_dir, forward_kernel = "auto", backward_kernel = "auto", label;
  int64_t warmup = 3, reps = 15, seed = 1, settle_s = 0;
  bool force = false, forward_only = false, no_compare = false, tanh_approx = false, no_kernel_time = false,
       free_memory = false;
  FlagSet flags("gemtb bench attention --out-dir D [--cases a,b] [--reps N] [--warmup N] [options]",
                "Times the CUDA attention kernels (bf16, H=4, D=128) on eight fixed cases\n"
                "(lengths by a Philox rule): forward and forward+backward, CUDA events, median of --reps runs over\n"
                "rotated input sets, then the same runs' kernel time (CUPTI; --no-kernel-time skips it).\n"
                "Writes D/bench_attention.json and the lengths of each case as\n"
                "D/<case>.npy (int64 [2,B]), so that a peer benchmark can time the same lengths\n"
                "(formats: docs/reports.md).");
  flags.String("out-dir", &out_dir, "output folder (created if missing; its parent must exist)");
  flags.Bool("force", &force, "replace an --out-dir that already holds files, as a whole");
  flags.String("cases", &cases, "comma-separated case names (default: all eight)");
  flags.Int64("warmup", &warmup, "untimed runs before timing (default 3)");
  flags.Int64("reps", &reps, "timed runs; the median is reported (default 15)");
  flags.Int64("seed", &seed, "seed of the device-drawn inputs (default 1)");
  flags.String("forward-kernel", &forward_kernel,
               "auto | mma_sync | hopper_ws | hopper_tma | hopper_split | hopper_small (default auto: the "
               "library's choice per case, gpu/attention/kernel_policy.h); a kernel that cannot run a case "
               "is an error");
  flags.String("backward-kernel", &backward_kernel,
               "auto | mma_sync | hopper_recompute | hopper_stored_ds | hopper_fused_dq (default auto; with "
               "--forward-kernel mma_sync, auto is mma_sync)");
  flags.Bool("forward-only", &forward_only, "skip the forward+backward timing");
  flags.Bool("no-compare", &no_compare, "skip the Hopper-vs-mma.sync output comparison");
  flags.Bool("no-kernel-time", &no_kernel_time,
             "skip the second pass that times the runs by their kernels' device time (CUPTI)");
  flags.Bool("free-memory", &free_memory,
             "give each case's device memory back to the driver (cudaFree) instead of keeping it in a "
             "pool (memory-bound cases right after a large free then ran up to 8% slower on the H200)");
  flags.String("label", &label, "free text stored in the JSON (e.g. the commit)");
  flags.Int64("settle-s", &settle_s, "seconds the GPU idles before each case (default 0)");
  flags.Bool("tanh-approx", &tanh_approx,
             "let the kernels evaluate silu and gelu_tanh through tanh.approx (AttentionOptions::tanh_approx)");
  GEMTB_RETURN_IF_ERROR(flags.Parse(args));
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return absl::OkStatus();
  }
#if !GEMTB_HAVE_CUDA
  return absl::FailedPreconditionError(
      "this gemtb was built without CUDA (nvcc not found at configure time): no GPU kernels");
#else
  absl::StatusOr<OutputSet> output = OutputSet::Prepare("--out-dir", out_dir, {.force = force, .fail_write_at = {}});
  if (!output.ok()) return output.status();
  gpu::bench::BenchOptions opt;
  if (!cases.empty()) opt.cases = absl::StrSplit(cases, ',');
  if (warmup < 0 || warmup > 1000) return absl::InvalidArgumentError(absl::StrCat("--warmup=", warmup, ": must be in [0, 1000]"));
  if (reps < 1 || reps > 10000) return absl::InvalidArgumentError(absl::StrCat("--reps=", reps, ": must be in [1, 10000]"));
  if (settle_s < 0 || settle_s > 600) return absl::InvalidArgumentError(absl::StrCat("--settle-s=", settle_s, ": must be in [0, 600]"));
  opt.settle_s = static_cast<int>(settle_s);
  opt.warmup = static_cast<int>(warmup);
  opt.reps = static_cast<int>(reps);
  opt.seed = static_cast<uint64_t>(seed);
  opt.backward = !forward_only;
  opt.compare_kernels = !no_compare;
  opt.kernel_time = !no_kernel_time;
  opt.retain_memory = !free_memory;
  opt.tanh_approx = tanh_approx;
  absl::StatusOr<gpu::ForwardKernelKind> fk = gpu::ParseForwardKernel(forward_kernel);
  if (!fk.ok()) return absl::InvalidArgumentError(absl::StrCat("--forward-kernel: ", fk.status().message()));
  absl::StatusOr<gpu::BackwardKernelKind> bk = gpu::ParseBackwardKernel(backward_kernel);
  if (!bk.ok()) return absl::InvalidArgumentError(absl::StrCat("--backward-kernel: ", bk.status().message()));
  opt.kernels = {*fk, *bk};
  for (const std::string& name : opt.cases) {
    if (absl::StatusOr<gpu::bench::BenchCase> c = gpu::bench::FindCase(name); !c.ok()) return c.status();
  }
  absl::StatusOr<std::vector<gpu::bench::CaseResult>> results = gpu::bench::RunAttentionBench(
      opt, [](const std::string& line) { std::cout << line << std::endl; });
  if (!results.ok()) return results.status();

  nlohmann::json doc;
  doc["what"] = "gemtb bench attention: effective TFLOP/s (valid pairs only) of the CUDA kernels";
  doc["device"] = gpu::bench::DeviceDescription();
  doc["gpu_name"] = gpu::bench::DeviceName();
  doc["label"] = label;
  doc["settle_s"] = settle_s;
  doc["device_memory"] = free_memory ? "cudaMalloc/cudaFree: each case's memory goes back to the driver"
                                     : "one pool that keeps freed memory (cudaMallocAsync, release threshold unlimited)";
  doc["command"] = absl::StrCat("gemtb bench attention ", absl::StrJoin(args, " "));
  doc["dtype"] = "bfloat16";
  doc["timing"] =
      "CUDA events around each run, median; input sets rotated (>= 2, >= 3x L2). \"kernel\": a second pass "
      "of --reps runs timed by CUPTI activity records (summed kernel and memset durations per run: median, "
      "mean; period = first start to last end per run, gaps included)";
  for (const gpu::bench::CaseResult& r : *results) {
    const gpu::bench::BenchCase& c = r.bench_case;
    nlohmann::json j;
    j["case"] = c.name;
    j["batch"] = c.batch;
    j["heads"] = c.heads;
    j["head_dim"] = c.head_dim;
    j["act"] = std::string(ActivationName(c.options.act));
    j["mask"] = std::string(MaskKindName(c.options.mask));
    j["tanh_approx"] = c.options.tanh_approx;
    j["pairs_per_head"] = r.pairs;
    j["fwd_flops"] = r.fwd_flops;
    j["forward_kernel"] = r.forward_kernel;
    j["backward_kernel"] = r.backward_kernel;
    j["input_sets"] = r.input_sets;
    j["input_set_bytes"] = r.input_set_bytes;
    j["fwd"] = TimingJson(r.fwd, r.fwd_flops);
    if (r.fwdbwd.reps > 0) j["fwdbwd"] = TimingJson(r.fwdbwd, 3.5 * r.fwd_flops);
    if (r.comparison.ran) {
      j["hopper_vs_mma_sync"] = {{"o_max_abs_diff", r.comparison.o_max_abs_diff},
                                 {"o_rel_l2", r.comparison.o_rel_l2},
                                 {"o_max_abs", r.comparison.o_max_abs},
                                 {"lse_max_abs_diff", r.comparison.lse_max_abs_diff},
                                 {"nonfinite", r.comparison.nonfinite}};
      if (r.comparison.grads_ran) {
        j["hopper_vs_mma_sync"]["grad_rel_l2"] = {r.comparison.grad_rel_l2[0], r.comparison.grad_rel_l2[1],
                                                  r.comparison.grad_rel_l2[2]};
        j["hopper_vs_mma_sync"]["grad_max_abs_diff"] = {
            r.comparison.grad_max_abs_diff[0], r.comparison.grad_max_abs_diff[1], r.comparison.grad_max_abs_diff[2]};
        j["hopper_vs_mma_sync"]["grad_nonfinite"] = r.comparison.grad_nonfinite;
      }
    }
    doc["cases"].push_back(j);
    std::vector<int64_t> both(r.lengths.q);
    both.insert(both.end(), r.lengths.kv.begin(), r.lengths.kv.end());
    output->AddNpy(c.name + ".npy", io::EncodeInt64(both, {2, static_cast<int64_t>(r.lengths.q.size())}));
  }
  output->AddText("bench_attention.json", doc.dump(1) + "\n");
  return output->Commit();
#endif
}

}  // namespace

int RunBenchAttention(const std::vector<std::string>& args) {
  if (absl::Status s = Run(args); !s.ok()) return ReportError(kCommand, s);
  return kExitOk;
}

}  // namespace gemtb::cli
