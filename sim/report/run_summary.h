// One simulation's report: the summary object (step time mean/p50/p99, the
// latency bound max_r max(local compute, communication), MFUs, SR, T_local, imbalance, the four
// indicators, memory fit, per-rank aggregates, attribution), ranks.csv (one row per rank) and
// collectives.csv (one row per call site).
#ifndef GEMTB_SIM_REPORT_RUN_SUMMARY_H_
#define GEMTB_SIM_REPORT_RUN_SUMMARY_H_

#include <string>
#include <string_view>

#include "nlohmann/json.hpp"
#include "sim/report/attribution.h"
#include "sim/scenario/result.h"

namespace gemtb::sim::report {

std::string_view GroupClassName(GroupClass c);  // dense-shard, dense-replica, ep, ...
std::string_view OpName(CollectiveOp op);       // all_reduce, all_gather, ...

// The run's summary, keys in a fixed order. `attribution` may be null (no reruns).
nlohmann::ordered_json RunSummaryJson(const SimResult& result, const Attribution* attribution);

// The attribution as JSON: T, T_ideal, T_local, per cause {delta_s, share_of_T}, non-layer work,
// biggest. ordered: the cumulative reruns' deltas (each loss names its rerun); else Shapley shares.
nlohmann::ordered_json AttributionJson(const Attribution& attribution, bool ordered = true);

// rank,compute_s,exposed_comm_s,wait_s,recompute_s,contention_s,nonlayer_compute_s,work_s,flops,
// static_bytes,peak_activation_bytes
std::string RanksCsv(const SimResult& result);

// name,class,op,algo,members,bytes,duration_s,algbw_GBps,busbw_GBps,exposed_fraction,calls_per_step
std::string CollectivesCsv(const SimResult& result);

}  // namespace gemtb::sim::report

#endif  // GEMTB_SIM_REPORT_RUN_SUMMARY_H_
