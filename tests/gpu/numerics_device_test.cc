// CPU and GPU run the same model/numerics code and must produce the same bits. Skipped
// (and shown as skipped by ctest) on machines without an sm_90 GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "gpu/numerics/numerics_device.h"
#include "model/numerics/float_formats.h"
#include "model/numerics/fp4_fp6.h"
#include "model/numerics/fp8.h"
#include "model/numerics/philox.h"
#include "model/numerics/stochastic_rounding.h"

namespace gemtb {
namespace {

TEST(NumericsDevice, EncodersBitwiseEqualOnCpuAndGpu) {
  if (!gpu::HasSm90Device()) GTEST_SKIP() << "no sm_90 GPU on this machine";
  // 2^24 inputs: random bit patterns (every class: NaN, inf, subnormal) and random normals.
  constexpr size_t kN = size_t{1} << 24;
  std::vector<float> x(kN);
  std::mt19937_64 rng(7);
  for (size_t i = 0; i < kN; ++i) {
    if (i % 2 == 0) {
      const uint32_t bits = static_cast<uint32_t>(rng());
      std::memcpy(&x[i], &bits, 4);
    } else {
      x[i] = std::normal_distribution<float>(0.f, 100.f)(rng);
    }
  }
  const uint64_t seed = 0x1234, stream = 5;
  absl::StatusOr<gpu::DeviceCodes> dev = gpu::EncodeOnDevice(x, seed, stream);
  ASSERT_TRUE(dev.ok()) << dev.status();
  size_t mismatches = 0;
  for (size_t i = 0; i < kN && mismatches < 10; ++i) {
    const uint32_t word = numerics::PhiloxWord(seed, stream, i);
    const bool same = dev->bf16[i] == numerics::FloatToBf16BitsRne(x[i]) &&
                      dev->fp16[i] == numerics::FloatToFp16BitsRne(x[i]) &&
                      dev->e4m3[i] == numerics::FloatToE4m3Rne(x[i]) &&
                      dev->e5m2[i] == numerics::FloatToE5m2Rne(x[i]) &&
                      dev->e2m3[i] == numerics::FloatToE2m3Rne(x[i]) &&
                      dev->e3m2[i] == numerics::FloatToE3m2Rne(x[i]) &&
                      dev->e2m1[i] == numerics::FloatToE2m1Rne(x[i]) && dev->philox[i] == word &&
                      dev->bf16_sr[i] == numerics::FloatToBf16BitsSr(x[i], static_cast<uint16_t>(word & 0xFFFFu));
    if (!same) {
      ++mismatches;
      ADD_FAILURE() << "element " << i << " x=" << x[i] << " differs between CPU and GPU";
    }
  }
  EXPECT_EQ(mismatches, 0u);
}

}  // namespace
}  // namespace gemtb
