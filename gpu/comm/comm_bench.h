// The project's NCCL benchmark (`gemtb bench comm`): one process drives every
// visible GPU (ncclCommInitAll, one stream per GPU, group calls) through all-reduce, all-gather,
// reduce-scatter, all-to-all (ncclSend/ncclRecv in a group) and broadcast over a size sweep in
// nccl-tests' convention (S is the buffer for all-reduce/broadcast, the full gathered size
// for all-gather/reduce-scatter, the bytes one rank sends for all-to-all), timing each call with CUDA
// events on every GPU (a call's time: the slowest GPU's; reported: the median over iterations).
// With copy_engine, the same sweep of the SM-free all-gather (copy_engine_all_gather.h) on >= 2 GPUs,
// in the same convention (S the full gathered size, busbw = algbw (p - 1) / p).
// Plus the interference probe (the simulator's κ), on one GPU or more: a cuBLAS bf16 GEMM on GPU 0 alone,
// beside an SM-based copy of the same bytes (an NCCL all-gather on >= 2 GPUs; on one GPU cuBLAS's
// copy kernel, which runs on the SMs) and beside a copy-engine copy of the same bytes (the copy-engine
// all-gather on >= 2 GPUs; cudaMemcpyAsync device-to-device on one GPU, which the copy engine
// carries); κ = median GEMM time beside / alone − 1 for each.
//
// NVLink SHARP stays off (NCCL_NVLS_ENABLE=0 is set before the communicators exist). NCCL_ALGO /
// NCCL_PROTO are taken from the environment as NCCL reads them at init, and recorded.
#ifndef GEMTB_GPU_COMM_COMM_BENCH_H_
#define GEMTB_GPU_COMM_COMM_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/common/dtype.h"

namespace gemtb::gpu::comm {

struct CommBenchOptions {
  std::vector<std::string> ops = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"};
  int64_t min_bytes = 1024;
  int64_t max_bytes = int64_t{1} << 30;
  int64_t factor = 2;
  Dtype dtype = Dtype::kBf16;  // kBf16 | kFp32
  int warmup = 5;
  int iters = 20;
  int gpus = 0;                // 0: every visible GPU
  bool copy_engine = false;    // also sweep the copy-engine all-gather (needs >= 2 GPUs)
  bool gemm = false;           // run the interference probe
  int gemm_dim = 8192;         // M = N = K
  int64_t gemm_copy_bytes = int64_t{256} << 20;  // bytes per background call (S of the all-gather)
};

struct CommMeasurement {
  std::string op;
  int64_t bytes = 0;       // S, nccl-tests' convention
  int64_t count = 0;       // elements passed to NCCL (per rank chunk for AG/RS, per peer for all-to-all)
  double time_us = 0;      // median over iterations of the slowest GPU's event time
  double time_us_min = 0;
  double time_us_max = 0;
  double algbw_GBps = 0;   // S / time
  double busbw_GBps = 0;   // algbw · f
  int iters = 0;
};

// The GEMM beside one kind of background copy.
struct GemmBeside {
  std::string how;         // what ran beside it ("NCCL all_gather on 4 GPUs", ...)
  double ms = 0;           // median GEMM time while it ran
  double slowdown = 0;     // ms / alone
  double kappa = 0;        // slowdown − 1
};

struct GemmProbe {
  int dim = 0;
  int gemms = 0;
  int64_t copy_bytes = 0;  // bytes per background call
  double alone_ms = 0;     // median over GEMMs, GPU 0
  GemmBeside sm_based;     // beside an SM-based copy (NCCL all-gather, or the copy kernel on one GPU)
  GemmBeside copy_engine;  // beside a copy-engine copy
};

struct CommBenchResult {
  std::string nccl_version;   // ncclGetVersion, "2.28.9"
  int nccl_version_code = 0;
  std::string device;         // cudaGetDeviceProperties name of GPU 0
  int gpus = 0;
  int sm_count = 0;
  std::string dtype;
  std::string nccl_algo_env;  // NCCL_ALGO at init ("" = auto)
  std::string nccl_proto_env;
  std::string nvls_enable_env;
  int warmup = 0;
  int iters = 0;
  std::vector<CommMeasurement> results;
  std::vector<CommMeasurement> copy_engine_results;  // op "all_gather", the copy-engine all-gather
  bool has_gemm = false;
  GemmProbe gemm;
};

// Runs the sweep; errors (no GPU, NCCL/CUDA failures) name the call that failed.
absl::StatusOr<CommBenchResult> RunCommBench(const CommBenchOptions& options);

// busbw / algbw as nccl-tests defines them.
double CommBusBwFactor(const std::string& op, int ranks);

}  // namespace gemtb::gpu::comm

#endif  // GEMTB_GPU_COMM_COMM_BENCH_H_
