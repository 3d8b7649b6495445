#include "gpu/bench/attention_bench.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gpu/bench/device_random.h"
#include "gpu/bench/kernel_timer.h"
#include "gpu/common/device_buffer.h"
#include "model/common/status_macros.h"
#include "model/numerics/float_formats.h"

namespace gemtb::gpu::bench {
namespace {

constexpr ElementType kType = ElementType::kBFloat16;

// One input set (and the forward outputs the backward of the same iteration reads).
struct InputSet {
  DeviceArray<uint16_t> q, k, v, d_o, o;
  DeviceArray<float> lse;
};

struct Events {
  std::vector<cudaEvent_t> start, stop;
  explicit Events(int n) : start(static_cast<size_t>(n)), stop(static_cast<size_t>(n)) {
    for (int i = 0; i < n; ++i) {
      cudaEventCreate(&start[static_cast<size_t>(i)]);
      cudaEventCreate(&stop[static_cast<size_t>(i)]);
    }
  }
  ~Events() {
    for (size_t i = 0; i < start.size(); ++i) {
      cudaEventDestroy(start[i]);
      cudaEventDestroy(stop[i]);
    }
  }
};

// The median of a sorted, non-empty sample.
double MedianOfSorted(const std::vector<double>& v) {
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Runs `run(set)` `reps` times under a KernelTimer and sums each run's device activities. A failure
// of CUPTI itself is reported in the result (the event times still stand); a failing run is an error.
template <typename Run>
absl::StatusOr<KernelTime> TimeKernels(int first, int reps, int sets, const Run& run) {
  KernelTime out;
  absl::StatusOr<std::unique_ptr<KernelTimer>> timer = KernelTimer::Start();
  if (!timer.ok()) {
    out.error = std::string(timer.status().message());
    return out;
  }
  for (int i = 0; i < reps; ++i) GEMTB_RETURN_IF_ERROR(run((first + i) % sets));
  absl::StatusOr<std::vector<DeviceActivity>> acts = (*timer)->Stop();
  if (!acts.ok()) {
    out.error = std::string(acts.status().message());
    return out;
  }
  const size_t n = acts->size();
  if (n == 0 || n % static_cast<size_t>(reps) != 0) {
    out.error = absl::StrCat("kernel timing: ", n, " activities for ", reps, " runs (not a multiple)");
    return out;
  }
  const size_t per = n / static_cast<size_t>(reps);
  std::vector<double> ms;
  double sum = 0;
  for (size_t r = 0; r < static_cast<size_t>(reps); ++r) {
    uint64_t ns = 0;
    for (size_t j = r * per; j < (r + 1) * per; ++j) ns += (*acts)[j].end_ns - (*acts)[j].start_ns;
    ms.push_back(static_cast<double>(ns) * 1e-6);
    sum += ms.back();
  }
  uint64_t last_end = 0;
  for (const DeviceActivity& a : *acts) last_end = std::max(last_end, a.end_ns);
  std::sort(ms.begin(), ms.end());
  out.ran = true;
  out.activities_per_run = static_cast<int>(per);
  out.median_ms = MedianOfSorted(ms);
  out.mean_ms = sum / reps;
  out.period_ms = static_cast<double>(last_end - acts->front().start_ns) * 1e-6 / reps;
  return out;
}

// Times `run(set)` `reps` times after `warmup` untimed runs, rotating over `sets` input sets; with
// `kernel_time`, then `reps` more runs by their device time (TimeKernels).
template <typename Run>
absl::StatusOr<Timing> TimeIt(int warmup, int reps, int sets, bool kernel_time, const Run& run) {
  for (int i = 0; i < warmup; ++i) GEMTB_RETURN_IF_ERROR(run(i % sets));
  GEMTB_RETURN_IF_ERROR(CudaOk(cudaDeviceSynchronize(), "warm-up"));
  Events ev(reps);
  for (int i = 0; i < reps; ++i) {
    GEMTB_RETURN_IF_ERROR(CudaOk(cudaEventRecord(ev.start[static_cast<size_t>(i)]), "event"));
    GEMTB_RETURN_IF_ERROR(run((warmup + i) % sets));
    GEMTB_RETURN_IF_ERROR(CudaOk(cudaEventRecord(ev.stop[static_cast<size_t>(i)]), "event"));
  }
  GEMTB_RETURN_IF_ERROR(CudaOk(cudaDeviceSynchronize(), "timed runs"));
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    float t = 0;
    GEMTB_RETURN_IF_ERROR(CudaOk(
        cudaEventElapsedTime(&t, ev.start[static_cast<size_t>(i)], ev.stop[static_cast<size_t>(i)]), "elapsed"));
    ms.push_back(t);
  }
  Timing out;
  out.samples_ms = ms;
  std::sort(ms.begin(), ms.end());
  out.reps = reps;
  out.min_ms = ms.front();
  out.max_ms = ms.back();
  out.median_ms = MedianOfSorted(ms);
  if (kernel_time) {
    absl::StatusOr<KernelTime> k = TimeKernels(warmup + reps, reps, sets, run);
    if (!k.ok()) return k.status();
    out.kernel = *k;
  }
  return out;
}

// The call's arguments: shapes, offsets and options (no values: they live on the device).
struct HostCall {
  std::vector<int64_t> q_offsets, kv_offsets;
  AttentionArgs args;
};

std::unique_ptr<HostCall> MakeCall(const BenchCase& c, const CaseLengths& l) {
  auto call = std::make_unique<HostCall>();
  call->q_offsets.push_back(0);
  if (c.seeds > 0) {
    call->q_offsets.push_back(c.seeds);
  } else {
    for (int64_t x : l.q) call->q_offsets.push_back(call->q_offsets.back() + x);
  }
  call->kv_offsets.push_back(0);
  for (int64_t x : l.kv) call->kv_offsets.push_back(call->kv_offsets.back() + x);
  AttentionArgs& a = call->args;
  a.dtype = kType;
  a.q.shape = {call->q_offsets.back(), c.heads, c.head_dim};
  a.k.shape = {call->kv_offsets.back(), c.heads, c.head_dim};
  a.v.shape = a.k.shape;
  a.q_offsets = {call->q_offsets, {static_cast<int64_t>(call->q_offsets.size())}};
  a.kv_offsets = {call->kv_offsets, {static_cast<int64_t>(call->kv_offsets.size())}};
  a.max_lq = c.seeds > 0 ? c.seeds : c.max_lq;
  a.max_lk = c.max_lk;
  a.options = c.options;
  return call;
}

float Bf16ToFloat(uint16_t bits) { return numerics::Bf16BitsToFloat(bits); }

// ||a - b|| / ||b||, max |a - b| and the non-finite values of a (bf16 bit patterns).
struct Bf16Diff {
  double rel_l2 = 0, max_abs_diff = 0, max_abs = 0;
  int64_t nonfinite = 0;
};
Bf16Diff DiffBf16(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  Bf16Diff d;
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double x = Bf16ToFloat(a[i]);
    const double y = Bf16ToFloat(b[i]);
    if (!std::isfinite(x)) {
      ++d.nonfinite;
      continue;
    }
    d.max_abs_diff = std::max(d.max_abs_diff, std::abs(x - y));
    d.max_abs = std::max(d.max_abs, std::abs(y));
    diff2 += (x - y) * (x - y);
    ref2 += y * y;
  }
  d.rel_l2 = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  return d;
}

absl::StatusOr<KernelComparison> CompareKernels(const AttentionArgs& args, const DeviceCall& hopper,
                                                const InputSet& set, bool backward) {
  KernelComparison cmp;
  const bool grads = backward && hopper.plan().backward != BackwardKernelKind::kMmaSync;
  AttentionArgs mma_sync = args;
  mma_sync.kernels = {ForwardKernelKind::kMmaSync, BackwardKernelKind::kMmaSync};
  absl::StatusOr<std::unique_ptr<DeviceCall>> reference = DeviceCall::Create(mma_sync, /*with_backward=*/grads);
  if (!reference.ok()) return reference.status();
  DeviceArray<uint16_t> o_ref;
  DeviceArray<float> lse_ref;
  GEMTB_RETURN_IF_ERROR(o_ref.Allocate(static_cast<size_t>(hopper.o_elements()), "reference o"));
  if (hopper.softmax()) {
    GEMTB_RETURN_IF_ERROR(lse_ref.Allocate(static_cast<size_t>(hopper.heads() * hopper.out_rows()), "reference lse"));
  }
  const DeviceInputs in{set.q.get(), set.k.get(), set.v.get()};
  GEMTB_RETURN_IF_ERROR((*reference)->Forward(in, o_ref.get(), lse_ref.get()));
  GEMTB_RETURN_IF_ERROR(hopper.Forward(in, set.o.get(), set.lse.get()));
  GEMTB_RETURN_IF_ERROR(CudaOk(cudaDeviceSynchronize(), "kernel comparison"));
  std::vector<uint16_t> a, b;
  GEMTB_RETURN_IF_ERROR(set.o.Download(a, "o"));
  GEMTB_RETURN_IF_ERROR(o_ref.Download(b, "reference o"));
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = Bf16ToFloat(a[i]);
    const double y = Bf16ToFloat(b[i]);
    if (!std::isfinite(x)) {
      ++cmp.nonfinite;
      continue;
    }
    cmp.o_max_abs_diff = std::max(cmp.o_max_abs_diff, std::abs(x - y));
    cmp.o_max_abs = std::max(cmp.o_max_abs, std::abs(y));
    diff2 += (x - y) * (x - y);
    ref2 += y * y;
  }
  cmp.o_rel_l2 = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  if (hopper.softmax()) {
    std::vector<float> la, lb;
    GEMTB_RETURN_IF_ERROR(set.lse.Download(la, "lse"));
    GEMTB_RETURN_IF_ERROR(lse_ref.Download(lb, "reference lse"));
    for (size_t i = 0; i < la.size(); ++i) {
      if (la[i] == lb[i]) continue;  // equal, -inf included
      cmp.lse_max_abs_diff = std::max(cmp.lse_max_abs_diff, static_cast<double>(std::abs(la[i] - lb[i])));
    }
  }
  cmp.ran = true;
  if (grads) {
    // Both backwards on the Hopper forward's O and LSE (just computed into `set`) and the same dO.
    const size_t qn = static_cast<size_t>(hopper.q_elements());
    const size_t kvn = static_cast<size_t>(hopper.kv_elements());
    DeviceArray<uint16_t> g[2][3];
    DeviceArray<float> d_rows;
    for (auto& x : g) {
      GEMTB_RETURN_IF_ERROR(x[0].Allocate(qn, "dq"));
      GEMTB_RETURN_IF_ERROR(x[1].Allocate(kvn, "dk"));
      GEMTB_RETURN_IF_ERROR(x[2].Allocate(kvn, "dv"));
    }
    if (hopper.softmax()) {
      GEMTB_RETURN_IF_ERROR(d_rows.Allocate(static_cast<size_t>(hopper.heads() * hopper.out_rows()), "d_rows"));
    }
    GEMTB_RETURN_IF_ERROR(hopper.Backward(in, set.o.get(), set.lse.get(), set.d_o.get(),
                                          {g[0][0].get(), g[0][1].get(), g[0][2].get(), d_rows.get()}));
    GEMTB_RETURN_IF_ERROR((*reference)->Backward(in, set.o.get(), set.lse.get(), set.d_o.get(),
                                                 {g[1][0].get(), g[1][1].get(), g[1][2].get(), d_rows.get()}));
    GEMTB_RETURN_IF_ERROR(CudaOk(cudaDeviceSynchronize(), "backward comparison"));
    for (int t = 0; t < 3; ++t) {
      std::vector<uint16_t> ga, gb;
      GEMTB_RETURN_IF_ERROR(g[0][t].Download(ga, "hopper gradient"));
      GEMTB_RETURN_IF_ERROR(g[1][t].Download(gb, "reference gradient"));
      const Bf16Diff d = DiffBf16(ga, gb);
      cmp.grad_rel_l2[t] = d.rel_l2;
      cmp.grad_max_abs_diff[t] = d.max_abs_diff;
      cmp.grad_nonfinite += d.nonfinite;
    }
    cmp.grads_ran = true;
  }
  return cmp;
}

