// A validated attention call with everything derived from the offsets resolved once: which Q and
// K/V rows each output sequence reads, the alignment shift, the resolved scales, and the reverse map
// from K/V sequences to their readers that the backward's fixed-order reductions follow.
#ifndef GEMTB_REFERENCE_ATTENTION_PLAN_H_
#define GEMTB_REFERENCE_ATTENTION_PLAN_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "reference/attention/attention.h"

namespace gemtb::reference {

inline constexpr int kTimeBuckets = 129;

struct OutputSequence {
  int64_t q_begin = 0;    // first row in Q
  int64_t kv_begin = 0;   // first row in K and V
  int64_t out_begin = 0;  // first row in O
  int64_t lq = 0;
  int64_t lk = 0;
  int64_t kv_seq = 0;     // ks(b)
};

struct AttentionPlan {
  int64_t heads = 0, kv_heads = 0, dqk = 0, dv = 0;
  int64_t tq = 0, tk = 0, to = 0;
  int64_t max_lq = 0, max_lk = 0, max_l = 0;
  double pre_scale = 1.0, post_scale = 1.0;
  std::vector<OutputSequence> out;               // one per output sequence b
  std::vector<std::vector<int64_t>> kv_readers;  // per K/V sequence, the b reading it, increasing
  int64_t dense_heads = 0, rel_heads = 0, ts_heads = 0;  // 0 = that bias is absent
  // T_k = ceil(exp(0.301 k)), k = 1..128, tabulated once in fp64 (time bias buckets).
  std::array<int64_t, kTimeBuckets - 1> ts_thresholds{};
  bool rope = false, rope_v = false;
};

absl::StatusOr<AttentionPlan> MakePlan(const AttentionInputs& in, const AttentionOptions& options);

// #{k in 1..128 : |ts_from - ts_to| >= T_k}, by binary search over the table: no log per element.
int TimeBucket(const AttentionPlan& plan, int64_t ts_from, int64_t ts_to);

}  // namespace gemtb::reference

#endif  // GEMTB_REFERENCE_ATTENTION_PLAN_H_
