// `gemtb bench attention`: the CUDA attention kernels on the benchmark cases, timed on the device.
//
// Per case: lengths by the benchmark rule (bench_cases.h), inputs drawn on the device, the call's tile lists
// built once (gpu/attention/device_call.h, the same launch path `gemtb check attention` verifies),
// then forward and forward+backward timed separately with CUDA events around every iteration;
// the median over the iterations is reported. Iterations rotate over at least two input sets (more
// while a set is smaller than 3x the L2), so no iteration finds its inputs in the L2 cache from the
// one before. Effective TFLOP/s count valid pairs only: forward 4·D·H·pairs, fwd+bwd
// 3.5x that. After each event-timed pass, as many runs again under CUPTI (kernel_timer.h) give the
// same runs' kernel time, the measure profiler-based peer rows report. Device memory comes from a
// pool that keeps what the cases free (device_buffer.h, RetainFreedDeviceMemory), as a training
// framework's caching allocator does; --free-memory gives each case's memory back to the driver.
#ifndef GEMTB_GPU_BENCH_ATTENTION_BENCH_H_
#define GEMTB_GPU_BENCH_ATTENTION_BENCH_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpu/attention/device_call.h"
#include "gpu/bench/bench_cases.h"

namespace gemtb::gpu::bench {

struct BenchOptions {
  std::vector<std::string> cases;  // names; empty = all eight
  int warmup = 3;
  int reps = 15;
  bool backward = true;
  KernelOverride kernels;  // kernel_policy.h: kAuto runs what the library picks for each case
  // When the Hopper forward runs, also run the mma.sync forward once on the same inputs and report
  // how far apart their O (and LSE) are: the Hopper kernel on the benchmark's long sequences, which
  // `gemtb check attention` (short random cases) does not reach.
  bool compare_kernels = true;
  uint64_t seed = 1;
  // AttentionOptions::tanh_approx on every case (silu and gelu_tanh through tanh.approx; the
  // comparison with the mma.sync forward, which evaluates the exact act, then shows its deviation).
  bool tanh_approx = false;
  // Seconds the GPU idles before each case (0: none), for telling apart why a case runs slower
  // after the others in one process (pma's forward: 0.327 against 0.302 ms alone, tools/bench/NOTES.md).
  // Not the clocks: bench_gpu.sh's nvidia-smi log showed 1980 MHz throughout.
  int settle_s = 0;
  // Also time each case's runs by their kernels' device time (KernelTime), where CUPTI is available.
  bool kernel_time = true;
  // Allocate from a pool that keeps freed memory (device_buffer.h, RetainFreedDeviceMemory) rather
  // than give each case's memory back to the driver: with cudaFree between cases, pma's forward ran
  // 0.327 ms after another case against 0.303 alone (tools/bench/NOTES.md; the driver's side of it
  // was not observable).
  bool retain_memory = true;
};

// The same runs' device time from CUPTI activity records (kernel_timer.h), timed in a second pass of
// `reps` runs right after the event-timed pass: what a profiler trace reports (the measure of
// tools/bench/meta_gdpa_peer.py's `_kernels` rows), without the gaps between launches.
struct KernelTime {
  bool ran = false;
  double median_ms = 0;   // median over runs of the summed duration of each run's kernels and memsets
  double mean_ms = 0;     // their mean (what meta_gdpa_peer.py's kernel_ms reports)
  double period_ms = 0;   // first start to last end over the runs, per run: kernels plus the gaps
  int activities_per_run = 0;
  std::string error;      // why it did not run (no CUPTI in this build, CUPTI refused, ...)
};

struct Timing {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int reps = 0;
  std::vector<double> samples_ms;  // every timed run, in run order
  KernelTime kernel;
};

struct KernelComparison {
  bool ran = false;
  double o_max_abs_diff = 0;  // max |O_hopper - O_mma_sync|
  double o_rel_l2 = 0;        // ||O_hopper - O_mma_sync|| / ||O_mma_sync||
  double o_max_abs = 0;       // max |O_mma_sync|
  double lse_max_abs_diff = 0;
  int64_t nonfinite = 0;      // non-finite values in the Hopper O
  // The Hopper backward against the mma.sync backward on the same O, LSE and dO (when both ran).
  bool grads_ran = false;
  double grad_rel_l2[3] = {0, 0, 0};        // dQ, dK, dV
  double grad_max_abs_diff[3] = {0, 0, 0};
  int64_t grad_nonfinite = 0;
};

struct CaseResult {
  BenchCase bench_case;
  CaseLengths lengths;
  int64_t pairs = 0;          // per query head
  double fwd_flops = 0;       // 4·D·H·pairs
  std::string forward_kernel;
  std::string backward_kernel;
  int input_sets = 0;
  double input_set_bytes = 0;
  Timing fwd, fwdbwd;
  KernelComparison comparison;
};

// Runs the cases; `progress` (may be empty) gets one line per finished case.
absl::StatusOr<std::vector<CaseResult>> RunAttentionBench(
    const BenchOptions& options, const std::function<void(const std::string&)>& progress);

// "NVIDIA H200, 132 SMs, L2 60 MB, driver 13000, runtime 13000".
std::string DeviceDescription();
std::string DeviceName();

}  // namespace gemtb::gpu::bench

#endif  // GEMTB_GPU_BENCH_ATTENTION_BENCH_H_
