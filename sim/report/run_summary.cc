#include "sim/report/run_summary.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "sim/report/json_text.h"

namespace gemtb::sim::report {
namespace {

using Json = nlohmann::ordered_json;

// Mean and max over ranks of one RankStats field, and the rank holding the max (lowest on ties).
Json MeanMax(const std::vector<RankStats>& ranks, double RankStats::*field) {
  double sum = 0, max = 0;
  int argmax = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const double v = ranks[r].*field;
    sum += v;
    if (r == 0 || v > max) {
      max = v;
      argmax = static_cast<int>(r);
    }
  }
  Json j;
  j["mean"] = ranks.empty() ? 0.0 : sum / static_cast<double>(ranks.size());
  j["max"] = max;
  j["max_rank"] = argmax;
  return j;
}

}  // namespace

std::string_view GroupClassName(GroupClass c) {
  switch (c) {
    case GroupClass::kDenseShard: return "dense-shard";
    case GroupClass::kDenseReplica: return "dense-replica";
    case GroupClass::kEp: return "ep";
    case GroupClass::kExpertShard: return "expert-shard";
    case GroupClass::kSparseMp: return "sparse-mp";
    case GroupClass::kSparseReplica: return "sparse-replica";
    case GroupClass::kSparseIntra: return "sparse-intra";
  }
  return "?";
}

std::string_view OpName(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllReduce: return "all_reduce";
    case CollectiveOp::kAllGather: return "all_gather";
    case CollectiveOp::kReduceScatter: return "reduce_scatter";
    case CollectiveOp::kAllToAll: return "all_to_all";
    case CollectiveOp::kBroadcast: return "broadcast";
  }
  return "?";
}

Json AttributionJson(const Attribution& a, bool ordered) {
  Json j;
  j["t_s"] = a.t_s;
  j["t_ideal_s"] = a.t_ideal_s;
  j["t_local_s"] = a.t_local_s;
  Json losses = Json::array();
  for (int k = 0; k < kLossCauses; ++k) {
    Json loss;
    if (ordered) loss["rerun"] = k + 1;
    loss["key"] = std::string(LossKey(k));
    loss["cause"] = std::string(LossCause(k));
    loss["delta_s"] = a.delta_s[static_cast<size_t>(k)];
    loss["share_of_t"] = a.t_s > 0 ? a.delta_s[static_cast<size_t>(k)] / a.t_s : 0.0;
    losses.push_back(loss);
  }
  j["losses"] = losses;
  j["non_layer_s"] = a.non_layer_s;
  j["non_layer_share_of_t"] = a.t_s > 0 ? a.non_layer_s / a.t_s : 0.0;
  Json biggest;
  biggest["key"] = std::string(LossKey(a.biggest));
  biggest["cause"] = std::string(LossCause(a.biggest));
  biggest["delta_s"] = a.Loss(a.biggest);
  j["biggest_loss"] = biggest;
  return j;
}

Json RunSummaryJson(const SimResult& r, const Attribution* attribution) {
  Json j;
  j["world_size"] = r.world_size;
  Json step;
  step["mean_s"] = r.step_mean_s;
  step["p50_s"] = r.step_p50_s;
  step["p99_s"] = r.step_p99_s;
  step["measured_s"] = r.step_times_s;
  j["step_time"] = step;
  j["step_latency_bound_s"] = r.step_latency_bound_s;
  j["t_local_s"] = r.t_local_s;
  j["local_mfu"] = r.local_mfu;
  j["e2e_mfu"] = r.e2e_mfu;
  j["scaling_ratio"] = r.scaling_ratio;
  j["imbalance"] = r.imbalance;
  Json ind;
  ind["c1_compute_over_comm"] = r.indicators.c1_compute_over_comm;
  ind["c2_exposed_and_contention_share"] = r.indicators.c2_exposed_and_contention_share;
  ind["c3_recompute_share"] = r.indicators.c3_recompute_share;
  ind["c4_imbalance"] = r.indicators.c4_imbalance;
  j["indicators"] = ind;
  Json mem;
  mem["fits"] = r.memory.fits;
  mem["needed_bytes"] = r.memory.needed_bytes;
  mem["available_bytes"] = r.memory.available_bytes;
  mem["static_bytes"] = r.memory.static_bytes;
  mem["activation_budget_bytes"] = r.memory.activation_budget_bytes;
  mem["recomputed_fraction"] = r.memory.recomputed_fraction;
  j["memory"] = mem;
  Json ranks;
  ranks["compute_s"] = MeanMax(r.ranks, &RankStats::compute_s);
  ranks["exposed_comm_s"] = MeanMax(r.ranks, &RankStats::exposed_comm_s);
  ranks["wait_s"] = MeanMax(r.ranks, &RankStats::wait_s);
  ranks["recompute_s"] = MeanMax(r.ranks, &RankStats::recompute_s);
  ranks["contention_s"] = MeanMax(r.ranks, &RankStats::contention_s);
  ranks["nonlayer_compute_s"] = MeanMax(r.ranks, &RankStats::nonlayer_compute_s);
  ranks["work_s"] = MeanMax(r.ranks, &RankStats::work_s);
  ranks["peak_activation_bytes"] = MeanMax(r.ranks, &RankStats::peak_activation_bytes);
  j["ranks"] = ranks;
  j["collective_sites"] = r.collectives.size();
  if (attribution != nullptr) j["attribution"] = AttributionJson(*attribution);
  return j;
}

std::string RanksCsv(const SimResult& r) {
  std::string out =
      "rank,compute_s,exposed_comm_s,wait_s,recompute_s,contention_s,nonlayer_compute_s,work_s,flops,static_bytes,"
      "peak_activation_bytes\n";
  for (size_t i = 0; i < r.ranks.size(); ++i) {
    const RankStats& s = r.ranks[i];
    absl::StrAppend(&out, i, ",", FormatDouble(s.compute_s), ",", FormatDouble(s.exposed_comm_s), ",",
                    FormatDouble(s.wait_s), ",", FormatDouble(s.recompute_s), ",", FormatDouble(s.contention_s), ",",
                    FormatDouble(s.nonlayer_compute_s), ",", FormatDouble(s.work_s), ",", FormatDouble(s.flops), ",",
                    FormatDouble(s.static_bytes), ",", FormatDouble(s.peak_activation_bytes), "\n");
  }
  return out;
}

std::string CollectivesCsv(const SimResult& r) {
  std::string out =
      "name,class,op,algo,members,bytes,duration_s,algbw_GBps,busbw_GBps,exposed_fraction,calls_per_step\n";
  for (const CollectiveStats& c : r.collectives) {
    absl::StrAppend(&out, CsvField(c.name), ",", std::string(GroupClassName(c.group_class)), ",", std::string(OpName(c.op)), ",", CsvField(c.algo),
                    ",", c.members, ",", FormatDouble(c.bytes), ",", FormatDouble(c.duration_s), ",",
                    FormatDouble(c.algbw_Bps / 1e9), ",", FormatDouble(c.busbw_Bps / 1e9), ",",
                    FormatDouble(c.exposed_fraction), ",", FormatDouble(c.calls_per_step), "\n");
  }
  return out;
}

}  // namespace gemtb::sim::report
