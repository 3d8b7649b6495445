// Batch assignment: per rank and step, the samples' sequence lengths drawn
// from batches.features' length laws and grouped into the rank's batch by the policy; reduced to
// BatchStats rows (batch_stats.h).
//
// Every policy works on the same draws: sample b of sub-batch n read by rank r (q = n*R + r)
// draws its normals from Philox keyed by (seed, purpose, r, n) at element
// b, so `random` and `bbs` differ only in which sub-batches a step takes:
//   random  step s takes sub-batches n in [s*k, (s+1)*k), k = ceil(B / sub_batch)
//   bbs     rank r pools the G*k sub-batches of G steps, sorts them by load (total tokens) and deals
//           them in snake order (model/data's BBS plan)
//   global  per step, all R*k sub-batches longest first to the least-loaded rank with room; X counts
//           the KJT bytes of the sub-batches that move (the extra all-to-all)
//   padded  every sequence padded to its cap (or assignment.max_len): identical ranks
// With corr = 1 on every law (one shared draw per sample, gem-default's case) and bounded ranges, a
// sample's lengths come from one uniform per sample through each law's tabulated CDF (the same law
// as ceil(exp(mu + sigma z)), z = Phi^-1(u)), four samples per Philox block: this is what keeps a
// 16,384-rank step within the time budget (sim/README.md, Speed). Otherwise normals are drawn per sample and sequence.
#ifndef GEMTB_SIM_WORKLOAD_BATCH_DRAW_H_
#define GEMTB_SIM_WORKLOAD_BATCH_DRAW_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "model/description/model_graph.h"
#include "sim/scenario/scenario.h"
#include "sim/workload/batch_stats.h"

namespace gemtb::sim {

struct SequenceCostInfo {
  int64_t n_s = 0;               // CLS tokens per sample
  AttentionMask mask;     // the sequence's self-attention mask (P_j)
  int64_t lmax = 0;              // cap of the model (padded policy default)
};

struct BatchDrawConfig {
  uint64_t seed = 0;
  int world = 1;
  int steps = 1;
  std::vector<SequenceCostInfo> sequences;  // J entries, j <-> batches.features[j]
  // KJT bytes of one sample: kjt_per_sample + kjt_per_token * (its sequence tokens, CLS excluded).
  double kjt_per_sample = 0;
  double kjt_per_token = 0;
};

// Row-major [step][rank][StatLayout::size()] statistics. `threads` only changes speed.
absl::StatusOr<std::vector<double>> DrawBatchStats(const BatchDrawConfig& config, const Batches& batches,
                                                   int threads);

// Draws one sample's lengths (J values) for reader rank r, sub-batch n, sample b (exposed for tests).
void DrawSampleLengths(const Batches& batches, uint64_t seed, int rank, int64_t sub_batch_index, int sample,
                       int64_t* lengths);

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_WORKLOAD_BATCH_DRAW_H_
