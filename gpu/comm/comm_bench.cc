// RunCommBench: NCCL sweep and GEMM probe on every visible GPU of one host (see comm_bench.h).
#include "gpu/comm/comm_bench.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gpu/comm/copy_engine_all_gather.h"

namespace gemtb::gpu::comm {
namespace {

absl::Status CudaError(const char* what, cudaError_t e) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}
absl::Status NcclError(const char* what, ncclResult_t r) {
  return absl::InternalError(absl::StrCat(what, ": ", ncclGetErrorString(r)));
}

#define COMM_CUDA(call)                                          \
  do {                                                           \
    if (cudaError_t e_ = (call); e_ != cudaSuccess) return CudaError(#call, e_); \
  } while (false)
#define COMM_NCCL(call)                                          \
  do {                                                           \
    if (ncclResult_t r_ = (call); r_ != ncclSuccess) return NcclError(#call, r_); \
  } while (false)

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

// Per-GPU state: stream, buffers, the communicator.
struct Rank {
  int device = 0;
  cudaStream_t stream = nullptr;
  cudaStream_t compute = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
  ncclComm_t comm = nullptr;
};

class Bench {
 public:
  ~Bench() {
    for (Rank& r : ranks_) {
      cudaSetDevice(r.device);
      if (r.comm) ncclCommDestroy(r.comm);
      if (r.send) cudaFree(r.send);
      if (r.recv) cudaFree(r.recv);
      if (r.stream) cudaStreamDestroy(r.stream);
      if (r.compute) cudaStreamDestroy(r.compute);
    }
  }

  absl::Status Init(int gpus, int64_t max_bytes) {
    int visible = 0;
    COMM_CUDA(cudaGetDeviceCount(&visible));
    if (visible < 1) return absl::FailedPreconditionError("no CUDA device visible");
    const int n = gpus > 0 ? gpus : visible;
    if (n > visible) {
      return absl::InvalidArgumentError(absl::StrCat("--gpus: ", n, " but only ", visible, " visible"));
    }
    ranks_.resize(n);
    std::vector<int> devs(n);
    for (int i = 0; i < n; ++i) {
      devs[i] = i;
      Rank& r = ranks_[i];
      r.device = i;
      COMM_CUDA(cudaSetDevice(i));
      COMM_CUDA(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking));
      COMM_CUDA(cudaStreamCreateWithFlags(&r.compute, cudaStreamNonBlocking));
      COMM_CUDA(cudaMalloc(&r.send, static_cast<size_t>(max_bytes)));
      COMM_CUDA(cudaMalloc(&r.recv, static_cast<size_t>(max_bytes)));
      COMM_CUDA(cudaMemset(r.send, 0, static_cast<size_t>(max_bytes)));
      COMM_CUDA(cudaMemset(r.recv, 0, static_cast<size_t>(max_bytes)));
    }
    std::vector<ncclComm_t> comms(n);
    COMM_NCCL(ncclCommInitAll(comms.data(), n, devs.data()));
    for (int i = 0; i < n; ++i) ranks_[i].comm = comms[i];
    if (n >= 2) {
      // The copy-engine all-gather's windows: one slot per GPU of S / p at the largest S.
      absl::StatusOr<std::vector<std::unique_ptr<CopyEngineAllGather>>> ce =
          CopyEngineAllGather::CreateInProcess(devs, max_bytes / n);
      if (!ce.ok()) return ce.status();
      copy_engine_ = *std::move(ce);
    }
    return absl::OkStatus();
  }

  int size() const { return static_cast<int>(ranks_.size()); }
  std::vector<Rank>& ranks() { return ranks_; }

  // Enqueues one collective of S bytes on every rank's comm stream (one NCCL group).
  // "all_gather_ce" is the copy-engine all-gather (S the gathered size), no NCCL involved.
  absl::Status Enqueue(const std::string& op, int64_t bytes, ncclDataType_t type, size_t elem, bool on_comm = true) {
    const int p = size();
    if (op == "all_gather_ce") {
      if (copy_engine_.empty()) return absl::InvalidArgumentError("the copy-engine all-gather needs 2 GPUs or more");
      for (int i = 0; i < p; ++i) {
        Rank& r = ranks_[i];
        if (absl::Status s = copy_engine_[i]->AllGather(r.send, bytes / p, on_comm ? r.stream : r.compute); !s.ok()) {
          return s;
        }
      }
      return absl::OkStatus();
    }
    COMM_NCCL(ncclGroupStart());
    for (int i = 0; i < p; ++i) {
      Rank& r = ranks_[i];
      cudaStream_t s = on_comm ? r.stream : r.compute;
      if (op == "all_reduce") {
        COMM_NCCL(ncclAllReduce(r.send, r.recv, bytes / elem, type, ncclSum, r.comm, s));
      } else if (op == "all_gather") {
        COMM_NCCL(ncclAllGather(r.send, r.recv, bytes / (elem * p), type, r.comm, s));
      } else if (op == "reduce_scatter") {
        COMM_NCCL(ncclReduceScatter(r.send, r.recv, bytes / (elem * p), type, ncclSum, r.comm, s));
      } else if (op == "broadcast") {
        COMM_NCCL(ncclBroadcast(r.send, r.recv, bytes / elem, type, 0, r.comm, s));
      } else if (op == "all_to_all") {
        const size_t chunk = bytes / (elem * p);
        for (int peer = 0; peer < p; ++peer) {
          COMM_NCCL(ncclSend(static_cast<char*>(r.send) + peer * chunk * elem, chunk, type, peer, r.comm, s));
          COMM_NCCL(ncclRecv(static_cast<char*>(r.recv) + peer * chunk * elem, chunk, type, peer, r.comm, s));
        }
      } else {
        return absl::InvalidArgumentError(absl::StrCat("--ops: unknown op \"", op, "\""));
      }
    }
    COMM_NCCL(ncclGroupEnd());
    return absl::OkStatus();
  }

  absl::Status Sync() {
    for (Rank& r : ranks_) {
      COMM_CUDA(cudaSetDevice(r.device));
      COMM_CUDA(cudaDeviceSynchronize());
    }
    return absl::OkStatus();
  }

 private:
  std::vector<Rank> ranks_;
  std::vector<std::unique_ptr<CopyEngineAllGather>> copy_engine_;  // >= 2 GPUs
};

// Times `iters` calls: events around each call on every GPU; a call's time is the slowest GPU's.
absl::StatusOr<std::vector<double>> TimeCalls(Bench& bench, const std::string& op, int64_t bytes,
                                              ncclDataType_t type, size_t elem, int warmup, int iters) {
  for (int w = 0; w < warmup; ++w) {
    if (absl::Status s = bench.Enqueue(op, bytes, type, elem); !s.ok()) return s;
  }
  if (absl::Status s = bench.Sync(); !s.ok()) return s;
  const int p = bench.size();
  std::vector<std::vector<cudaEvent_t>> start(p, std::vector<cudaEvent_t>(iters)), stop = start;
  for (int i = 0; i < p; ++i) {
    COMM_CUDA(cudaSetDevice(bench.ranks()[i].device));
    for (int k = 0; k < iters; ++k) {
      COMM_CUDA(cudaEventCreate(&start[i][k]));
      COMM_CUDA(cudaEventCreate(&stop[i][k]));
    }
  }
  for (int k = 0; k < iters; ++k) {
    for (int i = 0; i < p; ++i) {
      COMM_CUDA(cudaSetDevice(bench.ranks()[i].device));
      COMM_CUDA(cudaEventRecord(start[i][k], bench.ranks()[i].stream));
    }
    if (absl::Status s = bench.Enqueue(op, bytes, type, elem); !s.ok()) return s;
    for (int i = 0; i < p; ++i) {
      COMM_CUDA(cudaSetDevice(bench.ranks()[i].device));
      COMM_CUDA(cudaEventRecord(stop[i][k], bench.ranks()[i].stream));
    }
  }
  if (absl::Status s = bench.Sync(); !s.ok()) return s;
  std::vector<double> times(iters, 0.0);
  for (int i = 0; i < p; ++i) {
    COMM_CUDA(cudaSetDevice(bench.ranks()[i].device));
    for (int k = 0; k < iters; ++k) {
      float ms = 0;
      COMM_CUDA(cudaEventElapsedTime(&ms, start[i][k], stop[i][k]));
      times[k] = std::max(times[k], 1e3 * ms);
      cudaEventDestroy(start[i][k]);
      cudaEventDestroy(stop[i][k]);
    }
  }
  return times;
}

// What runs beside the GEMM: nothing, an SM-based copy, or a copy-engine copy.
enum class Background { kNone, kSmBased, kCopyEngine };

// One background call of `bytes` on every GPU's comm stream.
absl::Status EnqueueBackground(Bench& bench, Background kind, cublasHandle_t copy_handle, int64_t bytes) {
  const int p = bench.size();
  if (kind == Background::kSmBased) {
    if (p >= 2) return bench.Enqueue("all_gather", bytes, ncclBfloat16, 2);
    Rank& r = bench.ranks()[0];
    COMM_CUDA(cudaSetDevice(r.device));
    // cuBLAS's copy kernel: SM-based, the one-GPU stand-in for an SM-based collective.
    if (cublasScopy(copy_handle, static_cast<int>(bytes / 4), static_cast<const float*>(r.send), 1,
                    static_cast<float*>(r.recv), 1) != CUBLAS_STATUS_SUCCESS) {
      return absl::InternalError("cublasScopy failed");
    }
    return absl::OkStatus();
  }
  if (kind == Background::kCopyEngine) {
    if (p >= 2) return bench.Enqueue("all_gather_ce", bytes, ncclBfloat16, 2);
    Rank& r = bench.ranks()[0];
    COMM_CUDA(cudaSetDevice(r.device));
    COMM_CUDA(cudaMemcpyAsync(r.recv, r.send, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, r.stream));
  }
  return absl::OkStatus();
}

std::string BackgroundHow(Background kind, int p) {
  if (kind == Background::kSmBased) {
    return p >= 2 ? absl::StrCat("NCCL all_gather on ", p, " GPUs") : "cuBLAS copy kernel (cublasScopy) on GPU 0";
  }
  return p >= 2 ? absl::StrCat("copy-engine all_gather on ", p, " GPUs")
                : "cudaMemcpyAsync device-to-device on GPU 0";
}

// Median time of one background call alone (GPU 0's comm stream), to size the queue beside the GEMMs.
absl::StatusOr<double> TimeBackgroundMs(Bench& bench, Background kind, cublasHandle_t copy_handle, int64_t bytes) {
  Rank& r0 = bench.ranks()[0];
  std::vector<double> ms;
  for (int k = 0; k < 7; ++k) {
    cudaEvent_t start, stop;
    COMM_CUDA(cudaSetDevice(r0.device));
    COMM_CUDA(cudaEventCreate(&start));
    COMM_CUDA(cudaEventCreate(&stop));
    COMM_CUDA(cudaEventRecord(start, r0.stream));
    if (absl::Status s = EnqueueBackground(bench, kind, copy_handle, bytes); !s.ok()) return s;
    COMM_CUDA(cudaSetDevice(r0.device));
    COMM_CUDA(cudaEventRecord(stop, r0.stream));
    if (absl::Status s = bench.Sync(); !s.ok()) return s;
    float t = 0;
    COMM_CUDA(cudaEventElapsedTime(&t, start, stop));
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    if (k >= 2) ms.push_back(t);  // two warm-up calls
  }
  return Median(ms);
}

// GEMM on GPU 0's compute stream: median event time of `n` GEMMs, optionally while `calls`
// background calls queued on the comm streams run.
absl::StatusOr<double> TimeGemms(Bench& bench, cublasHandle_t handle, void* a, void* b, void* c, int dim, int n,
                                 Background kind, cublasHandle_t copy_handle, int64_t bytes, int calls) {
  Rank& r0 = bench.ranks()[0];
  for (int k = 0; kind != Background::kNone && k < calls; ++k) {
    if (absl::Status s = EnqueueBackground(bench, kind, copy_handle, bytes); !s.ok()) return s;
  }
  COMM_CUDA(cudaSetDevice(r0.device));
  std::vector<cudaEvent_t> start(n), stop(n);
  for (int k = 0; k < n; ++k) {
    COMM_CUDA(cudaEventCreate(&start[k]));
    COMM_CUDA(cudaEventCreate(&stop[k]));
  }
  const float one = 1.0f, zero = 0.0f;
  for (int k = 0; k < n; ++k) {
    COMM_CUDA(cudaEventRecord(start[k], r0.compute));
    if (cublasStatus_t st = cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, dim, dim, dim, &one, a, CUDA_R_16BF, dim, b,
                                         CUDA_R_16BF, dim, &zero, c, CUDA_R_16BF, dim, CUBLAS_COMPUTE_32F,
                                         CUBLAS_GEMM_DEFAULT);
        st != CUBLAS_STATUS_SUCCESS) {
      return absl::InternalError(absl::StrCat("cublasGemmEx: status ", static_cast<int>(st)));
    }
    COMM_CUDA(cudaEventRecord(stop[k], r0.compute));
  }
  if (absl::Status s = bench.Sync(); !s.ok()) return s;
  COMM_CUDA(cudaSetDevice(r0.device));
  std::vector<double> ms(n);
  for (int k = 0; k < n; ++k) {
    float t = 0;
    COMM_CUDA(cudaEventElapsedTime(&t, start[k], stop[k]));
    ms[k] = t;
    cudaEventDestroy(start[k]);
    cudaEventDestroy(stop[k]);
  }
  // With a background, only GEMMs that ran while it did count: the first half (the background
  // queue is sized to outlast them, see GemmProbeRun).
  if (kind != Background::kNone) ms.resize(std::max(1, n / 2));
  return Median(ms);
}

absl::Status GemmProbeRun(Bench& bench, const CommBenchOptions& o, GemmProbe* out) {
  Rank& r0 = bench.ranks()[0];
  COMM_CUDA(cudaSetDevice(r0.device));
  const size_t elems = static_cast<size_t>(o.gemm_dim) * o.gemm_dim;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  COMM_CUDA(cudaMalloc(&a, elems * 2));
  COMM_CUDA(cudaMalloc(&b, elems * 2));
  COMM_CUDA(cudaMalloc(&c, elems * 2));
  COMM_CUDA(cudaMemset(a, 0, elems * 2));
  COMM_CUDA(cudaMemset(b, 0, elems * 2));
  cublasHandle_t handle = nullptr, copy_handle = nullptr;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) return absl::InternalError("cublasCreate failed");
  if (cublasCreate(&copy_handle) != CUBLAS_STATUS_SUCCESS) return absl::InternalError("cublasCreate failed");
  cublasSetStream(handle, r0.compute);
  cublasSetStream(copy_handle, r0.stream);
  const int p = bench.size();
  const int64_t bytes = o.gemm_copy_bytes / (2 * p) * (2 * p);  // whole bf16 chunks per rank
  COMM_CUDA(cudaSetDevice(r0.device));
  const int n = 20;
  absl::Status status = absl::OkStatus();
  absl::StatusOr<double> warm = TimeGemms(bench, handle, a, b, c, o.gemm_dim, 5, Background::kNone, nullptr, 0, 0);
  absl::StatusOr<double> alone =
      warm.ok() ? TimeGemms(bench, handle, a, b, c, o.gemm_dim, n, Background::kNone, nullptr, 0, 0) : warm;
  if (!alone.ok()) status = alone.status();
  for (Background kind : {Background::kSmBased, Background::kCopyEngine}) {
    if (!status.ok()) break;
    absl::StatusOr<double> one = TimeBackgroundMs(bench, kind, copy_handle, bytes);
    if (!one.ok()) { status = one.status(); break; }
    // Enough background calls to cover all n GEMMs (their time measured alone) twice over.
    const int calls = std::max(4, static_cast<int>(2.0 * n * (*alone) / std::max(*one, 1e-3)) + 2);
    absl::StatusOr<double> beside = TimeGemms(bench, handle, a, b, c, o.gemm_dim, n, kind, copy_handle, bytes, calls);
    if (!beside.ok()) { status = beside.status(); break; }
    GemmBeside& g = kind == Background::kSmBased ? out->sm_based : out->copy_engine;
    g.how = BackgroundHow(kind, p);
    g.ms = *beside;
    g.slowdown = *beside / *alone;
    g.kappa = g.slowdown - 1;
  }
  cublasDestroy(handle);
  cublasDestroy(copy_handle);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  if (!status.ok()) return status;
  out->dim = o.gemm_dim;
  out->alone_ms = *alone;
  out->copy_bytes = bytes;
  out->gemms = n;
  return absl::OkStatus();
}

}  // namespace

