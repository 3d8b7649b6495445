// Independent references for the numerics tests. They are deliberately written differently from
// model/numerics: values come from the bit-field definitions via std::ldexp, and rounding is done by
// the FPU (std::nearbyint, round-to-nearest-even by default) or by brute-force nearest search, never
// by the integer carry logic under test.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace gemtb::numerics::testing {

// Which codes are special: IEEE-style inf/NaN at the top exponent; OFP8 E4M3's (no inf, only
// S.1111.111 is NaN); or none at all (the OCP MX fp6 and fp4 formats: every code is finite).
enum class Specials { kIeee, kE4m3fn, kNone };

// A minifloat described by its fields: exp_bits, mant_bits, bias and its special codes.
struct FieldFormat {
  int exp_bits;
  int mant_bits;
  int bias;
  Specials specials;
};

inline constexpr FieldFormat kRefBf16{8, 7, 127, Specials::kIeee};
inline constexpr FieldFormat kRefFp16{5, 10, 15, Specials::kIeee};
inline constexpr FieldFormat kRefE4m3{4, 3, 7, Specials::kE4m3fn};
inline constexpr FieldFormat kRefE5m2{5, 2, 15, Specials::kIeee};
inline constexpr FieldFormat kRefE2m3{2, 3, 1, Specials::kNone};
inline constexpr FieldFormat kRefE3m2{3, 2, 3, Specials::kNone};
inline constexpr FieldFormat kRefE2m1{2, 1, 1, Specials::kNone};

// The value of `code` by definition: (-1)^s · 2^(e-bias) · (1 + f/2^M) for normals,
// (-1)^s · 2^(1-bias) · f/2^M for subnormals; inf/NaN per the format.
inline double RefDecode(uint32_t code, const FieldFormat& fmt) {
  const int total = 1 + fmt.exp_bits + fmt.mant_bits;
  const bool neg = ((code >> (total - 1)) & 1u) != 0;
  const uint32_t e = (code >> fmt.mant_bits) & ((1u << fmt.exp_bits) - 1u);
  const uint32_t f = code & ((1u << fmt.mant_bits) - 1u);
  const uint32_t e_top = (1u << fmt.exp_bits) - 1u;
  const double sign = neg ? -1.0 : 1.0;
  if (fmt.specials == Specials::kE4m3fn) {
    if (e == e_top && f == (1u << fmt.mant_bits) - 1u) return std::numeric_limits<double>::quiet_NaN();
  } else if (fmt.specials == Specials::kIeee && e == e_top) {
    return f == 0 ? sign * std::numeric_limits<double>::infinity()
                  : std::numeric_limits<double>::quiet_NaN();
  }
  if (e == 0) return sign * std::ldexp(static_cast<double>(f), 1 - fmt.bias - fmt.mant_bits);
  return sign * std::ldexp(static_cast<double>((1u << fmt.mant_bits) + f),
                           static_cast<int>(e) - fmt.bias - fmt.mant_bits);
}

// Non-negative finite values of a format, ascending, indexed by magnitude code (the codes of
// non-negative finite values are 0..max_code and monotone).
inline std::vector<double> RefPositiveFiniteTable(const FieldFormat& fmt) {
  std::vector<double> t;
  for (uint32_t c = 0; c < (1u << (fmt.exp_bits + fmt.mant_bits)); ++c) {
    const double v = RefDecode(c, fmt);
    if (!std::isfinite(v)) break;
    t.push_back(v);
  }
  return t;
}

// Round-to-nearest-even of a non-negative finite `a` onto the table by brute nearest search:
// returns the magnitude code, or table.size() when a is past max + half a step (overflow); the
// caller decides whether that means inf or saturation.
inline uint32_t RefNearestCode(double a, const std::vector<double>& table) {
  const auto it = std::upper_bound(table.begin(), table.end(), a);
  const size_t hi = static_cast<size_t>(it - table.begin());  // first value > a
  const size_t lo = hi - 1;
  if (table[lo] == a) return static_cast<uint32_t>(lo);
  double hi_value;
  if (hi == table.size()) {
    // the value a further step would have (inf / NaN slot): max + last step
    hi_value = table[lo] + (table[lo] - table[lo - 1]);
  } else {
    hi_value = table[hi];
  }
  const double dlo = a - table[lo];
  const double dhi = hi_value - a;
  if (dlo < dhi) return static_cast<uint32_t>(lo);
  if (dhi < dlo) return static_cast<uint32_t>(hi);
  return (lo % 2 == 0) ? static_cast<uint32_t>(lo) : static_cast<uint32_t>(hi);
}

}  // namespace gemtb::numerics::testing