absl::StatusOr<CaseResult> RunCase(const BenchCase& c, const BenchOptions& opt) {
  CaseResult r;
  r.bench_case = c;
  r.lengths = DrawLengths(c);
  r.pairs = ValidPairs(c, r.lengths);
  r.fwd_flops = 2.0 * static_cast<double>(c.heads) * static_cast<double>(2 * c.head_dim) * static_cast<double>(r.pairs);
  const std::unique_ptr<HostCall> host = MakeCall(c, r.lengths);
  host->args.kernels = opt.kernels;
  absl::StatusOr<std::unique_ptr<DeviceCall>> made = DeviceCall::Create(host->args, opt.backward);
  if (!made.ok()) return made.status();
  const DeviceCall& call = **made;
  r.forward_kernel = call.forward_kernel_name();
  r.backward_kernel = call.backward_kernel_name();

  cudaDeviceProp prop{};
  GEMTB_RETURN_IF_ERROR(CudaOk(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties"));
  const size_t qn = static_cast<size_t>(call.q_elements());
  const size_t kvn = static_cast<size_t>(call.kv_elements());
  const size_t on = static_cast<size_t>(call.o_elements());
  const size_t lsen = static_cast<size_t>(call.heads() * call.out_rows());
  r.input_set_bytes = 2.0 * static_cast<double>(qn + 2 * kvn);
  const double l2 = static_cast<double>(prop.l2CacheSize);
  r.input_sets = static_cast<int>(std::clamp(std::ceil(3.0 * l2 / std::max(1.0, r.input_set_bytes)), 2.0, 16.0));

  std::vector<InputSet> sets(static_cast<size_t>(r.input_sets));
  uint64_t seed = opt.seed * 1000;
  for (InputSet& s : sets) {
    GEMTB_RETURN_IF_ERROR(s.q.Allocate(qn, "q"));
    GEMTB_RETURN_IF_ERROR(s.k.Allocate(kvn, "k"));
    GEMTB_RETURN_IF_ERROR(s.v.Allocate(kvn, "v"));
    GEMTB_RETURN_IF_ERROR(s.o.Allocate(on, "o"));
    if (call.softmax()) GEMTB_RETURN_IF_ERROR(s.lse.Allocate(lsen, "lse"));
    GEMTB_RETURN_IF_ERROR(FillUniform(s.q.get(), static_cast<int64_t>(qn), kType, ++seed));
    GEMTB_RETURN_IF_ERROR(FillUniform(s.k.get(), static_cast<int64_t>(kvn), kType, ++seed));
    GEMTB_RETURN_IF_ERROR(FillUniform(s.v.get(), static_cast<int64_t>(kvn), kType, ++seed));
    if (opt.backward) {
      GEMTB_RETURN_IF_ERROR(s.d_o.Allocate(on, "d_o"));
      GEMTB_RETURN_IF_ERROR(FillUniform(s.d_o.get(), static_cast<int64_t>(on), kType, ++seed));
    }
  }
  DeviceArray<uint16_t> dq, dk, dv;
  DeviceArray<float> d_rows;
  if (opt.backward) {
    GEMTB_RETURN_IF_ERROR(dq.Allocate(qn, "dq"));
    GEMTB_RETURN_IF_ERROR(dk.Allocate(kvn, "dk"));
    GEMTB_RETURN_IF_ERROR(dv.Allocate(kvn, "dv"));
    if (call.softmax()) GEMTB_RETURN_IF_ERROR(d_rows.Allocate(lsen, "d_rows"));
  }
  GEMTB_RETURN_IF_ERROR(CudaOk(cudaDeviceSynchronize(), "input fill"));

  const auto forward = [&](int i) {
    const InputSet& s = sets[static_cast<size_t>(i)];
    return call.Forward({s.q.get(), s.k.get(), s.v.get()}, s.o.get(), s.lse.get());
  };
  absl::StatusOr<Timing> fwd = TimeIt(opt.warmup, opt.reps, r.input_sets, opt.kernel_time, forward);
  if (!fwd.ok()) return fwd.status();
  r.fwd = *fwd;
  if (opt.backward) {
    const auto both = [&](int i) -> absl::Status {
      const InputSet& s = sets[static_cast<size_t>(i)];
      const DeviceInputs in{s.q.get(), s.k.get(), s.v.get()};
      GEMTB_RETURN_IF_ERROR(call.Forward(in, s.o.get(), s.lse.get()));
      return call.Backward(in, s.o.get(), s.lse.get(), s.d_o.get(), {dq.get(), dk.get(), dv.get(), d_rows.get()});
    };
    absl::StatusOr<Timing> fb = TimeIt(opt.warmup, opt.reps, r.input_sets, opt.kernel_time, both);
    if (!fb.ok()) return fb.status();
    r.fwdbwd = *fb;
  }
  if (opt.compare_kernels &&
      (call.plan().forward != ForwardKernelKind::kMmaSync ||
       (opt.backward && call.plan().backward != BackwardKernelKind::kMmaSync))) {
    absl::StatusOr<KernelComparison> cmp = CompareKernels(host->args, call, sets[0], opt.backward);
    if (!cmp.ok()) return cmp.status();
    r.comparison = *cmp;
  }
  return r;
}

}  // namespace

std::string DeviceName() {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "unknown";
  return prop.name;
}

std::string DeviceDescription() {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "unknown";
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  return absl::StrCat(prop.name, ", ", prop.multiProcessorCount, " SMs, L2 ", prop.l2CacheSize >> 20,
                      " MB, compute capability ", prop.major, ".", prop.minor, ", driver ", driver,
                      ", runtime ", runtime);
}

absl::StatusOr<std::vector<CaseResult>> RunAttentionBench(
    const BenchOptions& options, const std::function<void(const std::string&)>& progress) {
  if (options.reps < 1) return absl::InvalidArgumentError(absl::StrCat("--reps=", options.reps, ": must be >= 1"));
  if (options.warmup < 0) return absl::InvalidArgumentError(absl::StrCat("--warmup=", options.warmup, ": must be >= 0"));
  std::vector<BenchCase> cases;
  if (options.cases.empty()) {
    cases = SpecCases();
  } else {
    for (const std::string& name : options.cases) {
      absl::StatusOr<BenchCase> c = FindCase(name);
      if (!c.ok()) return c.status();
      cases.push_back(*c);
    }
  }
  for (BenchCase& c : cases) c.options.tanh_approx = options.tanh_approx;
  GEMTB_RETURN_IF_ERROR(DeviceAvailable());
  if (options.retain_memory) GEMTB_RETURN_IF_ERROR(RetainFreedDeviceMemory());
  std::vector<CaseResult> results;
  for (const BenchCase& c : cases) {
    if (options.settle_s > 0) {
      GEMTB_RETURN_IF_ERROR(CudaOk(cudaDeviceSynchronize(), "settle"));
      std::this_thread::sleep_for(std::chrono::seconds(options.settle_s));
    }
    absl::StatusOr<CaseResult> r = RunCase(c, options);
    if (!r.ok()) return absl::Status(r.status().code(), absl::StrCat("case ", c.name, ": ", r.status().message()));
    if (progress) {
      const double tf = r->fwd_flops / (r->fwd.median_ms * 1e9);
      const double tfb = r->fwdbwd.reps > 0 ? 3.5 * r->fwd_flops / (r->fwdbwd.median_ms * 1e9) : 0;
      progress(absl::StrCat(c.name, options.tanh_approx ? " (tanh.approx)" : "", ": ", r->forward_kernel, " fwd ",
                            r->fwd.median_ms, " ms (", tf,
                            " TFLOP/s), fwd+bwd ", r->fwdbwd.median_ms, " ms (", tfb, " TFLOP/s)",
                            r->fwd.kernel.ran ? absl::StrCat("; kernel time fwd ", r->fwd.kernel.median_ms,
                                                             " ms (period ", r->fwd.kernel.period_ms, ")")
                                              : "",
                            r->fwdbwd.kernel.ran ? absl::StrCat(", fwd+bwd ", r->fwdbwd.kernel.median_ms, " ms (period ",
                                                                r->fwdbwd.kernel.period_ms, ")")
                                                 : "",
                            r->comparison.ran ? absl::StrCat(", vs mma_sync O rel-L2 ", r->comparison.o_rel_l2,
                                                             " max abs ", r->comparison.o_max_abs_diff,
                                                             " nonfinite ", r->comparison.nonfinite)
                                              : "",
                            r->comparison.grads_ran
                                ? absl::StrCat("; bwd vs mma_sync rel-L2 dQ ", r->comparison.grad_rel_l2[0], " dK ",
                                               r->comparison.grad_rel_l2[1], " dV ", r->comparison.grad_rel_l2[2],
                                               " nonfinite ", r->comparison.grad_nonfinite)
                                : ""));
    }
    results.push_back(*std::move(r));
  }
  return results;
}

}  // namespace gemtb::gpu::bench
