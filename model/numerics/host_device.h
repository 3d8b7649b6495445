// Shared by reference/, gpu/ and sim/: everything in model/numerics must compile both as host C++20
// and as CUDA device code, so that the CPU oracle and the kernels share one definition of every
// number format. Only integer logic and explicitly rounded fp32 operations
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

// Arithmetic with exactly one IEEE round-to-nearest-even rounding per operation, in fp32 (AddRn,
// SubRn, MulRn; DivRn in fp32_ops.h) and fp64 (DAdd, DSub, DMul, DDiv; det_math.h builds on them).
// On the host the build uses -ffp-contract=off, so a plain operator is one rounding; on the device
// the _rn intrinsics additionally forbid nvcc from fusing a multiply and an add into an FMA. Of the
// format codecs only the RHT uses floating-point operations (the rest is integer logic); they keep
// subnormals unless device code is built with -ftz=true, which gemtb must not use. One template per
// operation serves both widths, so the two cannot drift apart.
template <typename T>
GEMTB_HD inline T RoundedAdd(T a, T b) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "float or double");
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == 4) return __fadd_rn(a, b); else return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

template <typename T>
GEMTB_HD inline T RoundedSub(T a, T b) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "float or double");
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == 4) return __fsub_rn(a, b); else return __dsub_rn(a, b);
#else
  return a - b;
#endif
}

template <typename T>
GEMTB_HD inline T RoundedMul(T a, T b) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "float or double");
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == 4) return __fmul_rn(a, b); else return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

template <typename T>
GEMTB_HD inline T RoundedDiv(T a, T b) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "float or double");
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == 4) return __fdiv_rn(a, b); else return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}

GEMTB_HD inline float AddRn(float a, float b) { return RoundedAdd(a, b); }
GEMTB_HD inline float SubRn(float a, float b) { return RoundedSub(a, b); }
GEMTB_HD inline float MulRn(float a, float b) { return RoundedMul(a, b); }

GEMTB_HD inline double DAdd(double a, double b) { return RoundedAdd(a, b); }
GEMTB_HD inline double DSub(double a, double b) { return RoundedSub(a, b); }
GEMTB_HD inline double DMul(double a, double b) { return RoundedMul(a, b); }
GEMTB_HD inline double DDiv(double a, double b) { return RoundedDiv(a, b); }

}  // namespace gemtb::numerics
