// Philox4x32-10 (Salmon et al., SC'11), the counter-based generator behind stochastic rounding and
// the RHT sign flips. Being counter-based, any element's bits are computed
// directly from (seed, stream, element), so the CPU oracle and every GPU thread draw identical bits
// regardless of scheduling.
//
// Stream layout: key = (seed_lo, seed_hi); counter = (e_lo, e_hi, stream_lo, stream_hi) with
// e = element / 4; the element takes output word element % 4. This equals cuRAND's
// curandStatePhilox4_32_10 after curand_init(seed, subsequence = stream, offset = element): curand()
// returns word STATE = offset % 4 of the block at counter offset / 4 (+ subsequence in the high half).
#pragma once

#include <cstdint>

#include "model/numerics/host_device.h"

namespace gemtb::numerics {

struct Philox4x32 {
  uint32_t v[4];
};

namespace detail {

inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
inline constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // golden ratio
inline constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // sqrt(3) - 1

GEMTB_HD inline Philox4x32 PhiloxRound(Philox4x32 c, uint32_t k0, uint32_t k1) {
  const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c.v[0];
  const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c.v[2];
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32);
  const uint32_t lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32);
  const uint32_t lo1 = static_cast<uint32_t>(p1);
  return {{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
}

}  // namespace detail

// Ten rounds; the key is bumped by the Weyl constants between rounds.
GEMTB_HD inline Philox4x32 Philox4x32_10(Philox4x32 counter, uint32_t key0, uint32_t key1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += detail::kPhiloxW0;
      key1 += detail::kPhiloxW1;
    }
    counter = detail::PhiloxRound(counter, key0, key1);
  }
  return counter;
}

// The four words of the block at counter `block` (= element / 4) of stream `stream`.
GEMTB_HD inline Philox4x32 PhiloxBlock(uint64_t seed, uint64_t stream, uint64_t block) {
  const Philox4x32 counter{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                            static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)}};
  return Philox4x32_10(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// The 32-bit word number `element` of stream `stream` under `seed`.
GEMTB_HD inline uint32_t PhiloxWord(uint64_t seed, uint64_t stream, uint64_t element) {
  return PhiloxBlock(seed, stream, element >> 2).v[element & 3u];
}

// The 16 random bits that stochastic rounding consumes: the low half of the word.
GEMTB_HD inline uint16_t PhiloxSrBits(uint64_t seed, uint64_t stream, uint64_t element) {
  return static_cast<uint16_t>(PhiloxWord(seed, stream, element) & 0xFFFFu);
}

}  // namespace gemtb::numerics
