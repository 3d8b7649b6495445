// What the trainer-layer GPU tests (tests/gpu/train_*_test.cc) share: whether an sm_90 GPU is
// here, device arrays filled from and read back into host vectors, random bf16 inputs, the
// activation types of the row kernels (fp32 and bf16) for typed tests, the unit roundoffs and GELU
// scale their bounds are made of, and the element-wise closeness checks with the first few misses
// reported.
#ifndef GEMTB_TESTS_GPU_TRAIN_TEST_UTIL_H_
#define GEMTB_TESTS_GPU_TRAIN_TEST_UTIL_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/numerics/float_formats.h"

namespace gemtb::gpu::train::test {

inline constexpr double kFp32U = 1.0 / (1 << 24);  // fp32's unit roundoff
inline constexpr double kBf16U = 1.0 / (1 << 8);   // bf16's (8 significant bits)

// The magnitude of GELU'(x) = Phi(x) + x phi(x)'s two terms (reference/model/ops.h's GeluGrad): the
// scale of its evaluation's rounding where they nearly cancel (x ~ -0.75).
inline double GeluGradTerms(double x) {
  return 0.5 * std::erfc(-x / std::sqrt(2.0)) + std::fabs(x) * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
}

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
  // The memory as the device type U that T holds on the host (bf16 for its bits, float for itself).
  template <typename U>
  U* As() const {
    static_assert(sizeof(U) == sizeof(T));
    return reinterpret_cast<U*>(ptr);
  }
};

// n smooth, deterministic fp32 values offset + scale sin(step e + 0.3), e = 0 .. n-1: inputs whose every
// element differs from its neighbours, so that a misplaced row or column shows.
inline std::vector<float> Wave(size_t n, float scale, float offset, float step) {
  std::vector<float> v(n);
  for (size_t e = 0; e < n; ++e) v[e] = offset + scale * std::sin(step * static_cast<float>(e) + 0.3f);
  return v;
}

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

// The activation types of the trainer's row kernels as a test holds them on the host: bf16 as its
// bits, fp32 as itself; Round is the nearest value of the type (ties to even), Value its exact value.
template <typename T>
struct Activation;
template <>
struct Activation<__nv_bfloat16> {
  using Host = uint16_t;
  static constexpr const char* kName = "bf16";
  static Host Round(double v) { return numerics::DoubleToBf16BitsRne(v); }
  static double Value(Host h) { return numerics::Bf16BitsToFloat(h); }
};
template <>
struct Activation<float> {
  using Host = float;
  static constexpr const char* kName = "fp32";
  static Host Round(double v) { return static_cast<float>(v); }
  static double Value(Host h) { return h; }
};

// For TYPED_TEST_SUITE: both activation types, the tests named by the type.
using ActivationTypes = ::testing::Types<__nv_bfloat16, float>;
struct ActivationName {
  template <typename T>
  static std::string GetName(int) {
    return Activation<T>::kName;
  }
};

// n normal(mean, scale) draws rounded to T (for bf16 the same bits as RandomBf16's).
template <typename T>
std::vector<typename Activation<T>::Host> RandomActivations(size_t n, uint64_t seed, double mean, double scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(mean, scale);
  std::vector<typename Activation<T>::Host> host(n);
  for (auto& h : host) h = Activation<T>::Round(normal(rng));
  return host;
}

template <typename T>
std::vector<double> ActivationValues(const std::vector<typename Activation<T>::Host>& host) {
  std::vector<double> v;
  v.reserve(host.size());
  for (const auto h : host) v.push_back(Activation<T>::Value(h));
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

// |got - want| <= rel * scale + floor per element, scale the magnitude of the terms that want adds up
// (so that a result that cancels to near 0 is held to its terms' rounding, not to itself). Prints
// the largest error and its largest fraction of the bound, to show how much room the bound leaves.
inline void ExpectCloseToScale(const std::vector<double>& got, const std::vector<double>& want,
                               const std::vector<double>& scale, double rel, double floor, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_EQ(scale.size(), want.size()) << what;
  int bad = 0;
  double max_error = 0, max_fraction = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double error = std::fabs(got[i] - want[i]), bound = rel * scale[i] + floor;
    if (!(error <= bound) && bad++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: " << got[i] << ", want " << want[i] << " (scale " << scale[i] << ")";
    }
    max_error = std::max(max_error, error);
    max_fraction = std::max(max_fraction, error / bound);
  }
  EXPECT_EQ(bad, 0) << what;
  std::printf("%s: max |error| %.3g, max error/bound %.3f\n", what.c_str(), max_error, max_fraction);
}

// The same with the floor a fraction of want's root mean square.
inline void ExpectCloseToRms(const std::vector<double>& got, const std::vector<double>& want, double rel,
                             double of_rms, const std::string& what) {
  ExpectClose(got, want, rel, of_rms * Rms(want), what);
}

// LayerNorm's backward in fp64 (reference/model/layers.h's definition) of row gradients dh [n, d],
// with the forward's row statistics: each row's input-gradient terms (dx [n, d], to be added to the
// residual's gradient) and the parameters' gradients summed over the rows onto dgamma0 and dbeta0.
struct LayerNormBackward64 {
  std::vector<double> dx, dgamma, dbeta;
};
inline LayerNormBackward64 LayerNormBackwardFp64(const std::vector<float>& x, const std::vector<float>& gamma,
                                                 const std::vector<float>& mean, const std::vector<float>& rstd,
                                                 const std::vector<double>& dh, int64_t n, int d,
                                                 const std::vector<float>& dgamma0, const std::vector<float>& dbeta0) {
  LayerNormBackward64 b;
  b.dx.resize(static_cast<size_t>(n) * d);
  b.dgamma.assign(dgamma0.begin(), dgamma0.end());
  b.dbeta.assign(dbeta0.begin(), dbeta0.end());
  std::vector<double> xhat(d);
  for (int64_t r = 0; r < n; ++r) {
    double m1 = 0, m2 = 0;
    for (int j = 0; j < d; ++j) {
      const double g = dh[r * d + j];
      xhat[j] = (double{x[r * d + j]} - mean[r]) * rstd[r];
      m1 += g * gamma[j] / d;
      m2 += g * gamma[j] * xhat[j] / d;
      b.dgamma[j] += g * xhat[j];
      b.dbeta[j] += g;
    }
    for (int j = 0; j < d; ++j) b.dx[r * d + j] = rstd[r] * (dh[r * d + j] * gamma[j] - m1 - xhat[j] * m2);
  }
  return b;
}

}  // namespace gemtb::gpu::train::test

#endif  // GEMTB_TESTS_GPU_TRAIN_TEST_UTIL_H_
