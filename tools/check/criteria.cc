#include "tools/check/criteria.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gemtb::check {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

struct FormatTraits {
  int significand_bits;  // including the implicit bit
  int min_exponent;      // exponent of the smallest normal: 2^min_exponent
  int max_exponent;      // exponent of the largest finite binade
};

FormatTraits Traits(ElementType type) {
  switch (type) {
    case ElementType::kBFloat16:
      return {8, -126, 127};
    case ElementType::kFloat16:
      return {11, -14, 15};
    case ElementType::kFloat32:
      return {24, -126, 127};
    case ElementType::kFloat64:
      return {53, -1022, 1023};
  }
  return {53, -1022, 1023};
}

// Exponent e with |x| in [2^e, 2^(e+1)), for finite nonzero x.
int Binade(double x) {
  int e = 0;
  std::frexp(x, &e);  // |x| = m * 2^e, m in [0.5, 1)
  return e - 1;
}

std::string Verdicted(std::string_view name, std::string_view what, double measured, double bound,
                      bool pass) {
  return absl::StrFormat("%s: %s = %.6g vs bound %.6g (%s)", std::string(name), std::string(what),
                         measured, bound, pass ? "pass" : "FAIL");
}

// Passes when `measured` <= `bound` (never for NaN).
Verdict Within(std::string_view name, std::string_view what, double measured, double bound) {
  Verdict v;
  v.measured = measured;
  v.bound = bound;
  v.pass = measured <= bound;
  v.message = Verdicted(name, what, measured, bound, v.pass);
  return v;
}

}  // namespace

double UlpOf(ElementType type, double x) {
  const FormatTraits t = Traits(type);
  const double floor_spacing = std::ldexp(1.0, t.min_exponent - t.significand_bits + 1);
  if (std::isnan(x)) return kNaN;
  if (std::isinf(x)) return kInf;
  if (x == 0) return floor_spacing;
  const double spacing = std::ldexp(1.0, Binade(x) - t.significand_bits + 1);
  return spacing < floor_spacing ? floor_spacing : spacing;
}

double RoundTo(ElementType type, double x) {
  if (type == ElementType::kFloat64 || !std::isfinite(x) || x == 0) return x;
  const FormatTraits t = Traits(type);
  const double u = UlpOf(type, x);
  // x/u and the product below are exact power-of-two scalings; nearbyint rounds ties to even
  // under the default rounding mode.
  const double r = std::nearbyint(x / u) * u;
  // Largest finite value is (2 - 2^(1-p)) * 2^emax; beyond the midpoint to the next binade: inf.
  const double max_finite =
      (2.0 - std::ldexp(1.0, 1 - t.significand_bits)) * std::ldexp(1.0, t.max_exponent);
  if (std::fabs(r) > max_finite) return std::copysign(kInf, x);
  return r;
}

bool IsRepresentable(ElementType type, double x) {
  if (!std::isfinite(x)) return true;
  const double r = RoundTo(type, x);
  return r == x;
}

std::string_view ElementTypeName(ElementType type) {
  switch (type) {
    case ElementType::kFloat64:
      return "float64";
    case ElementType::kFloat32:
      return "float32";
    case ElementType::kFloat16:
      return "float16";
    case ElementType::kBFloat16:
      return "bfloat16";
  }
  return "?";
}

double MaxAbsDiff(absl::Span<const double> a, absl::Span<const double> b) {
  if (a.size() != b.size()) return kNaN;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(a[i] - b[i]);
    if (std::isnan(d)) return kNaN;
    if (d > m) m = d;
  }
  return m;
}

double MaxAbs(absl::Span<const double> a) {
  double m = 0;
  for (double x : a) {
    if (std::isnan(x)) return kNaN;
    if (std::fabs(x) > m) m = std::fabs(x);
  }
  return m;
}

double RelL2(absl::Span<const double> got, absl::Span<const double> ref) {
  if (got.size() != ref.size()) return kNaN;
  double num = 0;
  double den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = got[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  if (std::isnan(num) || std::isnan(den)) return kNaN;
  if (den == 0) return num == 0 ? 0.0 : kInf;
  return std::sqrt(num / den);
}

double ScaledMaxDiff(absl::Span<const double> got, absl::Span<const double> ref) {
  const double diff = MaxAbsDiff(got, ref);
  const double scale = MaxAbs(ref);
  if (std::isnan(diff) || std::isnan(scale)) return kNaN;
  if (diff == 0) return 0;
  return scale == 0 ? kInf : diff / scale;
}

bool BitwiseEqual(absl::Span<const double> a, absl::Span<const double> b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

Verdict GpuPrimary(std::string_view name, absl::Span<const double> gpu,
                   absl::Span<const double> emu, absl::Span<const double> ref, ElementType dtype) {
  Verdict v = Within(name, "max|gpu-ref|", MaxAbsDiff(gpu, ref),
                     2 * MaxAbsDiff(emu, ref) + 2 * UlpOf(dtype, MaxAbs(ref)));
  if (gpu.size() != ref.size() || emu.size() != ref.size()) {
    v.pass = false;
    v.message = absl::StrCat(std::string(name), ": sizes differ (gpu ", gpu.size(), ", emu ",
                             emu.size(), ", ref ", ref.size(), ") (FAIL)");
  }
  return v;
}

Verdict GpuSecondaryRelL2(std::string_view name, absl::Span<const double> gpu,
                          absl::Span<const double> ref, double tolerance) {
  return Within(name, "rel-L2", RelL2(gpu, ref), tolerance);
}

Verdict LseMatches(std::string_view name, absl::Span<const double> got,
                   absl::Span<const double> ref, double tolerance) {
  Verdict v;
  v.bound = tolerance;
  if (got.size() != ref.size()) {
    v.measured = kNaN;
    v.message = absl::StrCat(std::string(name), ": sizes differ (", got.size(), " vs ", ref.size(),
                             ") (FAIL)");
    return v;
  }
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool got_empty = got[i] == -kInf;
    const bool ref_empty = ref[i] == -kInf;
    if (got_empty != ref_empty) {
      v.measured = kInf;
      v.message = absl::StrCat(std::string(name), ": -inf placement differs at index ", i, " (got ",
                               got[i], ", ref ", ref[i], ") (FAIL)");
      return v;
    }
    if (got_empty) continue;
    const double d = std::fabs(got[i] - ref[i]);
    if (!(d <= worst)) worst = d;  // keeps NaN and +inf
    if (std::isnan(d)) break;
  }
  return Within(name, "max|lse-ref| over finite rows", worst, tolerance);
}

Verdict ScaledMaxDiffWithin(std::string_view name, absl::Span<const double> got,
                            absl::Span<const double> ref, double tolerance) {
  // Sizes that differ measure NaN, which fails.
  return Within(name, "max|got-ref|/max|ref|", ScaledMaxDiff(got, ref), tolerance);
}

}  // namespace gemtb::check
