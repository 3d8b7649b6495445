// What the trainer's kernels' entry points share: the launch check every entry point ends with, the
// null-pointer, alignment and element-count checks of their arguments, the dynamic shared memory a
// kernel may take, a warp's fixed-order sum, and the loads and stores of their activations in either
// type (fp32 or bf16) around fp32 math.
#ifndef GEMTB_GPU_TRAIN_KERNEL_UTILS_CUH_
#define GEMTB_GPU_TRAIN_KERNEL_UTILS_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gemtb::gpu::train {

// A bf16 array as the kernels take it: its bit patterns (uint16_t, what mma.cuh's loads and Storage
// read and write).
inline const uint16_t* Bf16Bits(const __nv_bfloat16* p) { return reinterpret_cast<const uint16_t*>(p); }
inline uint16_t* Bf16Bits(__nv_bfloat16* p) { return reinterpret_cast<uint16_t*>(p); }

// The status of the last launch, named `what`.
inline absl::Status Launched(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

// A CUDA call's status, named `what`.
inline absl::Status CudaOk(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

// The first null pointer of `pointers`, by name: InvalidArgument "<name>=null: want a device pointer".
inline absl::Status NotNull(std::initializer_list<std::pair<const void*, const char*>> pointers) {
  for (const auto& [ptr, name] : pointers) {
    if (ptr == nullptr) return absl::InvalidArgumentError(absl::StrCat(name, "=null: want a device pointer"));
  }
  return absl::OkStatus();
}

// Whether every pointer is 16-byte aligned (null counts as aligned): where a kernel may move 16 bytes
// at a time.
inline bool Aligned16(std::initializer_list<const void*> pointers) {
  for (const void* ptr : pointers) {
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return false;
  }
  return true;
}

// The first pointer of `pointers` that is not 16-byte aligned, by name: InvalidArgument "<name>: want a
// 16-byte aligned pointer" (null counts as aligned).
inline absl::Status CheckAligned16(std::initializer_list<std::pair<const void*, const char*>> pointers) {
  for (const auto& [ptr, name] : pointers) {
    if (!Aligned16({ptr})) return absl::InvalidArgumentError(absl::StrCat(name, ": want a 16-byte aligned pointer"));
  }
  return absl::OkStatus();
}

// Lets `kernel` take `bytes` of dynamic shared memory (beyond the default 48 KB where needed).
template <typename Kernel>
absl::Status AllowSharedMemory(Kernel* kernel, size_t bytes, const char* what) {
  return CudaOk(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
                what);
}

// An elementwise kernel's element count: 1 .. 2^40-1.
inline absl::Status ValidateCount(int64_t count) {
  if (count < 1 || count >= (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(absl::StrCat("count=", count, ": want 1 .. 2^40-1"));
  }
  return absl::OkStatus();
}

// The sum of one value per lane by a fixed butterfly: every lane ends with the same bits.
__device__ inline float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// An activation as the fp32 the kernels compute in: bf16 widens exactly, fp32 is itself.
__device__ inline float ToFloat(float v) { return v; }
__device__ inline float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }

// An fp32 result stored as the activation type: bf16 rounds to nearest even, fp32 is itself.
template <typename T>
__device__ T FromFloat(float v);
template <>
__device__ inline float FromFloat<float>(float v) { return v; }
template <>
__device__ inline __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// The element type that kernels shared with the CPU emulation (the .cuh files, which hold bf16 as its
// bits) read for an activation type: bf16 as uint16_t, fp32 as itself.
template <typename T>
struct BitsOf {
  using type = T;
};
template <>
struct BitsOf<__nv_bfloat16> {
  using type = uint16_t;
};

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_KERNEL_UTILS_CUH_
