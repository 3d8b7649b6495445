// The error-propagation macros of gemtb (host code only).
#ifndef GEMTB_MODEL_COMMON_STATUS_MACROS_H_
#define GEMTB_MODEL_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"

// Evaluates `expr` (an absl::Status) and returns it from the enclosing function if it is not OK.
#define GEMTB_RETURN_IF_ERROR(expr)                      \
  do {                                                   \
    if (::absl::Status gemtb_status_ = (expr); !gemtb_status_.ok()) { \
      return gemtb_status_;                              \
    }                                                    \
  } while (false)

// Evaluates `expr` (an absl::StatusOr<T>): returns its status from the enclosing function if it is
// not OK, else moves its value into `lhs` (an existing variable).
#define GEMTB_ASSIGN_OR_RETURN(lhs, expr)                   \
  do {                                                      \
    auto gemtb_value_ = (expr);                             \
    if (!gemtb_value_.ok()) return gemtb_value_.status();   \
    lhs = *std::move(gemtb_value_);                         \
  } while (false)

#endif  // GEMTB_MODEL_COMMON_STATUS_MACROS_H_
