// Numeric acceptance criteria of the attention kernels, plus the dtype helpers they need.
//
// Kept free of GoogleTest: the tests and the `gemtb ref compare` command judge results with the
// same functions. Each criterion returns a Verdict that carries the measured numbers and a one-line
// message, so a failure says by how much, not only that it failed.
//
// NaN anywhere in a compared tensor fails every criterion (comparisons are written as !(x <=
// bound)).
#ifndef GEMTB_TOOLS_CHECK_CRITERIA_H_
#define GEMTB_TOOLS_CHECK_CRITERIA_H_

#include <string>
#include <string_view>

#include "absl/types/span.h"
#include "model/common/element_type.h"

namespace gemtb::check {

// --- dtype helpers ------------------------------------------------------------------------------

// Spacing of `type`'s values at |x| (the gap to the next larger magnitude): 2^(e-p+1) for
// |x| in [2^e, 2^(e+1)), p the significand bits (bf16 8, fp16 11, fp32 24, fp64 53), floored at the
// smallest subnormal (bf16 2^-133, fp16 2^-24, fp32 2^-149, fp64 2^-1074). ulp(0) is that floor.
double UlpOf(ElementType type, double x);

// Rounds x to the nearest value of `type`, ties to even, in one rounding (no fp32 detour).
// Overflow past the largest finite value gives ±inf.
double RoundTo(ElementType type, double x);

// True when x is exactly a value of `type` (±inf and NaN count as representable).
bool IsRepresentable(ElementType type, double x);

std::string_view ElementTypeName(ElementType type);

// --- norms and distances ------------------------------------------------------------------------

// max |a_i - b_i|; NaN if any difference is NaN (or sizes differ); 0 for empty inputs.
double MaxAbsDiff(absl::Span<const double> a, absl::Span<const double> b);
// max |a_i|; NaN if any element is NaN.
double MaxAbs(absl::Span<const double> a);
// ||got - ref||_2 / ||ref||_2; 0 when both are all zero, +inf when only ref is.
double RelL2(absl::Span<const double> got, absl::Span<const double> ref);
// max|got - ref| / max|ref| (normwise relative max error); 0 when both are all zero.
double ScaledMaxDiff(absl::Span<const double> got, absl::Span<const double> ref);
// Same size and the same bytes (memcmp): distinguishes -0 from +0 and NaN payloads.
bool BitwiseEqual(absl::Span<const double> a, absl::Span<const double> b);

// --- verdicts -----------------------------------------------------------------------------------

struct Verdict {
  bool pass = false;
  double measured = 0;  // the quantity compared against `bound`
  double bound = 0;
  std::string message;  // "<name>: <what> = <measured> vs bound <bound> (pass|FAIL)"
};

// Tolerances.
inline constexpr double kForwardRelL2Tolerance = 5e-3;
inline constexpr double kGradientRelL2Tolerance = 1e-2;
inline constexpr double kLseMaxAbsTolerance = 1e-3;

// GPU primary: max|gpu-ref| <= 2*max|emu-ref| + 2*ulp_dtype(max|ref|), per tensor.
Verdict GpuPrimary(std::string_view name, absl::Span<const double> gpu,
                   absl::Span<const double> emu, absl::Span<const double> ref, ElementType dtype);

// GPU secondary: rel-L2(gpu, ref) <= tolerance (kForwardRelL2Tolerance or kGradientRelL2Tolerance).
Verdict GpuSecondaryRelL2(std::string_view name, absl::Span<const double> gpu,
                          absl::Span<const double> ref, double tolerance);

// LSE: -inf in exactly the same places, and max abs error <= 1e-3 elsewhere (+inf or NaN fail).
Verdict LseMatches(std::string_view name, absl::Span<const double> got,
                   absl::Span<const double> ref, double tolerance = kLseMaxAbsTolerance);

// max|got-ref| <= tolerance * max|ref| (the ≤1e-12 relative criterion of the CPU properties).
Verdict ScaledMaxDiffWithin(std::string_view name, absl::Span<const double> got,
                            absl::Span<const double> ref, double tolerance);

}  // namespace gemtb::check

#endif  // GEMTB_TOOLS_CHECK_CRITERIA_H_
