// Deterministic fp64 exp, log, log2, log1p and the logistic function, built only from + - * / and
// sqrt (each one correctly rounded IEEE operation) plus integer bit manipulation. The platform libm
// differs between glibc versions, compilers and the CUDA device library; the data generator and the
// metrics must give the same bits on every host and device,
// so they use these routines instead. Accuracy is a few ulp, which is all they need; what matters is
// that the op sequence is fixed.
//
// Host code must be built with -ffp-contract=off (the project default); device code uses the _rn
// intrinsics, which nvcc never fuses into FMAs.
#pragma once

#include <cstdint>

#include "model/numerics/host_device.h"

namespace gemtb::numerics {
namespace det_detail {

// 2^e for e in [-1022, 1023], built from the exponent field.
GEMTB_HD inline double Pow2(int e) { return BitsToDouble(static_cast<uint64_t>(e + 1023) << 52); }

// ln 2 split so that k * kLn2Hi is exact for |k| < 2^20 (the low 32 mantissa bits of kLn2Hi are 0).
inline constexpr double kLn2Hi = 6.93147180369123816490e-01;  // 0x3FE62E42FEE00000
inline constexpr double kLn2Lo = 1.90821492927058770002e-10;  // ln 2 - kLn2Hi
inline constexpr double kInvLn2 = 1.44269504088896338700e+00;  // 1 / ln 2
inline constexpr double kSqrt2 = 1.41421356237309514547e+00;

// ln(1 + f) = 2 atanh(s), s = f / (2 + f), as 2s + 2s·z·(1/3 + z/5 + ... + z^10/21), z = s².
// Callers keep |s| <= 0.1716 (1 + f in [1/sqrt 2, sqrt 2]): the first omitted term is below
// 0.1716^22 / 23 ~ 1e-18 relative.
GEMTB_HD inline double Log1pReduced(double f) {
  const double s = DDiv(f, DAdd(2.0, f));
  const double z = DMul(s, s);
  double poly = 1.0 / 21.0;
  poly = DAdd(DMul(poly, z), 1.0 / 19.0);
  poly = DAdd(DMul(poly, z), 1.0 / 17.0);
  poly = DAdd(DMul(poly, z), 1.0 / 15.0);
  poly = DAdd(DMul(poly, z), 1.0 / 13.0);
  poly = DAdd(DMul(poly, z), 1.0 / 11.0);
  poly = DAdd(DMul(poly, z), 1.0 / 9.0);
  poly = DAdd(DMul(poly, z), 1.0 / 7.0);
  poly = DAdd(DMul(poly, z), 1.0 / 5.0);
  poly = DAdd(DMul(poly, z), 1.0 / 3.0);
  const double two_s = DAdd(s, s);
  return DAdd(two_s, DMul(two_s, DMul(z, poly)));
}

// x = m * 2^e, m in [1/sqrt 2, sqrt 2), for finite x > 0 (subnormals included). Returns m - 1,
// which is exact (Sterbenz).
GEMTB_HD inline double SplitLog(double x, int* e) {
  int extra = 0;
  uint64_t bits = DoubleToBits(x);
  if ((bits >> 52) == 0) {  // subnormal: scale into the normal range first
    x = DMul(x, 18014398509481984.0);  // 2^54
    bits = DoubleToBits(x);
    extra = -54;
  }
  int exponent = static_cast<int>(bits >> 52) - 1023;
  double m = BitsToDouble((bits & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull);  // [1, 2)
  if (m >= kSqrt2) {
    m = DMul(m, 0.5);
    exponent += 1;
  }
  *e = exponent + extra;
  return DSub(m, 1.0);
}

}  // namespace det_detail

GEMTB_HD inline double DetInfinity() { return BitsToDouble(0x7FF0000000000000ull); }
GEMTB_HD inline double DetNaN() { return BitsToDouble(0x7FF8000000000000ull); }
GEMTB_HD inline bool DetIsNaN(double x) { return x != x; }

namespace det_detail {

// log and log2 of NaN, negatives (NaN), zero (-inf) and +inf (itself): true with *special set;
// false for finite x > 0, with *f = m - 1 and *e of x = m * 2^e (SplitLog).
GEMTB_HD inline bool SplitLogOrSpecial(double x, double* special, double* f, int* e) {
  if (DetIsNaN(x) || x < 0.0) {
    *special = DetNaN();
  } else if (x == 0.0) {
    *special = -DetInfinity();
  } else if (x == DetInfinity()) {
    *special = x;
  } else {
    *f = SplitLog(x, e);
    return false;
  }
  return true;
}

}  // namespace det_detail

// Natural logarithm: log(0) = -inf, log(x < 0) = NaN, log(inf) = inf.
GEMTB_HD inline double DetLog(double x) {
  using namespace det_detail;
  double special = 0.0, f = 0.0;
  int e = 0;
  if (SplitLogOrSpecial(x, &special, &f, &e)) return special;
  const double ed = static_cast<double>(e);
  return DAdd(DMul(ed, kLn2Hi), DAdd(Log1pReduced(f), DMul(ed, kLn2Lo)));
}

// Base-2 logarithm; exact for powers of two.
GEMTB_HD inline double DetLog2(double x) {
  using namespace det_detail;
  double special = 0.0, f = 0.0;
  int e = 0;
  if (SplitLogOrSpecial(x, &special, &f, &e)) return special;
  return DAdd(static_cast<double>(e), DMul(Log1pReduced(f), kInvLn2));
}

// log(1 + x), accurate for small |x|: log1p(-1) = -inf, log1p(x < -1) = NaN.
GEMTB_HD inline double DetLog1p(double x) {
  using namespace det_detail;
  if (DetIsNaN(x) || x < -1.0) return DetNaN();
  if (x == -1.0) return -DetInfinity();
  // 1 + x in [1/sqrt 2, sqrt 2): the series directly, no rounding of 1 + x.
  if (x >= -0.29289321881345248 && x < 0.41421356237309503) return Log1pReduced(x);
  // Outside: log(u) with u = 1 + x rounded, plus the first-order correction c / u for the rounding
  // error c = (1 + x) - u (exact by the Fast2Sum ordering).
  const double u = DAdd(1.0, x);
  if (u == DetInfinity()) return DetLog(u);
  const double c = x > 1.0 ? DSub(1.0, DSub(u, x)) : DSub(x, DSub(u, 1.0));
  return DAdd(DetLog(u), DDiv(c, u));
}

// e^x: exp(-inf) = 0, exp(inf) = inf, overflow to inf above ~709.78, underflow to 0 below ~-745.13.
GEMTB_HD inline double DetExp(double x) {
  using namespace det_detail;
  if (DetIsNaN(x)) return x;
  if (x > 709.782712893384) return DetInfinity();
  if (x < -745.1332191019412) return 0.0;
  // x = k ln 2 + r, |r| <= ln 2 / 2 (Cody-Waite with the split ln 2).
  const double t = DMul(x, kInvLn2);
  const int k = static_cast<int>(t >= 0.0 ? DAdd(t, 0.5) : DSub(t, 0.5));  // round half away from 0
  const double kd = static_cast<double>(k);
  const double r = DSub(DSub(x, DMul(kd, kLn2Hi)), DMul(kd, kLn2Lo));
  // Taylor series to r^13 / 13!: the first omitted term is below 0.35^14 / 14! ~ 5e-18.
  double p = 1.0 / 6227020800.0;                 // 1/13!
  p = DAdd(DMul(p, r), 1.0 / 479001600.0);         // 1/12!
  p = DAdd(DMul(p, r), 1.0 / 39916800.0);          // 1/11!
  p = DAdd(DMul(p, r), 1.0 / 3628800.0);           // 1/10!
  p = DAdd(DMul(p, r), 1.0 / 362880.0);            // 1/9!
  p = DAdd(DMul(p, r), 1.0 / 40320.0);             // 1/8!
  p = DAdd(DMul(p, r), 1.0 / 5040.0);              // 1/7!
  p = DAdd(DMul(p, r), 1.0 / 720.0);               // 1/6!
  p = DAdd(DMul(p, r), 1.0 / 120.0);               // 1/5!
  p = DAdd(DMul(p, r), 1.0 / 24.0);                // 1/4!
  p = DAdd(DMul(p, r), 1.0 / 6.0);                 // 1/3!
  p = DAdd(DMul(p, r), 0.5);                       // 1/2!
  p = DAdd(DMul(p, r), 1.0);
  p = DAdd(DMul(p, r), 1.0);
  // Scale by 2^k in at most two exact-or-once-rounded steps (k reaches 1024 and -1075).
  if (k > 1023) return DMul(DMul(p, Pow2(k - 1)), 2.0);
  if (k < -1021) return DMul(DMul(p, Pow2(k + 1000)), Pow2(-1000));
  return DMul(p, Pow2(k));
}

// The logistic function 1 / (1 + e^-z), without overflow for either sign of z.
GEMTB_HD inline double DetSigmoid(double z) {
  using namespace det_detail;
  if (z >= 0.0) return DDiv(1.0, DAdd(1.0, DetExp(-z)));
  const double e = DetExp(z);
  return DDiv(e, DAdd(1.0, e));
}

// log(1 + e^z) (softplus), without overflow.
GEMTB_HD inline double DetSoftplus(double z) {
  using namespace det_detail;
  const double a = z >= 0.0 ? z : -z;
  return DAdd(z > 0.0 ? z : 0.0, DetLog1p(DetExp(-a)));
}

// x^y = e^(y log x) for x > 0.
GEMTB_HD inline double DetPow(double x, double y) { return DetExp(DMul(y, DetLog(x))); }

}  // namespace gemtb::numerics
