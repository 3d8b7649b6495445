// Interleaved rotary embeddings: pair (x_2m, x_2m+1) of every head of token t is rotated
// by the angle whose sin and cos sit in columns m and D/2+m of table row t.
#ifndef GEMTB_REFERENCE_ATTENTION_ROPE_H_
#define GEMTB_REFERENCE_ATTENTION_ROPE_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "model/common/element_type.h"

namespace gemtb::reference {

// x [rows, heads, dim], table [rows, dim]. Emulate mode computes in fp32 and rounds the result to
// `storage` (the first rounding point); the oracle computes in fp64.
std::vector<double> RopeForward(absl::Span<const double> x, int64_t rows, int64_t heads, int64_t dim,
                                absl::Span<const double> table, bool emulate, ElementType storage);

// The transposed rotation, applied to a gradient with respect to the rotated tensor. In emulate
// mode in fp32, without the storage rounding (callers round once at the end).
void RopeBackwardInPlace(absl::Span<double> dy, int64_t rows, int64_t heads, int64_t dim,
                         absl::Span<const double> table, bool emulate);

}  // namespace gemtb::reference

#endif  // GEMTB_REFERENCE_ATTENTION_ROPE_H_
