// CUDA runtime errors as absl::Status (device-side files; host files use device_buffer.h).
#ifndef GEMTB_GPU_COMMON_CUDA_CHECK_CUH_
#define GEMTB_GPU_COMMON_CUDA_CHECK_CUH_

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gemtb::gpu {

inline absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

// Raises a kernel's dynamic shared-memory limit (needed above 48 KB), launches it on the default
// stream and reports a failed launch.
template <typename Kernel, typename Params>
absl::Status Launch(Kernel kernel, dim3 grid, dim3 block, size_t smem_bytes, const Params& params,
                    const char* name) {
  if (absl::Status s = CudaStatus(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem_bytes)),
          name);
      !s.ok()) {
    return s;
  }
  kernel<<<grid, block, smem_bytes>>>(params);
  return CudaStatus(cudaGetLastError(), name);
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_COMMON_CUDA_CHECK_CUH_
