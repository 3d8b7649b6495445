// The trainer's gate layer, composed as the trainer runs it: on bf16 (gpu/train/gate.h around
// LinearMatmuls) a = z W + b, y = z sigmoid(a); backward da, dz = da W^T + dy sigmoid(a) through
// BackwardInput's `add`, dW and db; on fp32 as the check mode runs it, the same around Fp32Matmul
// (gpu/train/gemm.h; the bias as C's initial value, the gate's part of dz and the gradient dW
// accumulated through beta = 1). Each stage against layers.h's Gate formulas evaluated in fp64 on
// that stage's actual (rounded) inputs; the same bytes on a second run; a bad count refused by name.
#include "gpu/train/gate.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gpu/train/gemm.h"
#include "gpu/train/linear.h"
#include "gtest/gtest.h"
#include "tests/gpu/train_test_util.h"
#include "model/numerics/float_formats.h"

namespace gemtb::gpu::train {
namespace {

using test::Bf16Values;
using test::DeviceArray;
using test::ExpectClose;
using test::ExpectCloseToRms;
using test::ExpectCloseToScale;
using test::HaveSm90;
using test::RandomActivations;
using test::RandomBf16;

TEST(TrainGate, ABadCountIsRefusedByName) {
  EXPECT_NE(GateForward<__nv_bfloat16>(nullptr, nullptr, 0, nullptr, nullptr, nullptr).message().find("count=0"),
            std::string::npos);
  EXPECT_NE(GateBackward<__nv_bfloat16>(nullptr, nullptr, nullptr, -1, nullptr, nullptr, nullptr)
                .message()
                .find("count=-1"),
            std::string::npos);
  EXPECT_NE(GateForward<float>(nullptr, nullptr, int64_t{1} << 40, nullptr, nullptr, nullptr)
                .message()
                .find("count=1099511627776"),
            std::string::npos);
}

TEST(TrainGate, TheComposedLayerMatchesTheReferenceGateInFp64) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const LinearShape s{257, 128, 128};  // the gate's linear is d x d
  const size_t n = s.n, d = s.in, count = n * d;
  const std::vector<uint16_t> z_bits = RandomBf16(count, 1, 0.0, 1.0), w_bits = RandomBf16(d * d, 2, 0.0, 0.1);
  const std::vector<uint16_t> b_bits = RandomBf16(d, 3, 0.0, 0.5), dy_bits = RandomBf16(count, 4, 0.0, 1.0);
  const std::vector<double> z = Bf16Values(z_bits), w = Bf16Values(w_bits), b = Bf16Values(b_bits), dy = Bf16Values(dy_bits);

