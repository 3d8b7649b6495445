// Every one of the 2^32 fp32 bit patterns → bf16 and → fp16, checked against
// an independent rounding: the FPU's std::nearbyint (round to nearest even) applied to x measured in
// units of the target quantum of x's binade, with the quantum powers built by std::ldexp. The
// result is compared by value (decoded through the decoders, which float_formats_test checks against
// the bit-field definition), sign of zero and class. Split over oneTBB; about 2·2^32 conversions.
#include <gtest/gtest.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "model/numerics/float_formats.h"

namespace gemtb::numerics {
namespace {

// Rounding of |x| for every fp32 biased exponent: quantum 2^(max(e, emin) - mant_bits) and its
// inverse (both exact powers of two), and the smallest magnitude that overflows to inf.
struct RoundingPlan {
  double quantum[256];
  double inv_quantum[256];
  double overflow;  // 2^(emax+1): a rounded magnitude >= this is inf
};

RoundingPlan MakePlan(int mant_bits, int emin, int emax) {
  RoundingPlan p{};
  for (int be = 0; be < 256; ++be) {
    const int e = be == 0 ? -126 : be - 127;  // binade of fp32 values with this exponent field
    const int qexp = (e < emin ? emin : e) - mant_bits;
    p.quantum[be] = std::ldexp(1.0, qexp);
    p.inv_quantum[be] = std::ldexp(1.0, -qexp);
  }
  p.overflow = std::ldexp(1.0, emax + 1);
  return p;
}

// Number of fp32 patterns in [begin, end) whose conversion disagrees with the reference.
template <typename Convert, typename Decode>
uint64_t CountMismatches(const RoundingPlan& plan, Convert convert, Decode decode,
                         uint32_t* first_bad, uint64_t begin = 0, uint64_t end = uint64_t{1} << 32) {
  std::atomic<uint64_t> bad{0};
  std::atomic<uint32_t> first{0xFFFFFFFFu};
  tbb::parallel_for(
      tbb::blocked_range<uint64_t>(begin, end, uint64_t{1} << 20),
      [&](const tbb::blocked_range<uint64_t>& range) {
        uint64_t local_bad = 0;
        uint32_t local_first = 0xFFFFFFFFu;
        for (uint64_t i = range.begin(); i != range.end(); ++i) {
          const auto bits = static_cast<uint32_t>(i);
          const float x = std::bit_cast<float>(bits);
          const float got = decode(convert(x));
          bool ok;
          const uint32_t be = (bits >> 23) & 0xFFu;
          if (be == 0xFFu) {
            ok = std::isnan(x) ? std::isnan(got)
                               : std::bit_cast<uint32_t>(got) == bits;  // ±inf stays ±inf
          } else {
            const double a = std::fabs(static_cast<double>(x));
            double r = std::nearbyint(a * plan.inv_quantum[be]) * plan.quantum[be];
            if (r >= plan.overflow) r = std::numeric_limits<double>::infinity();
            ok = static_cast<double>(std::fabs(got)) == r &&
                 std::signbit(got) == std::signbit(x);
          }
          if (!ok) {
            ++local_bad;
            if (bits < local_first) local_first = bits;
          }
        }
        if (local_bad != 0) {
          bad += local_bad;
          uint32_t cur = first.load();
          while (local_first < cur && !first.compare_exchange_weak(cur, local_first)) {
          }
        }
      });
  *first_bad = first.load();
  return bad.load();
}

TEST(FloatFormatsExhaustive, AllFp32PatternsToBf16MatchFpuRounding) {
  const RoundingPlan plan = MakePlan(7, -126, 127);
  uint32_t first_bad = 0;
  const uint64_t bad = CountMismatches(
      plan, [](float x) { return FloatToBf16BitsRne(x); },
      [](uint16_t b) { return Bf16BitsToFloat(b); }, &first_bad);
  EXPECT_EQ(bad, 0u) << "first mismatching fp32 pattern 0x" << std::hex << first_bad;
}

TEST(FloatFormatsExhaustive, AllFp32PatternsToFp16MatchFpuRounding) {
  const RoundingPlan plan = MakePlan(10, -14, 15);
  uint32_t first_bad = 0;
  const uint64_t bad = CountMismatches(
      plan, [](float x) { return FloatToFp16BitsRne(x); },
      [](uint16_t h) { return Fp16BitsToFloat(h); }, &first_bad);
  EXPECT_EQ(bad, 0u) << "first mismatching fp32 pattern 0x" << std::hex << first_bad;
}

// The reference must be able to fail: plain truncation disagrees with it on about half of the
// patterns (checked on the 2^24 patterns around 1.0).
TEST(FloatFormatsExhaustive, ReferenceRejectsTruncation) {
  const RoundingPlan plan = MakePlan(7, -126, 127);
  uint32_t first_bad = 0;
  const uint64_t bad = CountMismatches(
      plan,
      [](float x) {
        const uint32_t u = std::bit_cast<uint32_t>(x);
        return static_cast<uint16_t>(std::isnan(x) ? 0x7FC0u : u >> 16);
      },
      [](uint16_t b) { return Bf16BitsToFloat(b); }, &first_bad, 0x3F000000u, 0x40000000u);
  EXPECT_GT(bad, uint64_t{1} << 22);
}

}  // namespace
}  // namespace gemtb::numerics