double CommBusBwFactor(const std::string& op, int ranks) {
  const double p = ranks;
  if (op == "all_reduce") return 2 * (p - 1) / p;
  if (op == "broadcast") return 1;
  return (p - 1) / p;
}

absl::StatusOr<CommBenchResult> RunCommBench(const CommBenchOptions& o) {
  if (o.dtype != Dtype::kBf16 && o.dtype != Dtype::kFp32) {
    return absl::InvalidArgumentError(absl::StrCat("--dtype: \"", std::string(DtypeName(o.dtype)), "\" is not one of bf16, fp32"));
  }
  if (o.min_bytes < 1 || o.max_bytes < o.min_bytes || o.factor < 2 || o.iters < 1 || o.warmup < 0) {
    return absl::InvalidArgumentError("sizes: need 1 <= min <= max, factor >= 2, iters >= 1, warmup >= 0");
  }
  // NVLink SHARP off before any communicator exists (KINDS.md; calibration files record it).
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  const ncclDataType_t type = o.dtype == Dtype::kBf16 ? ncclBfloat16 : ncclFloat32;
  const size_t elem = o.dtype == Dtype::kBf16 ? 2 : 4;

  CommBenchResult result;
  int version = 0;
  COMM_NCCL(ncclGetVersion(&version));
  result.nccl_version_code = version;
  result.nccl_version = absl::StrCat(version / 10000, ".", (version % 10000) / 100, ".", version % 100);
  result.nccl_algo_env = Env("NCCL_ALGO");
  result.nccl_proto_env = Env("NCCL_PROTO");
  result.nvls_enable_env = Env("NCCL_NVLS_ENABLE");
  result.dtype = std::string(DtypeName(o.dtype));
  result.warmup = o.warmup;
  result.iters = o.iters;

  Bench bench;
  const int64_t buffer = std::max(o.max_bytes, o.gemm ? o.gemm_copy_bytes : int64_t{0});
  if (absl::Status s = bench.Init(o.gpus, buffer); !s.ok()) return s;
  const int p = bench.size();
  result.gpus = p;
  cudaDeviceProp prop{};
  COMM_CUDA(cudaGetDeviceProperties(&prop, 0));
  result.device = prop.name;
  result.sm_count = prop.multiProcessorCount;

  if (o.copy_engine && p < 2) {
    return absl::InvalidArgumentError(absl::StrCat("--copy-engine: needs 2 GPUs or more; ", p, " in use"));
  }
  std::vector<std::string> sweeps = o.ops;
  if (o.copy_engine) sweeps.push_back("all_gather_ce");
  for (const std::string& op : sweeps) {
    for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
      // Every rank's chunk must be a whole number of elements (nccl-tests rounds the same way).
      const int64_t unit = static_cast<int64_t>(elem) * (op == "all_reduce" || op == "broadcast" ? 1 : p);
      const bool ce = op == "all_gather_ce";
      const int64_t s_bytes = bytes / unit * unit;
      if (s_bytes == 0) continue;
      absl::StatusOr<std::vector<double>> times = TimeCalls(bench, op, s_bytes, type, elem, o.warmup, o.iters);
      if (!times.ok()) return times.status();
      CommMeasurement m;
      m.op = ce ? "all_gather" : op;
      m.bytes = s_bytes;
      m.count = op == "all_reduce" || op == "broadcast" ? s_bytes / elem : s_bytes / (elem * p);
      m.time_us = Median(*times);
      m.time_us_min = *std::min_element(times->begin(), times->end());
      m.time_us_max = *std::max_element(times->begin(), times->end());
      m.algbw_GBps = s_bytes / (m.time_us * 1e3);
      m.busbw_GBps = m.algbw_GBps * CommBusBwFactor(m.op, p);
      m.iters = o.iters;
      (ce ? result.copy_engine_results : result.results).push_back(m);
    }
  }

  if (o.gemm) {
    if (absl::Status s = GemmProbeRun(bench, o, &result.gemm); !s.ok()) return s;
    result.has_gemm = true;
  }
  return result;
}

}  // namespace gemtb::gpu::comm
