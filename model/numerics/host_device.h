// Shared by reference/, gpu/ and sim/: everything in model/numerics must compile both as host C++20
// and as CUDA device code, so that the CPU oracle and the kernels share one definition of every
// number format (spec/attention.md §8). Only integer logic and explicitly rounded fp32 operations
// are used; nothing here depends on the rounding mode, FTZ/DAZ, -ffast-math or FMA contraction.
#pragma once

#include <cstdint>

#if !defined(__CUDA_ARCH__)
#include <bit>
#endif

#if defined(__CUDACC__)
#define GEMTB_HD __host__ __device__
#else
#define GEMTB_HD
#endif

namespace gemtb::numerics {

// Bit casts. Device code uses the CUDA intrinsics (std::bit_cast is not a __device__ function
// without --expt-relaxed-constexpr); host code uses std::bit_cast.
GEMTB_HD inline uint32_t FloatToBits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return std::bit_cast<uint32_t>(x);
#endif
}

GEMTB_HD inline float BitsToFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return std::bit_cast<float>(u);
#endif
}

GEMTB_HD inline uint64_t DoubleToBits(double x) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(x));
#else
  return std::bit_cast<uint64_t>(x);
#endif
}

GEMTB_HD inline double BitsToDouble(uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  return std::bit_cast<double>(u);
#endif
}

// Number of leading zero bits of a non-zero 64-bit value.
GEMTB_HD inline int CountLeadingZeros64(uint64_t x) {
#if defined(__CUDA_ARCH__)
  return __clzll(static_cast<long long>(x));
#else
  return std::countl_zero(x);
#endif
}

// fp32 arithmetic with exactly one IEEE round-to-nearest-even rounding per operation. On the host the
// build uses -ffp-contract=off, so a plain operator is one rounding; on the device the _rn intrinsics
// additionally forbid nvcc from fusing a multiply and an add into an FMA. Of the format codecs only
// the RHT uses floating-point operations (the rest is integer logic); they keep subnormals unless
// device code is built with -ftz=true, which gemtb must not use.
GEMTB_HD inline float AddRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

GEMTB_HD inline float SubRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

GEMTB_HD inline float MulRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

}  // namespace gemtb::numerics
