// splitmix64 and the project's stream ids. Header-only, host and
// device: hashing (id -> row), data generation and stochastic rounding all key on these.
#ifndef GEMTB_MODEL_RANDOM_SPLITMIX64_H_
#define GEMTB_MODEL_RANDOM_SPLITMIX64_H_

#include <cstdint>

#include "model/numerics/host_device.h"

namespace gemtb {

// h(x) of Steele et al. (mod 2^64). h(0) = 0xE220A8397B1DCDAF.
GEMTB_HD constexpr uint64_t SplitMix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Stream tags of S(tag, a, b) = h(h(tag ^ a) ^ b).
enum class StreamTag : uint64_t { kInit = 1, kStochasticRounding = 2, kData = 3, kTeacher = 4 };

GEMTB_HD constexpr uint64_t StreamId(StreamTag tag, uint64_t a, uint64_t b) {
  return SplitMix64(SplitMix64(static_cast<uint64_t>(tag) ^ a) ^ b);
}

// u24(w) = (w >> 8) * 2^-24 in [0, 1): exact in fp32.
GEMTB_HD constexpr float U24(uint32_t word) { return static_cast<float>(word >> 8) * 5.9604644775390625e-8f; }

}  // namespace gemtb

#endif  // GEMTB_MODEL_RANDOM_SPLITMIX64_H_
