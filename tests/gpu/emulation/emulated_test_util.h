// What the emulated kernel tests (tests/gpu/emulation/*_emulated_test.cc) share: bf16 bits to and from
// fp32, byte comparison of outputs, the first differing element for a failure's message, and output
// arrays followed by a guard that the kernel must leave as it was.
#ifndef GEMTB_TESTS_GPU_EMULATION_EMULATED_TEST_UTIL_H_
#define GEMTB_TESTS_GPU_EMULATION_EMULATED_TEST_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "model/numerics/float_formats.h"

namespace gemtb::emu::test {

inline float Bf16(uint16_t bits) { return numerics::Bf16BitsToFloat(bits); }
inline uint16_t Rounded(float v) { return numerics::FloatToBf16BitsRne(v); }

template <typename T>
bool SameBytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// The first element where two arrays' bytes differ, for the failure message.
template <typename T>
std::string FirstDifference(const std::vector<T>& got, const std::vector<T>& want) {
  for (size_t e = 0; e < got.size() && e < want.size(); ++e) {
    if (std::memcmp(&got[e], &want[e], sizeof(T)) != 0) {
      return "element " + std::to_string(e) + ": " + std::to_string(static_cast<double>(got[e])) + ", want " +
             std::to_string(static_cast<double>(want[e]));
    }
  }
  return "sizes " + std::to_string(got.size()) + " and " + std::to_string(want.size());
}

// `v` followed by `extra` copies of `fill`: an output array with its guard.
template <typename T>
std::vector<T> Guarded(std::vector<T> v, size_t extra, T fill) {
  v.resize(v.size() + extra, fill);
  return v;
}

}  // namespace gemtb::emu::test

#endif  // GEMTB_TESTS_GPU_EMULATION_EMULATED_TEST_UTIL_H_