  absl::StatusOr<std::unique_ptr<LinearMatmuls>> mm = LinearMatmuls::Create();
  ASSERT_TRUE(mm.ok()) << mm.status();
  const std::vector<uint16_t> zeros16(count);
  const std::vector<float> zeros_sig(count), zeros_w(d * d), zeros_b(d);
  DeviceArray<uint16_t> d_z(z_bits), d_w(w_bits), d_b(b_bits), d_dy(dy_bits), d_a(zeros16), d_y(zeros16),
      d_da(zeros16), d_dz(zeros16);
  DeviceArray<float> d_sig(zeros_sig), d_dw(zeros_w), d_db(zeros_b);
  // The layer as the trainer runs it, each stage's outputs kept: a bf16 trainer rounds a, da and the
  // gate's part of dz to bf16 between stages, so each stage is checked against fp64 of its actual
  // inputs (layers.h's formulas), and the composition by the last stage.
  struct Stages {
    std::vector<uint16_t> a, y, da, dz_gate, dz;
    std::vector<float> sig, dw, db;
  };
  const auto run = [&](Stages& st) {
    ASSERT_TRUE((*mm)->Forward(s, d_z.bf16(), d_w.bf16(), d_b.bf16(), d_a.bf16(), nullptr).ok());
    ASSERT_TRUE(GateForward(d_z.bf16(), d_a.bf16(), static_cast<int64_t>(count), d_y.bf16(), d_sig.ptr, nullptr).ok());
    ASSERT_TRUE(GateBackward(d_z.bf16(), d_sig.ptr, d_dy.bf16(), static_cast<int64_t>(count), d_da.bf16(),
                             d_dz.bf16(), nullptr)
                    .ok());
    st.dz_gate = d_dz.Get(count);
    ASSERT_TRUE((*mm)->BackwardInput(s, d_da.bf16(), d_w.bf16(), d_dz.bf16(), d_dz.bf16(), nullptr).ok());
    ASSERT_TRUE((*mm)->BackwardWeight(s, d_z.bf16(), d_da.bf16(), d_dw.ptr, d_db.ptr, nullptr).ok());
    st.a = d_a.Get(count);
    st.y = d_y.Get(count);
    st.da = d_da.Get(count);
    st.dz = d_dz.Get(count);
    st.sig = d_sig.Get(count);
    st.dw = d_dw.Get(d * d);
    st.db = d_db.Get(d);
  };
  Stages st;
  run(st);
  const std::vector<double> a = Bf16Values(st.a), da = Bf16Values(st.da), dz_gate = Bf16Values(st.dz_gate);
  std::vector<double> a_want(count), sig_want(count), y_want(count), da_want(count), dz_gate_want(count),
      dz_want(count), dw_want(d * d, 0.0), db_want(d, 0.0);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < d; ++j) {
      double acc = b[j];
      for (size_t k = 0; k < d; ++k) acc += z[i * d + k] * w[k * d + j];
      a_want[i * d + j] = acc;
    }
  }
  for (size_t e = 0; e < count; ++e) {
    sig_want[e] = 1.0 / (1.0 + std::exp(-a[e]));
    y_want[e] = z[e] * sig_want[e];
    const double sg = st.sig[e];
    da_want[e] = dy[e] * z[e] * sg * (1.0 - sg);
    dz_gate_want[e] = dy[e] * sg;
  }
  std::vector<double> product(count);  // da W^T alone
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < d; ++k) {
      double acc = 0;
      for (size_t j = 0; j < d; ++j) acc += da[i * d + j] * w[k * d + j];
      product[i * d + k] = acc;
      dz_want[i * d + k] = dz_gate[i * d + k] + acc;
    }
  }
  for (size_t k = 0; k < d; ++k) {
    for (size_t j = 0; j < d; ++j) {
      for (size_t i = 0; i < n; ++i) dw_want[k * d + j] += z[i * d + k] * da[i * d + j];
    }
  }
  for (size_t j = 0; j < d; ++j) {
    for (size_t i = 0; i < n; ++i) db_want[j] += da[i * d + j];
  }
  // bf16 results within their rounding (2^-9) on top of fp32 sums; fp32 results within the sums'.
  ExpectCloseToRms(a, a_want, 1.0 / 128, 1e-3, "a");
  ExpectCloseToRms(std::vector<double>(st.sig.begin(), st.sig.end()), sig_want, 1e-6, 1e-7, "sigmoid(a)");
  ExpectCloseToRms(Bf16Values(st.y), y_want, 1.0 / 128, 1e-6, "y");
  ExpectCloseToRms(da, da_want, 1.0 / 128, 1e-6, "da");
  ExpectCloseToRms(dz_gate, dz_gate_want, 1.0 / 128, 1e-6, "dy sigmoid(a)");
  // dz: BackwardInput's added gradient comes in through cuBLASLt's beta term, which rounds like a bf16
  // product plus a bf16 sum (linear.h): a bf16 rounding of each (2^-8 relative, with room) bounds it.
  {
    const std::vector<double> got = Bf16Values(st.dz);
    int bad = 0;
    for (size_t e = 0; e < count; ++e) {
      const double bound = (std::fabs(product[e]) + std::fabs(dz_want[e])) / 128 + 1e-6;
      if (!(std::fabs(got[e] - dz_want[e]) <= bound) && bad++ < 5) {
        ADD_FAILURE() << "dz[" << e << "]: " << got[e] << ", want " << dz_want[e] << " (product " << product[e] << ")";
      }
    }
    EXPECT_EQ(bad, 0) << "dz";
  }
  ExpectCloseToRms(std::vector<double>(st.dw.begin(), st.dw.end()), dw_want, 1e-5, 1e-5, "dW");
  ExpectCloseToRms(std::vector<double>(st.db.begin(), st.db.end()), db_want, 1e-5, 1e-5, "db");

  // Again, from zeroed gradients: the same bytes.
  DeviceArray<float> d_dw2(zeros_w), d_db2(zeros_b);
  std::swap(d_dw.ptr, d_dw2.ptr);
  std::swap(d_db.ptr, d_db2.ptr);
  Stages again;
  run(again);
  EXPECT_EQ(again.y, st.y);
  EXPECT_EQ(again.dz, st.dz);
  EXPECT_EQ(again.dw, st.dw);
  EXPECT_EQ(again.db, st.db);
}

