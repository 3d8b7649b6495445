#include "tests/testing/oracle_harness.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "rapidcheck.h"
#include "tools/check/criteria.h"

namespace gemtb::testing {
namespace {

::testing::AssertionResult SameBytes(std::string_view what, const std::vector<double>& a,
                                     const std::vector<double>& b) {
  if (a.size() != b.size()) {
    return ::testing::AssertionFailure()
           << what << ": sizes differ (" << a.size() << " vs " << b.size() << ")";
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(double)) != 0) {
      return ::testing::AssertionFailure() << what << "[" << i << "] differs: " << a[i] << " vs "
                                           << b[i] << " (first difference)";
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult NoNaNIn(std::string_view what, const std::vector<double>& v,
                                   bool allow_negative_infinity) {
  for (size_t i = 0; i < v.size(); ++i) {
    const bool bad =
        std::isnan(v[i]) || (std::isinf(v[i]) && !(allow_negative_infinity && v[i] < 0));
    if (bad) return ::testing::AssertionFailure() << what << "[" << i << "] = " << v[i];
  }
  return ::testing::AssertionSuccess();
}

}  // namespace

::testing::AssertionResult AllClose(std::string_view what, absl::Span<const double> got,
                                    absl::Span<const double> want, double tolerance) {
  const double scale = std::max(check::MaxAbs(want), 1.0);  // NaN stays NaN
  const double err = check::MaxAbsDiff(got, want);
  const bool pass = got.size() == want.size() && err <= tolerance * scale;
  if (pass) return ::testing::AssertionSuccess();
  auto failure = ::testing::AssertionFailure()
                 << what << ": max|got-want| = " << err << " > " << tolerance << " * " << scale
                 << " (max(max|want|, 1))";
  if (got.size() != want.size()) {
    failure << " [sizes " << got.size() << " vs " << want.size() << "]";
  } else {
    size_t worst = 0;
    double worst_diff = -1;
    for (size_t i = 0; i < got.size(); ++i) {
      const double d = std::fabs(got[i] - want[i]);
      if (std::isnan(d) || d > worst_diff) {
        worst = i;
        worst_diff = d;
        if (std::isnan(d)) break;
      }
    }
    failure << " [worst at " << worst << ": got " << got[worst] << ", want " << want[worst] << "]";
  }
  return failure;
}

::testing::AssertionResult LseClose(std::string_view what, absl::Span<const double> got,
                                    absl::Span<const double> want, double tolerance) {
  double scale = 1;
  for (double x : want) {
    if (std::isfinite(x) && std::fabs(x) > scale) scale = std::fabs(x);
  }
  const check::Verdict v = check::LseMatches(what, got, want, tolerance * scale);
  if (v.pass) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << v.message;
}

::testing::AssertionResult MatchesPadded(const check::OracleRun& run, const PaddedResult& want,
                                         double tolerance) {
  if (auto r = AllClose("O", run.fwd.o, want.o, tolerance); !r) return r;
  if (auto r = LseClose("LSE", run.fwd.lse, want.lse, tolerance); !r) return r;
  if (!run.has_backward) return ::testing::AssertionSuccess();
  if (auto r = AllClose("dQ", run.bwd.dq, want.dq, tolerance); !r) return r;
  if (auto r = AllClose("dK", run.bwd.dk, want.dk, tolerance); !r) return r;
  if (auto r = AllClose("dV", run.bwd.dv, want.dv, tolerance); !r) return r;
  if (auto r = AllClose("dBiasDense", run.bwd.d_bias_dense, want.d_bias_dense, tolerance); !r) {
    return r;
  }
  if (auto r = AllClose("dBiasRel", run.bwd.d_bias_rel, want.d_bias_rel, tolerance); !r) return r;
  if (auto r = AllClose("dBiasTs", run.bwd.d_bias_ts, want.d_bias_ts, tolerance); !r) return r;
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult BitIdentical(const check::OracleRun& a, const check::OracleRun& b) {
  if (a.fwd.o_shape != b.fwd.o_shape || a.fwd.lse_shape != b.fwd.lse_shape) {
    return ::testing::AssertionFailure() << "forward shapes differ";
  }
  if (auto r = SameBytes("O", a.fwd.o, b.fwd.o); !r) return r;
  if (auto r = SameBytes("LSE", a.fwd.lse, b.fwd.lse); !r) return r;
  if (a.has_backward != b.has_backward) return ::testing::AssertionFailure() << "backward missing";
  if (auto r = SameBytes("dQ", a.bwd.dq, b.bwd.dq); !r) return r;
  if (auto r = SameBytes("dK", a.bwd.dk, b.bwd.dk); !r) return r;
  if (auto r = SameBytes("dV", a.bwd.dv, b.bwd.dv); !r) return r;
  if (auto r = SameBytes("dBiasDense", a.bwd.d_bias_dense, b.bwd.d_bias_dense); !r) return r;
  if (auto r = SameBytes("dBiasRel", a.bwd.d_bias_rel, b.bwd.d_bias_rel); !r) return r;
  if (auto r = SameBytes("dBiasTs", a.bwd.d_bias_ts, b.bwd.d_bias_ts); !r) return r;
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult HasNoNaN(const check::OracleRun& run) {
  if (auto r = NoNaNIn("O", run.fwd.o, false); !r) return r;
  if (auto r = NoNaNIn("LSE", run.fwd.lse, true); !r) return r;
  if (auto r = NoNaNIn("dQ", run.bwd.dq, false); !r) return r;
  if (auto r = NoNaNIn("dK", run.bwd.dk, false); !r) return r;
  if (auto r = NoNaNIn("dV", run.bwd.dv, false); !r) return r;
  if (auto r = NoNaNIn("dBiasDense", run.bwd.d_bias_dense, false); !r) return r;
  if (auto r = NoNaNIn("dBiasRel", run.bwd.d_bias_rel, false); !r) return r;
  if (auto r = NoNaNIn("dBiasTs", run.bwd.d_bias_ts, false); !r) return r;
  return ::testing::AssertionSuccess();
}

void RcRequire(const ::testing::AssertionResult& result, const check::AttentionCase& c) {
  if (!result) RC_FAIL(absl::StrCat(result.message(), "\n  case: ", check::Describe(c)));
}

void RcRequireOk(const absl::Status& status, const check::AttentionCase& c) {
  if (!status.ok()) RC_FAIL(absl::StrCat(status.ToString(), "\n  case: ", check::Describe(c)));
}

}  // namespace gemtb::testing
