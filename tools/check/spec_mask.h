// The attention mask and time buckets, written out from their definitions a second time (reference/
// has its own): the random cases put NaN on the dense-bias entries of invalid pairs with them, and
// tests/testing's padded attention builds its mask matrix with them, so neither trusts the oracle.
#ifndef GEMTB_TOOLS_CHECK_SPEC_MASK_H_
#define GEMTB_TOOLS_CHECK_SPEC_MASK_H_

#include <cstdint>

#include "model/attention/attention_options.h"

namespace gemtb::check {

// The mask, written out: is key j visible to local query i of an (lq, lk) pair?
bool PairIsValid(const AttentionOptions& options, int64_t i, int64_t j, int64_t lq, int64_t lk);

// The time-bias bucket of |delta|: #{k in 1..128 : |delta| >= T_k}, T_k = ceil(exp(0.301 k)).
int64_t TimeBucket(int64_t delta);
int64_t TimeThreshold(int k);  // T_k, k in 1..128

}  // namespace gemtb::check

#endif  // GEMTB_TOOLS_CHECK_SPEC_MASK_H_