// The check mode's gate: fp32 activations around Fp32Matmul. Every product has k <= 129 terms, so
// it is within 1e-5 of the sum of its terms' magnitudes plus 1e-6 (tests/gpu/train_gemm_test.cc
// says why); the gate's elementwise results take a few roundings each (expf within 2 ulps), within
// 1e-5 of themselves.
TEST(TrainGate, TheFp32LayerOnTheFp32GemmMatchesTheReferenceGateInFp64) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const int64_t n = 129, d = 128;  // dW's products add n terms
  const size_t count = n * d;
  const std::vector<float> z = RandomActivations<float>(count, 1, 0.0, 1.0),
                           w = RandomActivations<float>(d * d, 2, 0.0, 0.1),
                           b = RandomActivations<float>(d, 3, 0.0, 0.5),
                           dy = RandomActivations<float>(count, 4, 0.0, 1.0),
                           dw0 = RandomActivations<float>(d * d, 5, 0.0, 0.01);
  std::vector<float> bias_rows(count);  // a's initial value: b in every row
  for (size_t e = 0; e < count; ++e) bias_rows[e] = b[e % d];

  absl::StatusOr<std::unique_ptr<Fp32Matmul>> mm = Fp32Matmul::Create();
  ASSERT_TRUE(mm.ok()) << mm.status();
  const std::vector<float> zeros(count);
  DeviceArray<float> d_z(z), d_w(w), d_dy(dy), d_a(bias_rows), d_y(zeros), d_sig(zeros), d_da(zeros), d_dz(zeros),
      d_dw(dw0);
  GemmF32 forward;  // a [n, d] = z [n, d] W [d, d] + a
  forward.m = n;
  forward.n = forward.k = d;
  forward.lda = forward.ldb = forward.ldc = d;
  forward.beta = 1.0f;
  GemmF32 input_grad = forward;  // dz [n, d] += da [n, d] W^T (W stored [d, d] as [n, k])
  input_grad.trans_b = true;
  GemmF32 weight_grad = forward;  // dW [d, d] += z^T da (z stored [n, d] as [k, m])
  weight_grad.m = d;
  weight_grad.k = n;
  weight_grad.trans_a = true;

  struct Stages {
    std::vector<float> a, sig, y, da, dz_gate, dz, dw;
  };
  const auto run = [&](Stages& st) {
    d_a.Put(bias_rows);
    d_dw.Put(dw0);
    ASSERT_TRUE((*mm)->Run(forward, d_z.ptr, d_w.ptr, d_a.ptr, nullptr).ok());
    ASSERT_TRUE(GateForward(d_z.ptr, d_a.ptr, static_cast<int64_t>(count), d_y.ptr, d_sig.ptr, nullptr).ok());
    ASSERT_TRUE(GateBackward(d_z.ptr, d_sig.ptr, d_dy.ptr, static_cast<int64_t>(count), d_da.ptr, d_dz.ptr, nullptr)
                    .ok());
    st.dz_gate = d_dz.Get(count);
    ASSERT_TRUE((*mm)->Run(input_grad, d_da.ptr, d_w.ptr, d_dz.ptr, nullptr).ok());
    ASSERT_TRUE((*mm)->Run(weight_grad, d_z.ptr, d_da.ptr, d_dw.ptr, nullptr).ok());
    st.a = d_a.Get(count);
    st.sig = d_sig.Get(count);
    st.y = d_y.Get(count);
    st.da = d_da.Get(count);
    st.dz = d_dz.Get(count);
    st.dw = d_dw.Get(d * d);
  };
  Stages st;
  run(st);

  std::vector<double> a_want(count), a_scale(count), sig_want(count), y_want(count), da_want(count),
      dz_gate_want(count), dz_want(count), dz_scale(count), dw_want(d * d), dw_scale(d * d);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < d; ++j) {
      double acc = b[j], mag = std::fabs(b[j]);
      for (int64_t k = 0; k < d; ++k) {
        acc += static_cast<double>(z[i * d + k]) * w[k * d + j];
        mag += std::fabs(static_cast<double>(z[i * d + k]) * w[k * d + j]);
      }
      a_want[i * d + j] = acc;
      a_scale[i * d + j] = mag;
    }
  }
  for (size_t e = 0; e < count; ++e) {
    sig_want[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(st.a[e])));
    y_want[e] = z[e] * sig_want[e];
    const double sg = st.sig[e];
    da_want[e] = dy[e] * static_cast<double>(z[e]) * sg * (1.0 - sg);
    dz_gate_want[e] = dy[e] * sg;
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < d; ++k) {
      const double gate = st.dz_gate[i * d + k];
      double acc = gate, mag = std::fabs(gate);
      for (int64_t j = 0; j < d; ++j) {
        acc += static_cast<double>(st.da[i * d + j]) * w[k * d + j];
        mag += std::fabs(static_cast<double>(st.da[i * d + j]) * w[k * d + j]);
      }
      dz_want[i * d + k] = acc;
      dz_scale[i * d + k] = mag;
    }
  }
  for (int64_t k = 0; k < d; ++k) {
    for (int64_t j = 0; j < d; ++j) {
      double acc = dw0[k * d + j], mag = std::fabs(dw0[k * d + j]);
      for (int64_t i = 0; i < n; ++i) {
        acc += static_cast<double>(z[i * d + k]) * st.da[i * d + j];
        mag += std::fabs(static_cast<double>(z[i * d + k]) * st.da[i * d + j]);
      }
      dw_want[k * d + j] = acc;
      dw_scale[k * d + j] = mag;
    }
  }
  const auto doubles = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  ExpectCloseToScale(doubles(st.a), a_want, a_scale, 1e-5, 1e-6, "fp32 a");
  ExpectClose(doubles(st.sig), sig_want, 1e-5, 1e-6, "fp32 sigmoid(a)");
  ExpectClose(doubles(st.y), y_want, 1e-5, 1e-6, "fp32 y");
  ExpectClose(doubles(st.da), da_want, 1e-5, 1e-6, "fp32 da");
  ExpectClose(doubles(st.dz_gate), dz_gate_want, 1e-5, 1e-6, "fp32 dy sigmoid(a)");
  ExpectCloseToScale(doubles(st.dz), dz_want, dz_scale, 1e-5, 1e-6, "fp32 dz");
  ExpectCloseToScale(doubles(st.dw), dw_want, dw_scale, 1e-5, 1e-6, "fp32 dW");

  Stages again;
  run(again);
  EXPECT_EQ(again.a, st.a);
  EXPECT_EQ(again.y, st.y);
  EXPECT_EQ(again.da, st.da);
  EXPECT_EQ(again.dz, st.dz);
  EXPECT_EQ(again.dw, st.dw);
}

}  // namespace
}  // namespace gemtb::gpu::train
