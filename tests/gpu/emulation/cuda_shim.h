// Lets a host C++ compiler build the kernels' headers (gpu/attention/*_kernel.cuh,
// gpu/train/gdpa_tensor_core_kernels.cuh, gpu/train/qk_norm_rope_kernels.cuh,
// gpu/embedding/backward_kernels.cuh) for the fiber emulation: CUDA's qualifiers become no-ops,
// threadIdx/blockIdx read the running fiber, __syncthreads and __shfl_xor_sync are collectives of
// fiber_block.h, and the vector types and intrinsics the kernels use are plain C++. Include it first, and never
// together with the CUDA runtime headers (their vector types would clash).
#ifndef GEMTB_TESTS_GPU_EMULATION_CUDA_SHIM_H_
#define GEMTB_TESTS_GPU_EMULATION_CUDA_SHIM_H_

#ifdef __CUDACC__
#error "cuda_shim.h is for host compilers only"
#endif

#include <math.h>

#include <algorithm>
#include <cstdint>

#include "tests/gpu/emulation/fiber_block.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#define __align__(n)
#define threadIdx (::gemtb::emu::ThreadIdx())
#define blockIdx (::gemtb::emu::BlockIdx())
#define gridDim (::gemtb::emu::GridDim())
#define blockDim (::gemtb::emu::BlockDim())

namespace gemtb::gpu {

using std::max;
using std::min;

struct uint4 {
  uint32_t x, y, z, w;
};
inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return {x, y, z, w}; }
struct uint2 {
  uint32_t x, y;
};
inline uint2 make_uint2(uint32_t x, uint32_t y) { return {x, y}; }
struct alignas(8) float2 {
  float x, y;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
struct alignas(16) float4 {
  float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

// Read-only loads are plain loads; the fast intrinsics are the library functions (the emulation checks
// logic, not the last ulp).
template <typename T>
inline T __ldg(const T* p) {
  return *p;
}
inline float __expf(float x) { return expf(x); }
inline float __fdividef(float x, float y) { return x / y; }
// The explicitly rounded operations are the host's IEEE fp32 operations (round to nearest even; the
// build contracts no FMA), so kernels built of them give the device's bytes here.
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }

inline void __syncthreads() { emu::Barrier(); }

inline float __shfl_xor_sync(unsigned /*mask*/, float value, int lane_mask) {
  float all[32];
  emu::WarpExchange(&value, sizeof(value), all);
  return all[(emu::ThreadIdx().x & 31u) ^ static_cast<unsigned>(lane_mask)];
}

// Lane `src`'s value, for any trivially copyable T (every lane of the warp takes part, as the
// kernels call it).
template <typename T>
inline T __shfl_sync(unsigned /*mask*/, T value, int src) {
  T all[32];
  emu::WarpExchange(&value, sizeof(value), all);
  return all[static_cast<unsigned>(src) & 31u];
}
inline unsigned __ballot_sync(unsigned /*mask*/, bool predicate) {
  bool all[32];
  emu::WarpExchange(&predicate, sizeof(predicate), all);
  unsigned bits = 0;
  for (unsigned k = 0; k < 32; ++k) bits |= all[k] ? 1u << k : 0u;
  return bits;
}
inline void __syncwarp(unsigned /*mask*/ = 0xFFFFFFFFu) {
  char mine = 0, all[32];
  emu::WarpExchange(&mine, 1, all);
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
// Fibers switch only at the collectives above, so a read-modify-write is atomic here.
template <typename T>
inline T atomicAdd(T* p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}

}  // namespace gemtb::gpu

#endif  // GEMTB_TESTS_GPU_EMULATION_CUDA_SHIM_H_
