// Validation of jagged tensors shared by every executor's host API (the oracle and gpu/), so that
// a malformed input gets the same message whichever runs it. Host code only (absl::Status).
// `Tensor` is any view with `data` (a sized range) and `shape` (std::vector<int64_t>).
#ifndef GEMTB_MODEL_ATTENTION_JAGGED_CHECKS_H_
#define GEMTB_MODEL_ATTENTION_JAGGED_CHECKS_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "model/common/status_macros.h"

namespace gemtb::checks {

// "[2, 3, 4]" for messages.
inline std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Rank `rank`, non-negative dims whose product does not overflow, and exactly that many values.
template <typename Tensor>
absl::Status CheckRank(const Tensor& t, absl::string_view field, size_t rank, absl::string_view layout) {
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": shape ", ShapeString(t.shape), what));
  };
  if (t.shape.size() != rank) return bad(absl::StrCat(" has rank ", t.shape.size(), ", expected ", layout));
  int64_t n = 1;
  for (int64_t d : t.shape) {
    if (d < 0) return bad(" is negative");
    // A hostile shape must not overflow the product (signed overflow is UB).
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return bad(" has more than 2^63 elements");
    n *= d;
  }
  if (static_cast<int64_t>(t.data.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", t.data.size(), " values for shape ", ShapeString(t.shape)));
  }
  return absl::OkStatus();
}

// Offsets [n+1]: off[0] = 0, non-decreasing, off[n] = rows. Returns the n lengths.
template <typename Tensor>
absl::StatusOr<std::vector<int64_t>> CheckOffsets(const Tensor& off, absl::string_view field, int64_t rows,
                                                  absl::string_view rows_name) {
  GEMTB_RETURN_IF_ERROR(CheckRank(off, field, 1, "[n+1]"));
  auto bad = [](std::string m) { return absl::InvalidArgumentError(std::move(m)); };
  if (off.data.empty()) return bad(absl::StrCat(field, ": empty; need at least [0]"));
  if (off.data[0] != 0) return bad(absl::StrCat(field, "[0]=", off.data[0], ": offsets must start at 0"));
  std::vector<int64_t> lengths;
  for (size_t i = 1; i < off.data.size(); ++i) {
    if (off.data[i] < off.data[i - 1]) {
      return bad(absl::StrCat(field, "[", i, "]=", off.data[i], " < ", field, "[", i - 1, "]=", off.data[i - 1],
                              ": offsets must be non-decreasing"));
    }
    lengths.push_back(off.data[i] - off.data[i - 1]);
  }
  if (off.data.back() != rows) {
    return bad(absl::StrCat(field, "[", off.data.size() - 1, "]=", off.data.back(), ": last offset must equal ",
                            rows_name, "=", rows));
  }
  return lengths;
}

}  // namespace gemtb::checks

#endif  // GEMTB_MODEL_ATTENTION_JAGGED_CHECKS_H_
