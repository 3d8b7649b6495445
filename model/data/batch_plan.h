// Batch formation policies as pure functions on sub-batch loads
// (load = total sequence length of a 128-sample sub-batch). Shared by the oracle, the trainers and
// the simulator, which calls them for thousands of ranks per step: O(n log n), and with a reused
// PlanScratch no heap allocation beyond the caller's output.
//
// A plan is a flat permutation of sub-batch indices: plan[g * k + s] is the s-th sub-batch of group g
// (a step for RandomPlan / BbsPlan, a rank for GlobalBalancePlan).
//   RandomPlan          no balancing: group g takes sub-batches [g k, (g + 1) k) in reader order
//                       (readers emit sub-batches in random order already).
//   BbsPlan             Base Batch Shuffling: a rank pools the G k sub-batches of G steps, sorts them
//                       by load descending (ties: lower index first) and deals them to the G steps in
//                       snake order 0..G-1, G-1..0, ..., pairing heavy with light. No communication.
//   GlobalBalancePlan   per step, all R k sub-batches, longest first, each to the least-loaded rank
//                       that still has room (k per rank; ties: lowest rank). Costs an all-to-all of
//                       the moved KJT bytes in a real system.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"

namespace gemtb::data {

// Reusable working memory of the planners (grows to the largest call, then stays).
struct PlanScratch {
  std::vector<int32_t> order;
  std::vector<std::pair<int64_t, int32_t>> heap;  // (load, rank), min-heap
  std::vector<int32_t> fill;                      // sub-batches given to each rank so far
};

namespace plan_detail {

inline absl::Status CheckSizes(const char* what, absl::Span<const int64_t> loads, int64_t groups,
                               absl::Span<int32_t> plan) {
  if (groups < 1) return absl::InvalidArgumentError(absl::StrCat(what, ": groups ", groups, " < 1"));
  if (loads.size() % static_cast<size_t>(groups) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", loads.size(), " sub-batch loads do not split into ", groups, " equal groups"));
  }
  if (loads.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", loads.size(), " sub-batches exceed int32 indices"));
  }
  if (plan.size() != loads.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": plan has ", plan.size(), " entries for ", loads.size(), " sub-batches"));
  }
  for (size_t i = 0; i < loads.size(); ++i) {
    if (loads[i] < 0) return absl::InvalidArgumentError(absl::StrCat(what, ": loads[", i, "] = ", loads[i], " < 0"));
  }
  return absl::OkStatus();
}

// Indices sorted by load descending, ties by index ascending (a total order: deterministic).
inline void SortHeaviestFirst(absl::Span<const int64_t> loads, std::vector<int32_t>& order) {
  order.resize(loads.size());
  for (size_t i = 0; i < loads.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return loads[static_cast<size_t>(a)] != loads[static_cast<size_t>(b)]
               ? loads[static_cast<size_t>(a)] > loads[static_cast<size_t>(b)]
               : a < b;
  });
}

}  // namespace plan_detail

inline absl::Status RandomPlanInto(absl::Span<const int64_t> loads, int64_t groups, absl::Span<int32_t> plan) {
  if (absl::Status s = plan_detail::CheckSizes("RandomPlan", loads, groups, plan); !s.ok()) return s;
  for (size_t i = 0; i < plan.size(); ++i) plan[i] = static_cast<int32_t>(i);
  return absl::OkStatus();
}

inline absl::Status BbsPlanInto(absl::Span<const int64_t> loads, int64_t groups, absl::Span<int32_t> plan,
                                PlanScratch& scratch) {
  if (absl::Status s = plan_detail::CheckSizes("BbsPlan", loads, groups, plan); !s.ok()) return s;
  const size_t G = static_cast<size_t>(groups);
  const size_t k = loads.size() / G;
  plan_detail::SortHeaviestFirst(loads, scratch.order);
  for (size_t r = 0; r < loads.size(); ++r) {
    const size_t round = r / G, pos = r % G;
    const size_t group = round % 2 == 0 ? pos : G - 1 - pos;
    plan[group * k + round] = scratch.order[r];
  }
  return absl::OkStatus();
}

