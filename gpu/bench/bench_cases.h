// The attention benchmark cases, by their exact names (shared with
// ../shared/peers/torch_peers.py), and the sequence lengths each one uses.
#ifndef GEMTB_GPU_BENCH_BENCH_CASES_H_
#define GEMTB_GPU_BENCH_BENCH_CASES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/attention/attention_options.h"

namespace gemtb::gpu::bench {

struct BenchCase {
  std::string name;
  int64_t batch = 0;
  int64_t max_lq = 0;        // M of the length rule (and the declared maximum)
  int64_t max_lk = 0;
  double sparsity = 0;       // s of the length rule
  int64_t dense_kv = 0;      // > 0: every K/V sequence has this length (cross attention)
  int64_t seeds = 0;         // > 0: broadcast_q with this many shared query rows (PMA)
  int64_t heads = 4;
  int64_t head_dim = 128;
  AttentionOptions options;  // act and mask
};

// The eight cases, in their fixed order.
const std::vector<BenchCase>& SpecCases();
absl::StatusOr<BenchCase> FindCase(const std::string& name);

// The lengths a case uses: q[b] (broadcast_q: the seed count for every b) and kv[b]. Drawn by the benchmark's
// rule, lo + floor(u * (hi - lo + 1)) with u = Philox word b / 2^32 (seed 0, stream 0):
// s >= 0.5: [max(1, floor((2s-1)M)), M]; else [1, floor(2sM)]. Self-attention cases use one draw
// for both; cross cases draw q and give K/V dense_kv; PMA takes K/V lengths from self_softmax.
struct CaseLengths {
  std::vector<int64_t> q, kv;
};
CaseLengths DrawLengths(const BenchCase& c);

// Valid (query, key) pairs per query head, from the same mask rule the kernels use.
int64_t ValidPairs(const BenchCase& c, const CaseLengths& lengths);

}  // namespace gemtb::gpu::bench

#endif  // GEMTB_GPU_BENCH_BENCH_CASES_H_
