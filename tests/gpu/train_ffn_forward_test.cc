// The fused feed-forward forward (gpu/train/ffn_forward.h) on the GPU: u against the fp64 product
// h W1 + b1 within bf16's rounding and the fp32 sum's; g bit for bit GELU's elementwise kernel
// (GeluForward) of the kernel's own u, and within bf16's rounding of the fp64 GELU of it; y against the
// fp64 sum g W2 + b2 + x of the kernel's own g; its bf16 copy y16 bit for bit ToBf16 of y. A second
// run gives the same bytes; x may be y. Shapes and pointers refused by name (that part needs no GPU).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/train/ffn_forward.h"
#include "gpu/train/layer_norm.h"
#include "gpu/train/model_kernels.h"
#include "gtest/gtest.h"
#include "model/numerics/float_formats.h"
#include "reference/model/ops.h"
#include "tests/gpu/train_test_util.h"

namespace gemtb::gpu::train {
namespace {

using test::DeviceArray;
using test::ExpectCloseToScale;
using test::HaveSm90;
using test::Wave;

using test::kBf16U;
using test::kFp32U;

using reference::model::Gelu;

TEST(FfnForward, ShapesAndPointersItCannotTakeAreRefusedByName) {
  EXPECT_TRUE(ValidateFfnForwardShape({10, 128, 512}).ok());
  const absl::Status d = ValidateFfnForwardShape({10, 64, 256});
  EXPECT_NE(d.message().find("d=64"), std::string::npos) << d;
  const absl::Status hidden = ValidateFfnForwardShape({10, 128, 192});
  EXPECT_NE(hidden.message().find("hidden=192"), std::string::npos) << hidden;
  const absl::Status n = ValidateFfnForwardShape({0, 128, 512});
  EXPECT_NE(n.message().find("n=0"), std::string::npos) << n;
  const absl::Status null =
      FfnForwardFused({10, 128, 512}, nullptr, FfnForwardWeights{}, nullptr, nullptr, nullptr, nullptr, nullptr,
                      nullptr);
  EXPECT_NE(null.message().find("h=null"), std::string::npos) << null;
  auto* const some16 = reinterpret_cast<__nv_bfloat16*>(16);
  auto* const some32 = reinterpret_cast<float*>(32);
  const absl::Status no_b2 = FfnForwardFused({10, 128, 512}, some16, FfnForwardWeights{some16, some16, some16, nullptr},
                                             some32, some16, some16, some32, nullptr, nullptr);
  EXPECT_NE(no_b2.message().find("b2=null"), std::string::npos) << no_b2;
  const absl::Status misaligned =
      FfnForwardFused({10, 128, 512}, some16, FfnForwardWeights{some16, some16, some16, some32}, some32,
                      reinterpret_cast<__nv_bfloat16*>(18), some16, some32, nullptr, nullptr);
  EXPECT_NE(misaligned.message().find("u: want a 16-byte aligned pointer"), std::string::npos) << misaligned;
  const absl::Status misaligned16 =
      FfnForwardFused({10, 128, 512}, some16, FfnForwardWeights{some16, some16, some16, some32}, some32, some16, some16,
                      some32, reinterpret_cast<__nv_bfloat16*>(24), nullptr);
  EXPECT_NE(misaligned16.message().find("y16: want a 16-byte aligned pointer"), std::string::npos) << misaligned16;
}

void RunCase(int64_t n, int hidden, bool in_place) {
  constexpr int d = 128;
  const std::string where = "n=" + std::to_string(n) + " hidden=" + std::to_string(hidden) +
                            (in_place ? " (x is y)" : "");
  const size_t nd = static_cast<size_t>(n) * d, nh = static_cast<size_t>(n) * hidden;
  const std::vector<uint16_t> h = test::RandomBf16(nd, 11, 0.0, 1.0);  // LayerNorm's rows
  const std::vector<uint16_t> w1 = test::RandomBf16(static_cast<size_t>(d) * hidden, 12, 0.0, 0.15);
  const std::vector<uint16_t> b1 = test::RandomBf16(hidden, 13, 0.0, 0.3);
  const std::vector<uint16_t> w2 = test::RandomBf16(static_cast<size_t>(hidden) * d, 14, 0.0, 0.08);
  const std::vector<float> b2 = Wave(d, 0.2f, 0.0f, 0.7f), x = Wave(nd, 1.0f, 0.1f, 0.37f);
  const std::vector<double> hv = test::Bf16Values(h), w1v = test::Bf16Values(w1), b1v = test::Bf16Values(b1),
                            w2v = test::Bf16Values(w2);

  DeviceArray<uint16_t> h_d(h), w1_d(w1), b1_d(b1), w2_d(w2), u_d{std::vector<uint16_t>(nh)},
      g_d{std::vector<uint16_t>(nh)}, g_sep_d{std::vector<uint16_t>(nh)}, y16_d{std::vector<uint16_t>(nd)},
      y16_sep_d{std::vector<uint16_t>(nd)};
  DeviceArray<float> b2_d(b2), x_d(x), y_sep_d{std::vector<float>(nd)};
  float* const y = in_place ? x_d.ptr : y_sep_d.ptr;
  const FfnForwardWeights w{w1_d.bf16(), b1_d.bf16(), w2_d.bf16(), b2_d.ptr};
  auto run = [&] {
    x_d.Put(x);
    EXPECT_TRUE(
        FfnForwardFused({n, d, hidden}, h_d.bf16(), w, x_d.ptr, u_d.bf16(), g_d.bf16(), y, y16_d.bf16(), nullptr).ok())
        << where;
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << where;
  };
  run();
  const std::vector<uint16_t> u = u_d.Get(nh), g = g_d.Get(nh);
  const std::vector<float> out = in_place ? x_d.Get(nd) : y_sep_d.Get(nd);

  // u: the fp32 sum of d products plus b1, rounded to bf16.
  std::vector<double> u_got(nh), u_want(nh), u_bound(nh);
  for (int64_t r = 0; r < n; ++r) {
    for (int c = 0; c < hidden; ++c) {
      double sum = b1v[c], mag = std::fabs(b1v[c]);
      for (int k = 0; k < d; ++k) {
        const double t = hv[r * d + k] * w1v[static_cast<size_t>(k) * hidden + c];
        sum += t;
        mag += std::fabs(t);
      }
      const size_t e = static_cast<size_t>(r) * hidden + c;
      u_got[e] = numerics::Bf16BitsToFloat(u[e]);
      u_want[e] = sum;
      u_bound[e] = kBf16U * std::fabs(sum) + (d + 16) * kFp32U * mag;
    }
  }
  ExpectCloseToScale(u_got, u_want, u_bound, 1.0, 0.0, where + " u");

  // g: GELU's elementwise kernel of the same u gives the same bytes, and both are within bf16's
  // rounding (plus the evaluation's 1e-5 of |u|) of the fp64 GELU.
  ASSERT_TRUE(GeluForward<__nv_bfloat16>(u_d.bf16(), static_cast<int64_t>(nh), g_sep_d.bf16(), nullptr).ok());
  EXPECT_EQ(std::memcmp(g_sep_d.Get(nh).data(), g.data(), nh * sizeof(uint16_t)), 0) << where << ": g against GeluForward";
  std::vector<double> g_got(nh), g_want(nh), g_bound(nh);
  for (size_t e = 0; e < nh; ++e) {
    g_got[e] = numerics::Bf16BitsToFloat(g[e]);
    g_want[e] = Gelu(u_got[e]);
    g_bound[e] = kBf16U * std::fabs(g_want[e]) + 1e-5 * std::fabs(u_got[e]);
  }
  ExpectCloseToScale(g_got, g_want, g_bound, 1.0, 0.0, where + " g");

  // y = (g W2 + b2) + x, fp32 sums of `hidden` products.
  std::vector<double> y_got(out.begin(), out.end()), y_want(nd), y_scale(nd);
  for (int64_t r = 0; r < n; ++r) {
    for (int j = 0; j < d; ++j) {
      double sum = b2[j], mag = std::fabs(b2[j]);
      for (int c = 0; c < hidden; ++c) {
        const double t = g_got[static_cast<size_t>(r) * hidden + c] * w2v[static_cast<size_t>(c) * d + j];
        sum += t;
        mag += std::fabs(t);
      }
      const size_t e = static_cast<size_t>(r) * d + j;
      y_want[e] = sum + x[e];
      y_scale[e] = mag + std::fabs(x[e]);
    }
  }
  ExpectCloseToScale(y_got, y_want, y_scale, (hidden + 16) * kFp32U, 0.0, where + " y");
  // y16: ToBf16's bytes of the same y.
  const std::vector<uint16_t> y16 = y16_d.Get(nd);
  ASSERT_TRUE(ToBf16(y, static_cast<int64_t>(nd), y16_sep_d.bf16(), nullptr).ok());
  EXPECT_EQ(std::memcmp(y16_sep_d.Get(nd).data(), y16.data(), nd * sizeof(uint16_t)), 0)
      << where << ": y16 against ToBf16";

  // The same bytes again.
  run();
  EXPECT_EQ(std::memcmp(u_d.Get(nh).data(), u.data(), nh * sizeof(uint16_t)), 0) << where << ": u again";
  EXPECT_EQ(std::memcmp(g_d.Get(nh).data(), g.data(), nh * sizeof(uint16_t)), 0) << where << ": g again";
  const std::vector<float> again = in_place ? x_d.Get(nd) : y_sep_d.Get(nd);
  EXPECT_EQ(std::memcmp(again.data(), out.data(), nd * sizeof(float)), 0) << where << ": y again";
}

TEST(FfnForward, MatchesFp64EvaluationsOfTheSameValues) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  RunCase(1000, 512, false);  // small's widths; a partial last tile
  RunCase(300, 384, true);    // an odd number of chunks (the stages alternate), x is y
  RunCase(1, 128, false);
  RunCase(128, 256, false);   // whole tiles only
  // More tiles than an H200 or H100 has SMs (313 over 132): a persistent CTA walks two or three, its
  // stages alternating across them (three chunks a tile), the last partial.
  RunCase(40000, 384, false);
}

}  // namespace
}  // namespace gemtb::gpu::train
