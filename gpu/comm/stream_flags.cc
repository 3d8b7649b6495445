// StreamWriteFlag / StreamWaitFlag on the driver's stream memory operations (see stream_flags.h).
#include "gpu/comm/stream_flags.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <mutex>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace gemtb::gpu::comm {
namespace {

struct DriverOps {
  PFN_cuStreamWriteValue32_v11070 write = nullptr;
  PFN_cuStreamWaitValue32_v11070 wait = nullptr;
  absl::Status status;
};

const DriverOps& Ops() {
  static const DriverOps ops = [] {
    DriverOps o;
    auto load = [](const char* symbol, void** fn) -> absl::Status {
      cudaDriverEntryPointQueryResult found{};
      // 12000: the CUDA 12 ABI of these functions (the _v2 forms, the only ones CUDA 13 has).
      const cudaError_t e = cudaGetDriverEntryPointByVersion(symbol, fn, 12000, cudaEnableDefault, &found);
      if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || *fn == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat("the CUDA driver has no ", symbol, " (",
                                                          cudaGetErrorString(e), ")"));
      }
      return absl::OkStatus();
    };
    o.status = load("cuStreamWriteValue32", reinterpret_cast<void**>(&o.write));
    if (o.status.ok()) o.status = load("cuStreamWaitValue32", reinterpret_cast<void**>(&o.wait));
    return o;
  }();
  return ops;
}

// The CUresult as a number: cuGetErrorName is itself a driver function, and nothing here links libcuda.
absl::Status DriverError(const char* what, CUresult r) {
  return absl::InternalError(absl::StrCat(what, ": CUresult ", static_cast<int>(r)));
}

}  // namespace

absl::Status StreamWriteFlag(cudaStream_t stream, uint32_t* flag, uint32_t value) {
  const DriverOps& ops = Ops();
  if (!ops.status.ok()) return ops.status;
  const CUresult r = ops.write(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(flag), value,
                               CU_STREAM_WRITE_VALUE_DEFAULT);
  return r == CUDA_SUCCESS ? absl::OkStatus() : DriverError("cuStreamWriteValue32", r);
}

absl::Status StreamWaitFlag(cudaStream_t stream, const uint32_t* flag, uint32_t value) {
  const DriverOps& ops = Ops();
  if (!ops.status.ok()) return ops.status;
  const CUresult r = ops.wait(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(flag), value,
                              CU_STREAM_WAIT_VALUE_GEQ);
  return r == CUDA_SUCCESS ? absl::OkStatus() : DriverError("cuStreamWaitValue32", r);
}

}  // namespace gemtb::gpu::comm
