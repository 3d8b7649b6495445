// Randomized Hadamard transform (RHT), applied before MX quantisation to spread outliers
// (FA3 incoherent processing, arXiv 2407.08608).
//
// Forward: x ← H_n · D · x, where D = diag(s_i) with s_i = 1 - 2·bit_i, bit_i = bit i%32 of word i/32
// of the Philox block at counter 0 of (seed, stream) (the same signs for every block), and H_n the
// orthonormal Walsh–Hadamard matrix in natural (Sylvester) order, H[i][j] = (-1)^popcount(i&j)/√n,
// evaluated as fp32 butterflies (a, b) → (a+b, a−b) in stages h = 1, 2, …, n/2, then × fp32(1/√n).
// Every operation is one separately rounded fp32 op (no FMA), so host and device agree bitwise,
// provided device code keeps subnormals (nvcc's default -ftz=false; -ftz=true or --use_fast_math
// would flush subnormal intermediates). NaN outputs compare by class only: x86 propagates the input
// NaN's payload, the GPU returns its canonical NaN.
//
// H_n is symmetric and orthogonal, so the inverse is D · H_n: WHT first, then the same sign flips.
// Because Q and K get the same transform along Dqk, QKᵀ is unchanged in exact arithmetic.
#pragma once

#include <cstdint>

#include "model/numerics/host_device.h"
#include "model/numerics/philox.h"

namespace gemtb::numerics {

// Block sizes allowed; the code below works for any power of two up to 128 (the four
// words of one Philox block hold 128 sign bits).
GEMTB_HD inline bool RhtIsValidSize(int n) { return n == 32 || n == 64 || n == 128; }

// fp32(1/√n) for n = 2^p <= 128: 2^(-p/2) exactly for even p, else fp32(√2)·2^(-(p+1)/2) — scaling
// by a power of two commutes with rounding, and fp32(√2) = 0x3FB504F3.
GEMTB_HD inline float RhtScale(int n) {
  int p = 0;
  while ((1 << p) < n) ++p;
  const uint32_t exp_field = static_cast<uint32_t>(127 - (p + 1) / 2);
  const uint32_t frac = (p % 2 == 0) ? 0u : 0x3504F3u;
  return BitsToFloat((exp_field << 23) | frac);
}

// The 128 sign bits: bit i%32 of words[i/32].
GEMTB_HD inline Philox4x32 RhtSignWords(uint64_t seed, uint64_t stream) {
  return PhiloxBlock(seed, stream, 0);
}

// x_i ← s_i·x_i. A sign flip is exact, so it is done on the sign bit.
GEMTB_HD inline void RhtApplySigns(float* x, int n, const Philox4x32& words) {
  for (int i = 0; i < n; ++i) {
    const uint32_t bit = (words.v[i / 32] >> (i % 32)) & 1u;
    x[i] = BitsToFloat(FloatToBits(x[i]) ^ (bit << 31));
  }
}

// Orthonormal Walsh–Hadamard transform in place: butterflies in stages h = 1, 2, …, n/2, then
// × fp32(1/√n).
GEMTB_HD inline void WalshHadamardInPlace(float* x, int n) {
  for (int h = 1; h < n; h *= 2) {
    for (int i = 0; i < n; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        const float a = x[j];
        const float b = x[j + h];
        x[j] = AddRn(a, b);
        x[j + h] = SubRn(a, b);
      }
    }
  }
  const float scale = RhtScale(n);
  for (int i = 0; i < n; ++i) x[i] = MulRn(x[i], scale);
}

// Forward RHT of one block of n ∈ {32, 64, 128} floats, in place.
GEMTB_HD inline void RandomizedHadamardTransform(float* x, int n, uint64_t seed, uint64_t stream) {
  RhtApplySigns(x, n, RhtSignWords(seed, stream));
  WalshHadamardInPlace(x, n);
}

// Its inverse (up to fp32 rounding): WHT, then the same sign flips.
GEMTB_HD inline void InverseRandomizedHadamardTransform(float* x, int n, uint64_t seed,
                                                        uint64_t stream) {
  WalshHadamardInPlace(x, n);
  RhtApplySigns(x, n, RhtSignWords(seed, stream));
}

}  // namespace gemtb::numerics