inline absl::Status GlobalBalancePlanInto(absl::Span<const int64_t> loads, int64_t ranks, int64_t k,
                                          absl::Span<int32_t> plan, PlanScratch& scratch) {
  if (k < 1) return absl::InvalidArgumentError(absl::StrCat("GlobalBalancePlan: k ", k, " < 1"));
  if (ranks < 1 || static_cast<uint64_t>(ranks) * static_cast<uint64_t>(k) != loads.size()) {
    return absl::InvalidArgumentError(absl::StrCat("GlobalBalancePlan: ", loads.size(), " sub-batch loads != ranks ",
                                                   ranks, " x k ", k));
  }
  if (absl::Status s = plan_detail::CheckSizes("GlobalBalancePlan", loads, ranks, plan); !s.ok()) return s;
  plan_detail::SortHeaviestFirst(loads, scratch.order);
  // Min-heap on (load, rank): the top is the least-loaded rank, lowest rank on ties. A rank leaves
  // the heap when full, so the top always has room.
  auto greater = [](const std::pair<int64_t, int32_t>& a, const std::pair<int64_t, int32_t>& b) { return a > b; };
  scratch.heap.clear();
  for (int64_t r = 0; r < ranks; ++r) scratch.heap.emplace_back(0, static_cast<int32_t>(r));
  std::make_heap(scratch.heap.begin(), scratch.heap.end(), greater);
  scratch.fill.assign(static_cast<size_t>(ranks), 0);
  for (int32_t q : scratch.order) {
    std::pop_heap(scratch.heap.begin(), scratch.heap.end(), greater);
    std::pair<int64_t, int32_t> top = scratch.heap.back();
    scratch.heap.pop_back();
    const size_t r = static_cast<size_t>(top.second);
    plan[r * static_cast<size_t>(k) + static_cast<size_t>(scratch.fill[r])] = q;
    if (++scratch.fill[r] < k) {
      top.first += loads[static_cast<size_t>(q)];
      scratch.heap.push_back(top);
      std::push_heap(scratch.heap.begin(), scratch.heap.end(), greater);
    }
  }
  return absl::OkStatus();
}

// Allocating forms.
inline absl::StatusOr<std::vector<int32_t>> RandomPlan(absl::Span<const int64_t> loads, int64_t groups) {
  std::vector<int32_t> plan(loads.size());
  if (absl::Status s = RandomPlanInto(loads, groups, absl::MakeSpan(plan)); !s.ok()) return s;
  return plan;
}

inline absl::StatusOr<std::vector<int32_t>> BbsPlan(absl::Span<const int64_t> loads, int64_t groups) {
  std::vector<int32_t> plan(loads.size());
  PlanScratch scratch;
  if (absl::Status s = BbsPlanInto(loads, groups, absl::MakeSpan(plan), scratch); !s.ok()) return s;
  return plan;
}

inline absl::StatusOr<std::vector<int32_t>> GlobalBalancePlan(absl::Span<const int64_t> loads, int64_t ranks,
                                                              int64_t k) {
  std::vector<int32_t> plan(loads.size());
  PlanScratch scratch;
  if (absl::Status s = GlobalBalancePlanInto(loads, ranks, k, absl::MakeSpan(plan), scratch); !s.ok()) return s;
  return plan;
}

// Total load of each group of a plan (groups of plan.size() / groups sub-batches).
inline std::vector<int64_t> GroupLoads(absl::Span<const int64_t> loads, absl::Span<const int32_t> plan,
                                       int64_t groups) {
  std::vector<int64_t> out(static_cast<size_t>(groups), 0);
  const size_t k = plan.size() / static_cast<size_t>(groups);
  for (size_t i = 0; i < plan.size(); ++i) out[i / k] += loads[static_cast<size_t>(plan[i])];
  return out;
}

}  // namespace gemtb::data
