// The trainer's linear layers (gpu/train/linear.h) against an fp64 product of the same bf16 values:
// forward with and without bias, both backward products, the bias gradient, accumulation into the
// fp32 gradients, the same bytes on a second run, and shapes refused by name (this part needs no GPU).
#include "gpu/train/linear.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/gpu/train_test_util.h"
#include "model/numerics/float_formats.h"

namespace gemtb::gpu::train {
namespace {

using test::ExpectCloseToRms;
using test::HaveSm90;

// Random values that bf16 holds exactly, as bits and as doubles.
struct Bf16Array {
  std::vector<uint16_t> bits;
  std::vector<double> values;
};
Bf16Array RandomBf16(size_t n, uint64_t seed, double scale) {
  Bf16Array a;
  a.bits = test::RandomBf16(n, seed, 0.0, scale);
  a.values = test::Bf16Values(a.bits);
  return a;
}

template <typename T>
struct DeviceArray {
  T* ptr = nullptr;
  explicit DeviceArray(size_t n) { EXPECT_EQ(cudaMalloc(&ptr, n * sizeof(T) + 1), cudaSuccess); }
  ~DeviceArray() { cudaFree(ptr); }
};

template <typename T, typename U>
T* Upload(DeviceArray<T>& d, const std::vector<U>& host) {
  static_assert(sizeof(T) == sizeof(U));
  EXPECT_EQ(cudaMemcpy(d.ptr, host.data(), host.size() * sizeof(U), cudaMemcpyHostToDevice), cudaSuccess);
  return d.ptr;
}

template <typename U, typename T>
std::vector<U> Download(const T* ptr, size_t n) {
  std::vector<U> host(n);
  EXPECT_EQ(cudaMemcpy(host.data(), ptr, n * sizeof(U), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

TEST(TrainLinear, ShapesItCannotTakeAreRefusedByName) {
  EXPECT_TRUE(ValidateLinearShape({4, 16, 8}).ok());
  const absl::Status zero = ValidateLinearShape({0, 16, 8});
  EXPECT_NE(zero.message().find("n=0"), std::string::npos) << zero;
  const absl::Status odd = ValidateLinearShape({4, 12, 8});
  EXPECT_NE(odd.message().find("in=12"), std::string::npos) << odd;
  const absl::Status big = ValidateLinearShape({4, 16, int64_t{1} << 31});
  EXPECT_NE(big.message().find("out=2147483648"), std::string::npos) << big;
}

TEST(TrainLinear, ForwardAndBackwardMatchAnFp64ProductOfTheSameValues) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (const LinearShape s : {LinearShape{300, 256, 192}, LinearShape{1, 8, 8}, LinearShape{1027, 64, 520}}) {
    const std::string where = "n=" + std::to_string(s.n) + " in=" + std::to_string(s.in) +
                              " out=" + std::to_string(s.out);
    const size_t n = s.n, in = s.in, out = s.out;
    const Bf16Array x = RandomBf16(n * in, 1, 1.0), w = RandomBf16(in * out, 2, 0.1), b = RandomBf16(out, 3, 0.5);
    const Bf16Array dy = RandomBf16(n * out, 4, 1.0);
    std::vector<float> dw0(in * out), db0(out);  // gradients already holding something, to be added to
    for (size_t i = 0; i < dw0.size(); ++i) dw0[i] = 0.25f * static_cast<float>(i % 7);
    for (size_t j = 0; j < out; ++j) db0[j] = -0.5f * static_cast<float>(j % 3);

    // fp64 references.
    std::vector<double> y(n * out), y_nobias(n * out), dx(n * in, 0.0), dw(in * out), db(out);
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < out; ++j) {
        double acc = 0;
        for (size_t k = 0; k < in; ++k) acc += x.values[i * in + k] * w.values[k * out + j];
        y_nobias[i * out + j] = acc;
        y[i * out + j] = acc + b.values[j];
      }
    }
    for (size_t i = 0; i < n; ++i) {
      for (size_t k = 0; k < in; ++k) {
        double acc = 0;
        for (size_t j = 0; j < out; ++j) acc += dy.values[i * out + j] * w.values[k * out + j];
        dx[i * in + k] = acc;
      }
    }
    for (size_t k = 0; k < in; ++k) {
      for (size_t j = 0; j < out; ++j) {
        double acc = dw0[k * out + j];
        for (size_t i = 0; i < n; ++i) acc += x.values[i * in + k] * dy.values[i * out + j];
        dw[k * out + j] = acc;
      }
    }
    for (size_t j = 0; j < out; ++j) {
      double acc = db0[j];
      for (size_t i = 0; i < n; ++i) acc += dy.values[i * out + j];
      db[j] = acc;
    }

    absl::StatusOr<std::unique_ptr<LinearMatmuls>> mm = LinearMatmuls::Create();
    ASSERT_TRUE(mm.ok()) << mm.status();
    DeviceArray<__nv_bfloat16> d_x(n * in), d_w(in * out), d_b(out), d_dy(n * out), d_y(n * out), d_dx(n * in);
    DeviceArray<float> d_dw(in * out), d_db(out);
    Upload(d_x, x.bits);
    Upload(d_w, w.bits);
    Upload(d_b, b.bits);
    Upload(d_dy, dy.bits);
    const auto to_doubles = [](const std::vector<uint16_t>& bits) {
      std::vector<double> v;
      for (uint16_t u : bits) v.push_back(numerics::Bf16BitsToFloat(u));
      return v;
    };
    const auto floats_to_doubles = [](const std::vector<float>& f) { return std::vector<double>(f.begin(), f.end()); };

    // bf16 outputs: their rounding (2^-9 relative) on top of fp32 sums; fp32 gradients: the sums'.
    ASSERT_TRUE((*mm)->Forward(s, d_x.ptr, d_w.ptr, nullptr, d_y.ptr, nullptr).ok());
    ExpectCloseToRms(to_doubles(Download<uint16_t>(d_y.ptr, n * out)), y_nobias, 1.0 / 128, 1e-3, where + " y (no bias)");
    ASSERT_TRUE((*mm)->Forward(s, d_x.ptr, d_w.ptr, d_b.ptr, d_y.ptr, nullptr).ok());
    const std::vector<uint16_t> y_bits = Download<uint16_t>(d_y.ptr, n * out);
    ExpectCloseToRms(to_doubles(y_bits), y, 1.0 / 128, 1e-3, where + " y");
    ASSERT_TRUE((*mm)->BackwardInput(s, d_dy.ptr, d_w.ptr, nullptr, d_dx.ptr, nullptr).ok());
    const std::vector<uint16_t> dx_bits = Download<uint16_t>(d_dx.ptr, n * in);
    ExpectCloseToRms(to_doubles(dx_bits), dx, 1.0 / 128, 1e-3, where + " dx");
    Upload(d_dw, dw0);
    Upload(d_db, db0);
    ASSERT_TRUE((*mm)->BackwardWeight(s, d_x.ptr, d_dy.ptr, d_dw.ptr, d_db.ptr, nullptr).ok());
    const std::vector<float> dw_got = Download<float>(d_dw.ptr, in * out);
    const std::vector<float> db_got = Download<float>(d_db.ptr, out);
    ExpectCloseToRms(floats_to_doubles(dw_got), dw, 1e-5, 1e-5, where + " dW");
    ExpectCloseToRms(floats_to_doubles(db_got), db, 1e-5, 1e-5, where + " db");

    // The same calls again give the same bytes.
    ASSERT_TRUE((*mm)->Forward(s, d_x.ptr, d_w.ptr, d_b.ptr, d_y.ptr, nullptr).ok());
    ASSERT_TRUE((*mm)->BackwardInput(s, d_dy.ptr, d_w.ptr, nullptr, d_dx.ptr, nullptr).ok());
    Upload(d_dw, dw0);
    Upload(d_db, db0);
    ASSERT_TRUE((*mm)->BackwardWeight(s, d_x.ptr, d_dy.ptr, d_dw.ptr, d_db.ptr, nullptr).ok());
    EXPECT_EQ(Download<uint16_t>(d_y.ptr, n * out), y_bits) << where;
    EXPECT_EQ(Download<uint16_t>(d_dx.ptr, n * in), dx_bits) << where;
    EXPECT_EQ(Download<float>(d_dw.ptr, in * out), dw_got) << where;
    EXPECT_EQ(Download<float>(d_db.ptr, out), db_got) << where;
  }
}

// The fp32-output forms: y = x W + b + residual (the residual in place as y too), dx = dy W^T and
// dx += dy W^T in place, within fp32 sums' rounding of fp64 products of the same bf16 values; the
// gradient's place in a larger array at a 16-byte (not 256-byte) offset, as a gradient's place in the
// flat parameter array is.
TEST(TrainLinear, Fp32OutputFormsMatchAnFp64Product) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (const LinearShape s : {LinearShape{300, 128, 512}, LinearShape{1027, 512, 128}}) {
    const std::string where = "n=" + std::to_string(s.n) + " in=" + std::to_string(s.in) + " out=" + std::to_string(s.out);
    const size_t n = s.n, in = s.in, out = s.out;
    const Bf16Array x = RandomBf16(n * in, 11, 1.0), w = RandomBf16(in * out, 12, 0.1), dy = RandomBf16(n * out, 13, 1.0);
    std::vector<float> b(out), r(n * out);
    for (size_t j = 0; j < out; ++j) b[j] = 0.01f * static_cast<float>(j % 17) - 0.05f;
    for (size_t e = 0; e < r.size(); ++e) r[e] = 0.5f - 0.001f * static_cast<float>(e % 997);
    std::vector<double> y(n * out), dx(n * in);
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < out; ++j) {
        double acc = 0;
        for (size_t k = 0; k < in; ++k) acc += x.values[i * in + k] * w.values[k * out + j];
        y[i * out + j] = acc + b[j] + r[i * out + j];
      }
      for (size_t k = 0; k < in; ++k) {
        double acc = 0;
        for (size_t j = 0; j < out; ++j) acc += dy.values[i * out + j] * w.values[k * out + j];
        dx[i * in + k] = acc;
      }
    }
    absl::StatusOr<std::unique_ptr<LinearMatmuls>> mm = LinearMatmuls::Create();
    ASSERT_TRUE(mm.ok()) << mm.status();
    DeviceArray<__nv_bfloat16> d_x(n * in), d_w(in * out), d_dy(n * out);
    DeviceArray<float> d_b(out), d_r(n * out), d_y(n * out), d_dx(n * in + 4);
    Upload(d_x, x.bits);
    Upload(d_w, w.bits);
    Upload(d_dy, dy.bits);
    Upload(d_b, b);
    Upload(d_r, r);
    const auto doubles = [](const std::vector<float>& f) { return std::vector<double>(f.begin(), f.end()); };
    ASSERT_TRUE((*mm)->ForwardToFp32(s, d_x.ptr, d_w.ptr, d_b.ptr, d_r.ptr, d_y.ptr, nullptr).ok()) << where;
    const std::vector<float> y_got = Download<float>(d_y.ptr, n * out);
    ExpectCloseToRms(doubles(y_got), y, 1e-5, 1e-5, where + " y (residual apart)");
    Upload(d_y, r);  // the residual in place
    ASSERT_TRUE((*mm)->ForwardToFp32(s, d_x.ptr, d_w.ptr, d_b.ptr, d_y.ptr, d_y.ptr, nullptr).ok()) << where;
    ExpectCloseToRms(doubles(Download<float>(d_y.ptr, n * out)), y, 1e-5, 1e-5, where + " y (residual = y)");
    float* dx_at = d_dx.ptr + 4;  // 16 bytes into the allocation
    ASSERT_TRUE((*mm)->BackwardInputToFp32(s, d_dy.ptr, d_w.ptr, nullptr, dx_at, nullptr).ok()) << where;
    const std::vector<float> dx_got = Download<float>(dx_at, n * in);
    ExpectCloseToRms(doubles(dx_got), dx, 1e-5, 1e-5, where + " dx");
    ASSERT_TRUE((*mm)->BackwardInputToFp32(s, d_dy.ptr, d_w.ptr, nullptr, dx_at, nullptr).ok());
    EXPECT_EQ(Download<float>(dx_at, n * in), dx_got) << where << ": second run";
    // Accumulated in place: dx = dy W^T + dx, twice the product.
    ASSERT_TRUE((*mm)->BackwardInputToFp32(s, d_dy.ptr, d_w.ptr, dx_at, dx_at, nullptr).ok()) << where;
    std::vector<double> twice(dx);
    for (double& v : twice) v *= 2;
    ExpectCloseToRms(doubles(Download<float>(dx_at, n * in)), twice, 1e-5, 1e-5, where + " dx accumulated");
  }
}

TEST(TrainLinear, CallsWithBadShapesFailWithoutTouchingTheDevice) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  absl::StatusOr<std::unique_ptr<LinearMatmuls>> mm = LinearMatmuls::Create();
  ASSERT_TRUE(mm.ok()) << mm.status();
  const absl::Status s = (*mm)->Forward({8, 20, 8}, nullptr, nullptr, nullptr, nullptr, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("in=20"), std::string::npos) << s;
}

}  // namespace
}  // namespace gemtb::gpu::train
