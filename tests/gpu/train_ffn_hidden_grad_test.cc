// The fused feed-forward hidden gradient (gpu/train/ffn_hidden_grad.h) on the GPU: du against the fp64
// dg = dy W2ᵀ times the fp64 GELU'(u), within the roundings of dg and du to bf16, the fp32 sum's and
// the bf16 evaluation's; b1's gradient bit for bit model_kernels.h's ColumnSums of the kernel's own du,
// written and accumulated. A second run gives the same bytes. Shapes and pointers refused by name
// (that part needs no GPU).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/train/ffn_hidden_grad.h"
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

using reference::model::GeluGrad;
using test::GeluGradTerms;

TEST(FfnHiddenGrad, ShapesAndPointersItCannotTakeAreRefusedByName) {
  EXPECT_TRUE(ValidateFfnHiddenGradShape({10, 128, 512}).ok());
  const absl::Status d = ValidateFfnHiddenGradShape({10, 64, 256});
  EXPECT_NE(d.message().find("ffn hidden gradient shape d=64"), std::string::npos) << d;
  const absl::Status hidden = ValidateFfnHiddenGradShape({10, 128, 192});
  EXPECT_NE(hidden.message().find("hidden=192"), std::string::npos) << hidden;
  const absl::Status n = ValidateFfnHiddenGradShape({0, 128, 512});
  EXPECT_NE(n.message().find("n=0"), std::string::npos) << n;
  auto* const some16 = reinterpret_cast<__nv_bfloat16*>(16);
  auto* const some32 = reinterpret_cast<float*>(32);
  const absl::Status null = FfnHiddenGradFused({10, 128, 512}, some16, nullptr, some16, some16, some32, true, nullptr);
  EXPECT_NE(null.message().find("w2=null"), std::string::npos) << null;
  const absl::Status misaligned = FfnHiddenGradFused({10, 128, 512}, some16, some16, some16,
                                                     reinterpret_cast<__nv_bfloat16*>(18), some32, true, nullptr);
  EXPECT_NE(misaligned.message().find("du: want a 16-byte aligned pointer"), std::string::npos) << misaligned;
}

void RunCase(int64_t n, int hidden) {
  constexpr int d = 128;
  const std::string where = "n=" + std::to_string(n) + " hidden=" + std::to_string(hidden);
  const size_t nd = static_cast<size_t>(n) * d, nh = static_cast<size_t>(n) * hidden;
  const std::vector<uint16_t> dy = test::RandomBf16(nd, 21, 0.0, 0.05);
  const std::vector<uint16_t> w2 = test::RandomBf16(static_cast<size_t>(hidden) * d, 22, 0.0, 0.08);
  const std::vector<uint16_t> u = test::RandomBf16(nh, 23, 0.0, 1.5);  // pre-activations
  const std::vector<float> db1_start = Wave(hidden, 0.3f, 0.0f, 0.41f);
  const std::vector<double> dyv = test::Bf16Values(dy), w2v = test::Bf16Values(w2), uv = test::Bf16Values(u);

  DeviceArray<uint16_t> dy_d(dy), w2_d(w2), u_d(u), du_d{std::vector<uint16_t>(nh)};
  DeviceArray<float> db1_d(db1_start), want_d(db1_start);
  auto run = [&] {
    db1_d.Put(db1_start);
    EXPECT_TRUE(FfnHiddenGradFused({n, d, hidden}, dy_d.bf16(), w2_d.bf16(), u_d.bf16(), du_d.bf16(), db1_d.ptr, true,
                                   nullptr)
                    .ok())
        << where;
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << where;
  };
  run();
  const std::vector<uint16_t> du = du_d.Get(nh);
  const std::vector<float> db1 = db1_d.Get(hidden);

  // du = bf16(bf16(dg) GELU'(u)), dg the fp32 sum of d products.
  std::vector<double> du_got(nh), du_want(nh), du_bound(nh);
  for (int64_t r = 0; r < n; ++r) {
    for (int c = 0; c < hidden; ++c) {
      double dg = 0, mag = 0;
      for (int k = 0; k < d; ++k) {
        const double t = dyv[r * d + k] * w2v[static_cast<size_t>(c) * d + k];
        dg += t;
        mag += std::fabs(t);
      }
      const size_t e = static_cast<size_t>(r) * hidden + c;
      const double x = uv[e], grad = GeluGrad(x);
      du_got[e] = numerics::Bf16BitsToFloat(du[e]);
      du_want[e] = dg * grad;
      du_bound[e] = kBf16U * std::fabs(du_want[e]) +
                    std::fabs(grad) * (kBf16U * std::fabs(dg) + (d + 16) * kFp32U * mag) +
                    1e-5 * GeluGradTerms(x) * std::fabs(dg);
    }
  }
  ExpectCloseToScale(du_got, du_want, du_bound, 1.0, 0.0, where + " du");

  // b1's gradient: ColumnSums' tree over the kernel's own du, added to what db1 held.
  ASSERT_TRUE(ColumnSums(du_d.bf16(), n, hidden, hidden, want_d.ptr, true, nullptr).ok());
  EXPECT_EQ(std::memcmp(want_d.Get(hidden).data(), db1.data(), hidden * sizeof(float)), 0)
      << where << ": db1 against ColumnSums of du";
  // Written, not accumulated.
  ASSERT_TRUE(FfnHiddenGradFused({n, d, hidden}, dy_d.bf16(), w2_d.bf16(), u_d.bf16(), du_d.bf16(), db1_d.ptr, false,
                                 nullptr)
                  .ok());
  ASSERT_TRUE(ColumnSums(du_d.bf16(), n, hidden, hidden, want_d.ptr, false, nullptr).ok());
  EXPECT_EQ(std::memcmp(want_d.Get(hidden).data(), db1_d.Get(hidden).data(), hidden * sizeof(float)), 0)
      << where << ": db1 written against ColumnSums of du";

  // The same bytes again.
  run();
  EXPECT_EQ(std::memcmp(du_d.Get(nh).data(), du.data(), nh * sizeof(uint16_t)), 0) << where << ": du again";
  EXPECT_EQ(std::memcmp(db1_d.Get(hidden).data(), db1.data(), hidden * sizeof(float)), 0) << where << ": db1 again";
}

TEST(FfnHiddenGrad, MatchesFp64EvaluationsAndTheColumnSumTree) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  RunCase(1000, 512);  // small's widths; a partial last tile and column-sum block
  RunCase(300, 384);   // an odd number of chunks (the stages alternate)
  RunCase(70, 256);    // the second consumer's block of 6 rows
  RunCase(1, 128);
  // More tiles than an H200 or H100 has SMs (313 over 132): a persistent CTA walks two or three, its
  // stages alternating across them, the last partial.
  RunCase(40000, 384);
}

}  // namespace
}  // namespace gemtb::gpu::train
