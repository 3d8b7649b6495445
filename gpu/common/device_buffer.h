// An owning device array for host code, with every CUDA call's error as an absl::Status.
#ifndef GEMTB_GPU_COMMON_DEVICE_BUFFER_H_
#define GEMTB_GPU_COMMON_DEVICE_BUFFER_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace gemtb::gpu {

inline absl::Status CudaOk(cudaError_t err, absl::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

// Where DeviceArrays allocate. kDriver (the default): cudaMalloc / cudaFree, memory goes back to the
// driver when freed. kRetainedPool: cudaMallocAsync / cudaFreeAsync on the legacy stream from the
// current device's default pool, which RetainFreedDeviceMemory keeps from giving freed memory back,
// as the caching allocators of training frameworks do. Why a benchmark wants that: on the H200, a memory-bound
// kernel (pma's forward) timed right after an earlier case in the same process had freed GBs with
// cudaFree ran 8% slower than alone (0.327-0.331 against 0.303-0.307 ms), and with the retained pool
// it does not (0.304-0.308 in the whole table). What the driver does with returned memory that
// costs this is not visible from here (tools/bench/NOTES.md).
enum class DeviceAllocation { kDriver, kRetainedPool };

inline DeviceAllocation& DeviceAllocationMode() {
  static DeviceAllocation mode = DeviceAllocation::kDriver;
  return mode;
}

// Sets the current device's default memory pool to keep freed memory (release threshold: unlimited)
// and makes DeviceArrays allocate from it (process-wide; for single-stream tools such as the bench).
inline absl::Status RetainFreedDeviceMemory() {
  cudaMemPool_t pool = nullptr;
  int device = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("cudaGetDevice: ", cudaGetErrorString(e)));
  }
  if (cudaError_t e = cudaDeviceGetDefaultMemPool(&pool, device); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("cudaDeviceGetDefaultMemPool: ", cudaGetErrorString(e)));
  }
  uint64_t keep = ~uint64_t{0};
  if (cudaError_t e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("cudaMemPoolSetAttribute(release threshold): ", cudaGetErrorString(e)));
  }
  DeviceAllocationMode() = DeviceAllocation::kRetainedPool;
  return absl::OkStatus();
}

template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { Release(); }

  // n elements, uninitialised (a zero-size array holds no memory and a null pointer); what the array
  // held before is freed.
  absl::Status Allocate(size_t n, absl::string_view what) {
    Release();
    size_ = n;
    if (n == 0) return absl::OkStatus();
    pooled_ = DeviceAllocationMode() == DeviceAllocation::kRetainedPool;
    if (pooled_) {
      return CudaOk(cudaMallocAsync(reinterpret_cast<void**>(&ptr_), n * sizeof(T), nullptr),
                    absl::StrCat("cudaMallocAsync ", what));
    }
    return CudaOk(cudaMalloc(reinterpret_cast<void**>(&ptr_), n * sizeof(T)),
                  absl::StrCat("cudaMalloc ", what));
  }
  absl::Status Upload(absl::Span<const T> host, absl::string_view what) {
    if (absl::Status s = Allocate(host.size(), what); !s.ok()) return s;
    if (host.empty()) return absl::OkStatus();
    return CudaOk(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
                  absl::StrCat("copy of ", what, " to the device"));
  }
  absl::Status Zero(absl::string_view what) {
    if (size_ == 0) return absl::OkStatus();
    return CudaOk(cudaMemset(ptr_, 0, size_ * sizeof(T)), absl::StrCat("cudaMemset ", what));
  }
  absl::Status Download(std::vector<T>& host, absl::string_view what) const {
    host.resize(size_);
    if (size_ == 0) return absl::OkStatus();
    return CudaOk(cudaMemcpy(host.data(), ptr_, size_ * sizeof(T), cudaMemcpyDeviceToHost),
                  absl::StrCat("copy of ", what, " to the host"));
  }

  T* get() const { return ptr_; }
  size_t size() const { return size_; }
  // Exchanges the arrays (nothing is copied or freed).
  void Swap(DeviceArray& other) noexcept {
    std::swap(ptr_, other.ptr_);
    std::swap(size_, other.size_);
    std::swap(pooled_, other.pooled_);
  }

 private:
  void Release() {
    if (ptr_ == nullptr) return;
    if (pooled_) {
      cudaFreeAsync(ptr_, nullptr);
    } else {
      cudaFree(ptr_);
    }
    ptr_ = nullptr;
    size_ = 0;
  }

  T* ptr_ = nullptr;
  size_t size_ = 0;
  bool pooled_ = false;
};

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_COMMON_DEVICE_BUFFER_H_
