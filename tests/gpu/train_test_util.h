// What the trainer-layer GPU tests (tests/gpu/train_*_test.cc) share: whether an sm_90 GPU is
// here, device arrays filled from and read back into host vectors, random bf16 inputs, and the
// element-wise closeness check with the first few misses reported.
#ifndef GEMTB_TESTS_GPU_TRAIN_TEST_UTIL_H_
#define GEMTB_TESTS_GPU_TRAIN_TEST_UTIL_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/numerics/float_formats.h"

namespace gemtb::gpu::train::test {

inline bool HaveSm90() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return false;
  cudaDeviceProp prop{};
  return cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major >= 9;
}

// Device memory holding a copy of `host` (8 spare bytes, so that an empty array is still an allocation).
template <typename T>
struct DeviceArray {
  T* ptr = nullptr;
  explicit DeviceArray(const std::vector<T>& host) {
    EXPECT_EQ(cudaMalloc(&ptr, host.size() * sizeof(T) + 8), cudaSuccess);
    Put(host);
  }
  ~DeviceArray() { cudaFree(ptr); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  void Put(const std::vector<T>& host) {
    EXPECT_EQ(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<T> Get(size_t n) const {
    std::vector<T> host(n);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
  // The memory as bf16 (for arrays of bf16 bits).
  __nv_bfloat16* bf16() const { return reinterpret_cast<__nv_bfloat16*>(ptr); }
};

// n normal(mean, scale) draws rounded to bf16 (their bits).
inline std::vector<uint16_t> RandomBf16(size_t n, uint64_t seed, double mean, double scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(mean, scale);
  std::vector<uint16_t> bits(n);
  for (uint16_t& b : bits) b = numerics::DoubleToBf16BitsRne(normal(rng));
  return bits;
}

inline std::vector<double> Bf16Values(const std::vector<uint16_t>& bits) {
  std::vector<double> v;
  v.reserve(bits.size());
  for (uint16_t b : bits) v.push_back(numerics::Bf16BitsToFloat(b));
  return v;
}

inline double Rms(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s / static_cast<double>(v.size()));
}

// |got - want| <= rel * |want| + floor for every element; the first five misses are reported.
inline void ExpectClose(const std::vector<double>& got, const std::vector<double>& want, double rel, double floor,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= rel * std::fabs(want[i]) + floor) && bad++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: " << got[i] << ", want " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

// The same with the floor a fraction of want's root mean square.
inline void ExpectCloseToRms(const std::vector<double>& got, const std::vector<double>& want, double rel,
                             double of_rms, const std::string& what) {
  ExpectClose(got, want, rel, of_rms * Rms(want), what);
}

}  // namespace gemtb::gpu::train::test

#endif  // GEMTB_TESTS_GPU_TRAIN_TEST_UTIL_H_
