// Consecutive Philox4x32-10 blocks of one stream, several at a time on the host: the same bits as
// PhiloxBlock (philox.h) block by block, computed eight blocks per AVX2 register pass when the CPU
// has AVX2 (chosen at run time: the build targets x86-64-v2), else one block at a time. The batch
// draws of sim/ read one block per four samples, tens of millions per run, and the scalar rounds
// were a third of their time.
//
// Host only (x86 intrinsics); device code uses philox.h.
#pragma once

#include <cstdint>

#include "model/numerics/philox.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define GEMTB_PHILOX_AVX2 1
#endif

namespace gemtb::numerics {

// words[4 * j + q] = PhiloxBlock(seed, stream, first + j).v[q] for j < n.
inline void PhiloxBlocksScalar(uint64_t seed, uint64_t stream, uint64_t first, int n, uint32_t* words) {
  for (int j = 0; j < n; ++j) {
    const Philox4x32 b = PhiloxBlock(seed, stream, first + static_cast<uint64_t>(j));
    for (int q = 0; q < 4; ++q) words[4 * j + q] = b.v[q];
  }
}

#ifdef GEMTB_PHILOX_AVX2
namespace detail {

// Eight blocks first .. first + 7 whose counters differ only in the low word (no carry into the
// high word: the caller checks). Lane l of X0..X3 holds block l's counter words; the round is
// philox.h's PhiloxRound on each lane: the 32x32 -> 64 products of the even lanes come from
// _mm256_mul_epu32 directly, those of the odd lanes after a shift, and blends put the high and low
// halves back in lane order.
__attribute__((target("avx2"))) inline void PhiloxEightAvx2(uint64_t seed, uint64_t stream, uint64_t first,
                                                            uint32_t* words) {
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(kPhiloxM0));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(kPhiloxM1));
  __m256i x0 = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(first))),
                                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  __m256i x1 = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(first >> 32)));
  __m256i x2 = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(stream)));
  __m256i x3 = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(stream >> 32)));
  uint32_t key0 = static_cast<uint32_t>(seed), key1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += kPhiloxW0;
      key1 += kPhiloxW1;
    }
    const __m256i p0_even = _mm256_mul_epu32(x0, m0);
    const __m256i p0_odd = _mm256_mul_epu32(_mm256_srli_epi64(x0, 32), m0);
    const __m256i p1_even = _mm256_mul_epu32(x2, m1);
    const __m256i p1_odd = _mm256_mul_epu32(_mm256_srli_epi64(x2, 32), m1);
    const __m256i hi0 = _mm256_blend_epi32(_mm256_srli_epi64(p0_even, 32), p0_odd, 0xAA);
    const __m256i lo0 = _mm256_blend_epi32(p0_even, _mm256_slli_epi64(p0_odd, 32), 0xAA);
    const __m256i hi1 = _mm256_blend_epi32(_mm256_srli_epi64(p1_even, 32), p1_odd, 0xAA);
    const __m256i lo1 = _mm256_blend_epi32(p1_even, _mm256_slli_epi64(p1_odd, 32), 0xAA);
    x0 = _mm256_xor_si256(_mm256_xor_si256(hi1, x1), _mm256_set1_epi32(static_cast<int>(key0)));
    x1 = lo1;
    x2 = _mm256_xor_si256(_mm256_xor_si256(hi0, x3), _mm256_set1_epi32(static_cast<int>(key1)));
    x3 = lo0;
  }
  alignas(32) uint32_t v[4][8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(v[0]), x0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(v[1]), x1);
  _mm256_store_si256(reinterpret_cast<__m256i*>(v[2]), x2);
  _mm256_store_si256(reinterpret_cast<__m256i*>(v[3]), x3);
  for (int l = 0; l < 8; ++l) {
    for (int q = 0; q < 4; ++q) words[4 * l + q] = v[q][l];
  }
}

}  // namespace detail

inline bool PhiloxHasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

// The AVX2 path alone (the caller checks PhiloxHasAvx2()); blocks whose eight-block group would
// carry into the counter's high word take the scalar path.
inline void PhiloxBlocksAvx2(uint64_t seed, uint64_t stream, uint64_t first, int n, uint32_t* words) {
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    const uint64_t b = first + static_cast<uint64_t>(j);
    if ((b & 0xFFFFFFFFu) > 0xFFFFFFFFu - 7) {
      PhiloxBlocksScalar(seed, stream, b, 8, words + 4 * j);
    } else {
      detail::PhiloxEightAvx2(seed, stream, b, words + 4 * j);
    }
  }
  PhiloxBlocksScalar(seed, stream, first + static_cast<uint64_t>(j), n - j, words + 4 * j);
}
#endif

inline void PhiloxBlocks(uint64_t seed, uint64_t stream, uint64_t first, int n, uint32_t* words) {
#ifdef GEMTB_PHILOX_AVX2
  if (PhiloxHasAvx2()) {
    PhiloxBlocksAvx2(seed, stream, first, n, words);
    return;
  }
#endif
  PhiloxBlocksScalar(seed, stream, first, n, words);
}

}  // namespace gemtb::numerics
