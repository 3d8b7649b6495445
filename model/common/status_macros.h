// The one error-propagation macro of gemtb (host code only).
#ifndef GEMTB_MODEL_COMMON_STATUS_MACROS_H_
#define GEMTB_MODEL_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"

// Evaluates `expr` (an absl::Status) and returns it from the enclosing function if it is not OK.
#define GEMTB_RETURN_IF_ERROR(expr)                      \
  do {                                                   \
    if (::absl::Status gemtb_status_ = (expr); !gemtb_status_.ok()) { \
      return gemtb_status_;                              \
    }                                                    \
  } while (false)

#endif  // GEMTB_MODEL_COMMON_STATUS_MACROS_H_
