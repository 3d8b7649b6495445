// An attention block's fused input side (gpu/train/attention_input.h) on the GPU: h and the row
// statistics are LayerNormForward's bytes; each projection within the fp32 summation bound and one
// bf16 rounding of h W + b (fp64 over the kernel's own h); the normed rows and inverse RMS are
// QkNormRopeForward's (with RoPE) or HeadRmsNormForward's (without) bytes on the kernel's own
// projections. A second run gives the same bytes. Bad arguments refused by name (without a GPU).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gpu/train/attention_input.h"
#include "gpu/train/head_rms_norm.h"
#include "gpu/train/layer_norm.h"
#include "gpu/train/qk_norm_rope.h"
#include "gtest/gtest.h"
#include "model/numerics/float_formats.h"
#include "tests/gpu/train_test_util.h"

namespace gemtb::gpu::train {
namespace {

using test::DeviceArray;
using test::ExpectCloseToScale;
using test::HaveSm90;

TEST(AttentionInput, BadArgumentsAreRefusedByName) {
  EXPECT_TRUE(ValidateAttentionInputShape({10, 128, 32}).ok());
  const absl::Status d = ValidateAttentionInputShape({10, 96, 32});
  EXPECT_NE(d.message().find("d=96"), std::string::npos) << d;
  const absl::Status dh = ValidateAttentionInputShape({10, 32, 64});
  EXPECT_NE(dh.message().find("dh=64"), std::string::npos) << dh;
  const absl::Status none = AttentionInputForward({10, 128, 32}, AttentionNorm{}, {}, AttentionRope{}, nullptr);
  EXPECT_NE(none.message().find("projections=0"), std::string::npos) << none;
  const absl::Status null =
      AttentionInputForward({10, 128, 32}, AttentionNorm{}, {AttentionProjection{}}, AttentionRope{}, nullptr);
  EXPECT_NE(null.message().find("x=null"), std::string::npos) << null;
}

void RunCase(const std::vector<int32_t>& lengths, int d, int dh, int projections, bool rope) {
  std::vector<int32_t> offsets = {0};
  for (int32_t l : lengths) offsets.push_back(offsets.back() + l);
  const int64_t n = offsets.back();
  const int heads = d / dh;
  const std::string where = "n=" + std::to_string(n) + " d=" + std::to_string(d) + " dh=" + std::to_string(dh) +
                            " projections=" + std::to_string(projections) + (rope ? " rope" : "");
  const size_t nd = static_cast<size_t>(n) * d;
  std::vector<float> x(nd), gamma(d), beta(d);
  for (size_t e = 0; e < nd; ++e) x[e] = 0.2f + std::sin(0.37f * static_cast<float>(e) + 0.3f);
  for (int j = 0; j < d; ++j) gamma[j] = 1.0f + 0.2f * std::sin(1.3f * j), beta[j] = 0.1f * std::cos(0.7f * j);
  int32_t longest = 0;
  for (int32_t l : lengths) longest = std::max(longest, l);
  std::vector<float> table(static_cast<size_t>(longest) * dh);
  for (int32_t t = 0; t < longest; ++t) {
    for (int m = 0; m < dh / 2; ++m) {
      const double angle = t / std::pow(10000.0, 2.0 * m / dh);
      table[static_cast<size_t>(t) * dh + m] = static_cast<float>(std::sin(angle));
      table[static_cast<size_t>(t) * dh + dh / 2 + m] = static_cast<float>(std::cos(angle));
    }
  }
  DeviceArray<float> x_d(x), gamma_d(gamma), beta_d(beta), table_d(table), mean_d{std::vector<float>(n)},
      rstd_d{std::vector<float>(n)}, ln_mean_d{std::vector<float>(n)}, ln_rstd_d{std::vector<float>(n)};
  DeviceArray<int32_t> offsets_d(offsets);
  DeviceArray<uint16_t> h_d{std::vector<uint16_t>(nd)}, ln_h_d{std::vector<uint16_t>(nd)};
  const int normed = projections == 1 ? 1 : 2;
  std::vector<std::vector<uint16_t>> w, bias;
  std::vector<std::unique_ptr<DeviceArray<uint16_t>>> w_d, bias_d, y_d, yn_d, ref_d;
  std::vector<std::unique_ptr<DeviceArray<float>>> inv_d, ref_inv_d;
  std::vector<AttentionProjection> list;
  for (int s = 0; s < projections; ++s) {
    w.push_back(test::RandomBf16(static_cast<size_t>(d) * d, 30 + s, 0.0, 0.15));
    bias.push_back(test::RandomBf16(d, 40 + s, 0.0, 0.3));
    w_d.push_back(std::make_unique<DeviceArray<uint16_t>>(w.back()));
    bias_d.push_back(std::make_unique<DeviceArray<uint16_t>>(bias.back()));
    y_d.push_back(std::make_unique<DeviceArray<uint16_t>>(std::vector<uint16_t>(nd)));
    AttentionProjection pr{w_d.back()->bf16(), bias_d.back()->bf16(), y_d.back()->bf16(), nullptr, nullptr};
    if (s < normed) {
      yn_d.push_back(std::make_unique<DeviceArray<uint16_t>>(std::vector<uint16_t>(nd)));
      ref_d.push_back(std::make_unique<DeviceArray<uint16_t>>(std::vector<uint16_t>(nd)));
      inv_d.push_back(std::make_unique<DeviceArray<float>>(std::vector<float>(n * heads)));
      ref_inv_d.push_back(std::make_unique<DeviceArray<float>>(std::vector<float>(n * heads)));
      pr.normed = yn_d.back()->bf16();
      pr.inv = inv_d.back()->ptr;
    }
    list.push_back(pr);
  }
  const AttentionNorm norm{x_d.ptr, gamma_d.ptr, beta_d.ptr, h_d.bf16(), mean_d.ptr, rstd_d.ptr};
  const AttentionRope rp =
      rope ? AttentionRope{table_d.ptr, offsets_d.ptr, static_cast<int64_t>(lengths.size())} : AttentionRope{};
  ASSERT_TRUE(AttentionInputForward({n, d, dh}, norm, list, rp, nullptr).ok()) << where;
  ASSERT_TRUE(LayerNormForward(RowsShape{n, d}, x_d.ptr, gamma_d.ptr, beta_d.ptr, ln_h_d.bf16(), ln_mean_d.ptr,
                               ln_rstd_d.ptr, nullptr)
                  .ok());
  for (int s = 0; s < normed; ++s) {
    const absl::Status ref = rope ? QkNormRopeForward(RopeRows{static_cast<int64_t>(lengths.size()), offsets_d.ptr,
                                                               longest, heads, dh, table_d.ptr},
                                                      y_d[s]->bf16(), ref_d[s]->bf16(), ref_inv_d[s]->ptr, nullptr)
                                  : HeadRmsNormForward<__nv_bfloat16>(HeadRowsShape{n * heads, dh}, y_d[s]->bf16(),
                                                                      ref_d[s]->bf16(), ref_inv_d[s]->ptr, nullptr);
    ASSERT_TRUE(ref.ok()) << ref;
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << where;
  const std::vector<uint16_t> h = h_d.Get(nd);
  EXPECT_EQ(std::memcmp(h.data(), ln_h_d.Get(nd).data(), nd * 2), 0) << where << ": h";
  EXPECT_EQ(std::memcmp(mean_d.Get(n).data(), ln_mean_d.Get(n).data(), n * 4), 0) << where << ": mean";
  EXPECT_EQ(std::memcmp(rstd_d.Get(n).data(), ln_rstd_d.Get(n).data(), n * 4), 0) << where << ": rstd";
  const std::vector<double> hv = test::Bf16Values(h);
  for (int s = 0; s < projections; ++s) {
    const std::vector<uint16_t> y = y_d[s]->Get(nd);
    const std::vector<double> wv = test::Bf16Values(w[s]), bv = test::Bf16Values(bias[s]);
    std::vector<double> got(nd), want(nd), scale(nd);
    for (int64_t r = 0; r < n; ++r) {
      for (int c = 0; c < d; ++c) {
        double sum = bv[c], mag = std::fabs(bv[c]);
        for (int k = 0; k < d; ++k) {
          const double t = hv[r * d + k] * wv[static_cast<size_t>(k) * d + c];
          sum += t;
          mag += std::fabs(t);
        }
        const size_t e = static_cast<size_t>(r) * d + c;
        got[e] = numerics::Bf16BitsToFloat(y[e]), want[e] = sum, scale[e] = mag;
      }
    }
    ExpectCloseToScale(got, want, scale, 1.0 / 256 + (d + 1) / 16777216.0, 0.0,
                       where + " projection " + std::to_string(s));
    if (s < normed) {
      EXPECT_EQ(std::memcmp(yn_d[s]->Get(nd).data(), ref_d[s]->Get(nd).data(), nd * 2), 0) << where << ": normed " << s;
      EXPECT_EQ(std::memcmp(inv_d[s]->Get(n * heads).data(), ref_inv_d[s]->Get(n * heads).data(), n * heads * 4), 0)
          << where << ": inv " << s;
    }
  }
  // The same bytes again.
  const std::vector<uint16_t> y0 = y_d[0]->Get(nd), yn0 = yn_d[0]->Get(nd);
  ASSERT_TRUE(AttentionInputForward({n, d, dh}, norm, list, rp, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(std::memcmp(y_d[0]->Get(nd).data(), y0.data(), nd * 2), 0) << where << ": y again";
  EXPECT_EQ(std::memcmp(yn_d[0]->Get(nd).data(), yn0.data(), nd * 2), 0) << where << ": normed again";
}

TEST(AttentionInput, MatchesItsSeparateKernelsAndFp64) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  RunCase({300, 1, 700, 0, 30}, 128, 32, 3, true);  // small's self-attention block
  RunCase({64, 200}, 128, 32, 1, false);            // a cross-attention block's queries
  RunCase({90, 7}, 32, 16, 3, true);                // tiny's
  RunCase({129}, 64, 64, 3, true);
}

}  // namespace
}  // namespace gemtb::gpu::train
