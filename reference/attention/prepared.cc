#include "reference/attention/prepared.h"

#include <oneapi/tbb/info.h>
#include <oneapi/tbb/task_arena.h>

#include "reference/attention/rope.h"

namespace gemtb::reference {

absl::StatusOr<PreparedAttention> Prepare(const AttentionInputs& in, const AttentionOptions& options,
                                          Precision precision) {
  absl::StatusOr<AttentionPlan> plan = MakePlan(in, options);
  if (!plan.ok()) return plan.status();
  PreparedAttention p;
  p.plan = *std::move(plan);
  const bool emulate = precision == Precision::kEmulate;
  const AttentionPlan& pl = p.plan;
  if (pl.rope) {
    p.q_rot = RopeForward(in.q.data, pl.tq, pl.heads, pl.dqk, in.rope_q.data, emulate, in.input_type);
    p.k_rot = RopeForward(in.k.data, pl.tk, pl.kv_heads, pl.dqk, in.rope_k.data, emulate, in.input_type);
  }
  if (pl.rope_v) {
    p.v_rot = RopeForward(in.v.data, pl.tk, pl.kv_heads, pl.dv, in.rope_v.data, emulate, in.input_type);
  }
  p.q = pl.rope ? p.q_rot.data() : in.q.data.data();
  p.k = pl.rope ? p.k_rot.data() : in.k.data.data();
  p.v = pl.rope_v ? p.v_rot.data() : in.v.data.data();
  return p;
}

void RunWithThreads(int threads, const std::function<void()>& body) {
  const int n = threads > 0 ? threads : tbb::info::default_concurrency();
  tbb::task_arena arena(n);
  arena.execute(body);
}

}  // namespace gemtb::reference
