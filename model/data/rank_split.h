// How a job's global batch is split among its ranks (the batch policy of a step): every rank holds
// the same global batch (model/data's samples of the step), reorders it by RankSampleOrder and takes
// the r-th B/R samples of the reordered batch. The split moves samples between ranks only: the step's
// gradient sums the same samples, so the policy changes the ranks' loads and the order of sums, not
// which data a step trains on.
//   contiguous  rank r takes samples [r B/R, (r + 1) B/R) in generator order;
//   bbs         Base Batch Shuffling dealt over the ranks: the R k sub-batches of `sub_batch` samples
//               (load = their events over every sequence) sorted heaviest first and dealt to the
//               ranks in snake order, heavy paired with light (batch_plan.h's BbsPlan, R groups);
//   balance     each sub-batch, heaviest first, to the least-loaded rank with room
//               (GlobalBalancePlan).
// Within a rank, sub-batches in plan order and samples in generator order. Host only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "model/data/batch.h"
#include "model/data/batch_plan.h"

namespace gemtb::data {

enum class RankSplit { kContiguous, kBbs, kBalance };

inline const char* RankSplitName(RankSplit s) {
  switch (s) {
    case RankSplit::kContiguous: return "contiguous";
    case RankSplit::kBbs: return "bbs";
    case RankSplit::kBalance: return "balance";
  }
  return "?";
}

inline std::optional<RankSplit> RankSplitFromName(std::string_view name) {
  for (RankSplit s : {RankSplit::kContiguous, RankSplit::kBbs, RankSplit::kBalance}) {
    if (name == RankSplitName(s)) return s;
  }
  return std::nullopt;
}

// The events of each sample of `batch` over every sequence.
inline std::vector<int64_t> SampleEvents(const Batch& batch) {
  const size_t B = static_cast<size_t>(batch.size);
  std::vector<int64_t> events(B, 0);
  for (size_t i = 0; i < batch.seq_lengths.size(); ++i) events[i % B] += batch.seq_lengths[i];
  return events;
}

// The order of `batch`'s samples under `split` for `ranks` ranks with sub-batches of `sub_batch`
// samples: entry i is a sample index of `batch`, rank r's samples are entries [r B/R, (r + 1) B/R).
// InvalidArgument naming the value when B does not split into R equal parts of whole sub-batches.
inline absl::StatusOr<std::vector<int64_t>> RankSampleOrder(const Batch& batch, RankSplit split, int64_t ranks,
                                                            int64_t sub_batch) {
  const int64_t B = batch.size;
  if (ranks < 1 || B % ranks != 0) {
    return absl::InvalidArgumentError(absl::StrCat("batch: ", B, " samples do not split into ", ranks, " ranks"));
  }
  std::vector<int64_t> order(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) order[static_cast<size_t>(b)] = b;
  if (split == RankSplit::kContiguous) return order;
  const int64_t local = B / ranks;
  if (sub_batch < 1 || local % sub_batch != 0) {
    return absl::InvalidArgumentError(absl::StrCat("sub_batch: ", sub_batch, " samples do not divide a rank's ", local,
                                                   " (batch policy ", RankSplitName(split), ")"));
  }
  const int64_t k = local / sub_batch, subs = B / sub_batch;
  const std::vector<int64_t> events = SampleEvents(batch);
  std::vector<int64_t> loads(static_cast<size_t>(subs), 0);
  for (int64_t b = 0; b < B; ++b) loads[static_cast<size_t>(b / sub_batch)] += events[static_cast<size_t>(b)];
  std::vector<int32_t> plan(static_cast<size_t>(subs));
  PlanScratch scratch;
  const absl::Status s = split == RankSplit::kBbs
                             ? BbsPlanInto(loads, ranks, absl::MakeSpan(plan), scratch)
                             : GlobalBalancePlanInto(loads, ranks, k, absl::MakeSpan(plan), scratch);
  if (!s.ok()) return s;
  size_t at = 0;
  for (int32_t q : plan) {
    for (int64_t i = 0; i < sub_batch; ++i) order[at++] = int64_t{q} * sub_batch + i;
  }
  return order;
}

// The batch whose sample b is `batch`'s sample order[b], b < order.size(): a permutation of the
// batch (RankSampleOrder's), or a rank's part of it (its samples [r B/R, (r + 1) B/R)).
inline Batch SelectSamples(const Batch& batch, absl::Span<const int64_t> order) {
  const size_t B0 = static_cast<size_t>(batch.size), B = order.size();
  const size_t K = batch.keys.size(), J = batch.seq_lengths.size() / std::max<size_t>(B0, 1);
  const size_t m = batch.dense.size() / std::max<size_t>(B0, 1), T = batch.label.size() / std::max<size_t>(B0, 1);
  Batch out;
  out.size = static_cast<int64_t>(B);
  out.keys = batch.keys;
  out.indices.resize(B);
  out.lengths.resize(K * B);
  out.values.reserve(batch.values.size());
  out.dense.resize(B * m);
  out.surface.resize(B);
  out.seq_lengths.resize(J * B);
  out.prob.resize(B * T);
  out.label.resize(B * T);
  out.mask.resize(B * T);
  // Where each (key, sample)'s ids start in the values.
  std::vector<size_t> start(K * B0 + 1, 0);
  for (size_t i = 0; i < K * B0; ++i) start[i + 1] = start[i] + static_cast<size_t>(batch.lengths[i]);
  for (size_t k = 0; k < K; ++k) {
    for (size_t b = 0; b < B; ++b) {
      const size_t src = k * B0 + static_cast<size_t>(order[b]);
      out.lengths[k * B + b] = batch.lengths[src];
      out.values.insert(out.values.end(), batch.values.begin() + static_cast<ptrdiff_t>(start[src]),
                        batch.values.begin() + static_cast<ptrdiff_t>(start[src + 1]));
    }
  }
  for (size_t b = 0; b < B; ++b) {
    const size_t src = static_cast<size_t>(order[b]);
    out.indices[b] = batch.indices[src];
    out.surface[b] = batch.surface[src];
    for (size_t j = 0; j < J; ++j) out.seq_lengths[j * B + b] = batch.seq_lengths[j * B0 + src];
    for (size_t c = 0; c < m; ++c) out.dense[b * m + c] = batch.dense[src * m + c];
    for (size_t t = 0; t < T; ++t) {
      out.prob[b * T + t] = batch.prob[src * T + t];
      out.label[b * T + t] = batch.label[src * T + t];
      out.mask[b * T + t] = batch.mask[src * T + t];
    }
  }
  return out;
}

}  // namespace gemtb::data
