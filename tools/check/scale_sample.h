// The oracle's part of a scale-tier case: a random sample of K/V sequences and heads, the oracle
// case made of exactly what their outputs depend on, and the kernels' outputs cut to the same rows,
// so that attention_check.h's Judge applies the GPU criteria to the sample unchanged.
//
// What a sample covers. K/V sequences are drawn at random until a cost budget (valid pairs x query
// heads) is spent, at least one; with each comes every output sequence that reads it (one under
// self and cross attention, all its readers under kv_index, none for a K/V sequence that no output
// reads); when no read sequence fits the budget, the cheapest read one joins. For those outputs O, LSE and dQ are checked (each depends on its own
// query and K/V sequence only), and for those K/V sequences dK and dV, which sum over all their
// readers, every reader being in the sample. Heads: one random K/V head with every query head of
// its GQA group. Under broadcast_q the shared query's dQ sums
// over every output, so the sample is the whole batch (on the sampled heads); the scale draw keeps
// those batches small enough for that (scale_case.h). Everything else in the batch is not checked.
#ifndef GEMTB_TOOLS_CHECK_SCALE_SAMPLE_H_
#define GEMTB_TOOLS_CHECK_SCALE_SAMPLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tools/check/attention_cases.h"
#include "tools/check/attention_check.h"
#include "tools/check/scale_case.h"

namespace gemtb::check {

struct ScaleSample {
  std::vector<int64_t> kv_sequences;  // ascending; dK and dV checked
  std::vector<int64_t> outputs;       // ascending; O, LSE and dQ checked
  std::vector<int64_t> kv_heads;      // ascending
  std::vector<int64_t> heads;         // ascending: the query heads of kv_heads' groups
  bool whole_batch = false;           // broadcast_q: every output (and K/V sequence) is in
  int64_t pairs = 0;                  // valid pairs x query heads the oracle evaluates
};

// The default cost budget: valid pairs x query heads of one sample. The oracle (fp64 and emulate,
// forward and backward) takes about 2.5 us per pair at D = 128 on one thread, so a sample costs
// seconds.
inline constexpr int64_t kSamplePairBudget = int64_t{1} << 20;

// A random sample of `c` from `sample_seed` (see the top).
ScaleSample DrawSample(const ScaleCase& c, uint64_t sample_seed,
                       int64_t pair_budget = kSamplePairBudget);

// The sample cost (valid pairs x query heads of one K/V head's group) of the cheapest K/V sequence
// with all its readers; under broadcast_q, of the whole batch.
int64_t MinimumSampleCost(const ScaleCase& c);

// "2 of 1152 K/V sequences (2 of 1152 outputs), K/V heads [0] (query heads [0,1]), 1.2e+06 pairs".
std::string DescribeSample(const ScaleCase& c, const ScaleSample& s);

// The sampled sequences and heads as an oracle case, with the batch's values, options and declared
// maxima; and the cotangent dO on its rows.
AttentionCase SampledCase(const ScaleCase& c, const ScaleSample& s);
std::vector<double> SampledCotangent(const ScaleCase& c, const ScaleSample& s);

// What the kernels returned for the whole batch, as they return it.
struct ScaleOutputs {
  absl::Status status;
  std::vector<uint16_t> o;   // [TO, H, D] patterns of the input type
  std::vector<float> lse;    // [H, TO], softmax only
  std::vector<uint16_t> dq;  // [TQ, H, D]
  std::vector<uint16_t> dk;  // [TK, Hkv, D]
  std::vector<uint16_t> dv;  // [TK, Hkv, D]
};

// The rows and heads of the sample, in SampledCase's layout, as values.
GpuOutputs GatherSample(const ScaleCase& c, const ScaleSample& s, const ScaleOutputs& out);

// Judge (attention_check.h) on the sample: the oracle runs SampledCase with SampledCotangent, and
// `gathered` is GatherSample of the kernels' outputs, on `oracle_threads` threads (0 = all). The
// description names the case and the sample.
CaseResult JudgeSample(const ScaleCase& c, const ScaleSample& s, const GpuOutputs& gathered,
                       int oracle_threads = 1);

}  // namespace gemtb::check

#endif  // GEMTB_TOOLS_CHECK_SCALE_SAMPLE_H_
