// plan.dense / plan.sparse / plan.collectives / plan.memory (the sparse object
// is read by model/sharding's parser, as `gemtb ref embed` reads it).
#include <algorithm>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "model/description/model_graph.h"
#include "model/json/json_reader.h"
#include "model/sharding/sharding_plan_json.h"
#include "sim/network/collective_cost.h"
#include "sim/scenario/torchrec_plan.h"
#include "sim/scenario/plan_json.h"

namespace gemtb::sim {

using namespace ::gemtb::json;  // the strict reader: ObjectReader, BadValue, JoinPath, ...
namespace {

constexpr int64_t kMaxGroup = int64_t{1} << 24;

// The dense dimensions dim_order may name (innermost first).
const std::vector<std::string>& DenseDimNames() {
  static const std::vector<std::string> names = {"ep", "expert_shard", "shard", "replica"};
  return names;
}

absl::Status ParseDense(const nlohmann::json& json, const Cluster& cluster, const model::ModelGraph& model, bool cap,
                        DensePlan* dense, std::vector<std::string>* warnings) {
  absl::StatusOr<ObjectReader> r = ObjectReader::Open(
      json, "plan.dense",
      {"fsdp_shard_group", "ep_degree", "expert_shard_group", "dim_order", "prefetch_depth", "reshard_after_forward",
       "bucket_bytes", "comm_dtype"});
  if (!r.ok()) return r.status();
  GEMTB_RETURN_IF_ERROR(r->Int("fsdp_shard_group", &dense->fsdp_shard_group, 1, kMaxGroup));
  GEMTB_RETURN_IF_ERROR(r->Int("ep_degree", &dense->ep_degree, 1, kMaxGroup));
  GEMTB_RETURN_IF_ERROR(r->Int("expert_shard_group", &dense->expert_shard_group, 1, kMaxGroup));
  GEMTB_RETURN_IF_ERROR(r->Int("prefetch_depth", &dense->prefetch_depth, 0, 64));
  GEMTB_RETURN_IF_ERROR(r->Bool("reshard_after_forward", &dense->reshard_after_forward));
  GEMTB_RETURN_IF_ERROR(r->Positive("bucket_bytes", &dense->bucket_bytes));
  GEMTB_RETURN_IF_ERROR(r->Named("comm_dtype", &dense->comm_dtype, kCommDtypeNames));
  if (const nlohmann::json* order = r->Get("dim_order"); order != nullptr) {
    const std::string path = "plan.dense.dim_order";
    if (!order->is_array()) return BadValue(path, *order, "is not an array of dimension names");
    dense->dim_order.clear();
    for (size_t i = 0; i < order->size(); ++i) {
      const nlohmann::json& name = (*order)[i];
      const auto& known = DenseDimNames();
      if (!name.is_string() || std::find(known.begin(), known.end(), name.get<std::string>()) == known.end()) {
        return BadValue(IndexPath(path, i), name, "is not one of ep, expert_shard, shard, replica");
      }
      if (std::find(dense->dim_order.begin(), dense->dim_order.end(), name.get<std::string>()) != dense->dim_order.end()) {
        return BadValue(IndexPath(path, i), name, "appears twice");
      }
      dense->dim_order.push_back(name.get<std::string>());
    }
  }

  const int world = cluster.world_size;
  if (cap) {
    dense->fsdp_shard_group = std::min(dense->fsdp_shard_group, world);
    dense->ep_degree = std::min(dense->ep_degree, world);
    dense->expert_shard_group = std::max(1, std::min(dense->expert_shard_group, world / dense->ep_degree));
  }
  const int s = dense->fsdp_shard_group, e = dense->ep_degree, se = dense->expert_shard_group;
  if (world % s != 0) {
    return BadField("plan.dense.fsdp_shard_group", absl::StrCat(s, " does not divide world_size ", world));
  }
  if (world % e != 0) return BadField("plan.dense.ep_degree", absl::StrCat(e, " does not divide world_size ", world));
  if (world % (int64_t{e} * se) != 0) {
    return BadField("plan.dense.expert_shard_group",
                    absl::StrCat(se, " x ep_degree ", e, " = ", int64_t{e} * se, " does not divide world_size ", world));
  }
  const int64_t experts = model.experts.count;
  if (e > 1 && experts <= 1) {
    return BadField("plan.dense.ep_degree", absl::StrCat(e, ": the model has no experts (experts.count ", experts, ")"));
  }
  if (e > 1 && experts % e != 0) {
    return BadField("plan.dense.ep_degree", absl::StrCat(e, " does not divide the model's ", experts, " experts"));
  }
  if (e > 1 && cluster.gpus_per_host % e != 0) {
    warnings->push_back(absl::StrCat("plan.dense.ep_degree: ", e, " does not divide gpus_per_host ",
                                     cluster.gpus_per_host, ": EP traffic leaves NVLink"));
  }
  if (cluster.zone_size > 0 && world > cluster.zone_size && s > cluster.zone_size) {
    warnings->push_back(absl::StrCat("plan.dense.fsdp_shard_group: ", s, " is larger than a zone (", cluster.zone_size,
                                     " GPUs): FSDP all-gathers cross the oversubscribed tier"));
  }
  return absl::OkStatus();
}

// plan.sparse through the one sharding plan parser (model/sharding).
absl::Status ParseSparse(const nlohmann::json& json, const Cluster& cluster, const model::ModelGraph& model, bool cap,
                         SparsePlan* sparse) {
  std::vector<PlanTable> tables;
  for (const model::GraphTable& t : model.tables) tables.push_back({t.name, t.dim});
  ShardingPlanOptions options;
  options.path = "plan.sparse";
  options.cap_mp_group_at_world_size = cap;
  absl::StatusOr<ShardingPlanSpec> plan =
      ParseShardingPlan(json, tables, cluster.world_size, cluster.gpus_per_host, options);
  if (!plan.ok()) return plan.status();
  *sparse = *std::move(plan);

  return absl::OkStatus();
}

// The sparse dimensions plan.layout.sparse_order may name (innermost first).
const std::vector<std::string>& SparseDimNames() {
  static const std::vector<std::string> names = {"shard", "mp", "dp"};
  return names;
}

// The first group of a dimension of `size` ranks `stride` apart, as the cluster's tiers see it.
GroupShape FirstGroup(const Cluster& cluster, int stride, int size) {
  absl::StatusOr<GroupShape> shape = StridedGroupShape(cluster, 0, stride, size);
  return shape.ok() ? *shape : GroupShape{};
}

// plan.layout after plan.sparse (it needs M and N), then the warnings of the sparse groups' placement.
absl::Status ParseLayout(const nlohmann::json& json, const Cluster& cluster, bool cap, Plan* plan,
                         std::vector<std::string>* warnings) {
  LayoutPlan& layout = plan->layout;
  absl::StatusOr<ObjectReader> r = ObjectReader::Open(json, "plan.layout", {"sparse_order", "sparse_shard_group"});
  if (!r.ok()) return r.status();
  GEMTB_RETURN_IF_ERROR(r->Int("sparse_shard_group", &layout.sparse_shard_group, 0, kMaxGroup));
  if (const nlohmann::json* order = r->Get("sparse_order"); order != nullptr) {
    const std::string path = "plan.layout.sparse_order";
    if (!order->is_array()) return BadValue(path, *order, "is not an array of dimension names");
    layout.sparse_order.clear();
    for (size_t i = 0; i < order->size(); ++i) {
      const nlohmann::json& name = (*order)[i];
      const auto& known = SparseDimNames();
      if (!name.is_string() || std::find(known.begin(), known.end(), name.get<std::string>()) == known.end()) {
        return BadValue(IndexPath(path, i), name, "is not one of shard, mp, dp");
      }
      if (std::find(layout.sparse_order.begin(), layout.sparse_order.end(), name.get<std::string>()) !=
          layout.sparse_order.end()) {
        return BadValue(IndexPath(path, i), name, "appears twice");
      }
      layout.sparse_order.push_back(name.get<std::string>());
    }
    if (layout.sparse_order.size() != SparseDimNames().size()) {
      return BadValue(path, *order, "must name each of shard, mp, dp once");
    }
  }

  const int world = cluster.world_size;
  const SparsePlan& sparse = plan->sparse;
  const int m = MpGroupSize(sparse, world);
  const int replicas = world / m;
  int f = layout.sparse_shard_group == 0 ? replicas : layout.sparse_shard_group;
  if (cap) f = std::min(f, replicas);
  if (replicas % f != 0) {
    return BadField("plan.layout.sparse_shard_group",
                    absl::StrCat(layout.sparse_shard_group, " does not divide the ", replicas,
                                 " replicas of an MP position (world_size / mp_group)"));
  }
  if (f < replicas && !sparse.fully_sharded) {
    return BadField("plan.layout.sparse_shard_group",
                    absl::StrCat(layout.sparse_shard_group, " splits the ", replicas,
                                 " replicas, which only a fully sharded plan (plan.sparse.fully_sharded) does"));
  }
  layout.shard = f;
  layout.mp = m;
  layout.dp = replicas / f;

  // Each dimension's stride: the product of the sizes inside it.
  auto size_of = [&](const std::string& d) { return d == "shard" ? layout.shard : d == "mp" ? layout.mp : layout.dp; };
  auto stride_of = [&](const std::string& d) {
    int stride = 1;
    for (const std::string& inner : layout.sparse_order) {
      if (inner == d) break;
      stride *= size_of(inner);
    }
    return stride;
  };
  const int mp_stride = stride_of("mp");
  layout.mp_stride = mp_stride;
  auto apart = [](int stride) {
    return stride == 1 ? std::string("on consecutive ranks") : absl::StrCat(stride, " ranks apart");
  };
  const GroupShape intra = FirstGroup(cluster, stride_of("shard"), layout.shard);
  if (sparse.fully_sharded && intra.hosts > 1) {
    warnings->push_back(absl::StrCat("plan.layout: V3's full sharding over ", layout.shard, " replicas ",
                                     apart(stride_of("shard")), " spans ", intra.hosts, " hosts of ",
                                     cluster.gpus_per_host, ": sparse-intra traffic leaves NVLink"));
  }
  const GroupShape mp = FirstGroup(cluster, mp_stride, m);
  if (mp.zones > 1) {
    warnings->push_back(absl::StrCat("plan.layout: an MP group of ", m, " positions ", apart(mp_stride), " spans ",
                                     mp.zones, " zones of ", cluster.zone_size, ": its all-to-alls cross zones"));
  }
  return absl::OkStatus();
}

absl::Status ParseCollectives(const nlohmann::json& json, const Cluster& cluster, CollectivesPlan* c) {
  absl::StatusOr<ObjectReader> r = ObjectReader::Open(
      json, "plan.collectives",
      {"library", "sms_per_collective", "algo", "cost_mode", "flow", "eta_tables", "a2av_end"});
  if (!r.ok()) return r.status();
  GEMTB_RETURN_IF_ERROR(r->Enum("library", &c->library, {"sm_based", "sm_free"}));
  GEMTB_RETURN_IF_ERROR(r->Int("sms_per_collective", &c->sms_per_collective, 1, std::max(1, cluster.gpu.sm_count - 1)));
  GEMTB_RETURN_IF_ERROR(r->Enum("cost_mode", &c->cost_mode, {"alpha_beta", "nccl"}));
  // "fifo" (per-link store-and-forward) is not modelled: rejected rather than accepted and ignored.
  GEMTB_RETURN_IF_ERROR(r->Enum("flow", &c->flow, {"none", "maxmin"}));
  GEMTB_RETURN_IF_ERROR(r->Bool("eta_tables", &c->eta_tables));
  GEMTB_RETURN_IF_ERROR(r->Enum("a2av_end", &c->a2av_end, {"all", "per_rank"}));
  if (c->eta_tables && cluster.calibration.eta_tables.empty()) {
    return BadField("plan.collectives.eta_tables", "true, but cluster.calibration has no eta tables");
  }
  if (const nlohmann::json* algo = r->Get("algo"); algo != nullptr) {
    if (!algo->is_object()) return BadValue("plan.collectives.algo", *algo, "is not an object of op -> algorithm");
    c->algo.clear();
    for (const auto& [op, name] : algo->items()) {
      const std::string path = JoinPath("plan.collectives.algo", op);
      const auto& ops = CollectiveOpNames();
      if (std::find(ops.begin(), ops.end(), op) == ops.end()) {
        return BadField(path, "unknown op (known: all_reduce, all_gather, reduce_scatter, all_to_all, broadcast)");
      }
      const auto& algos = CollectiveAlgoNames();
      if (!name.is_string() || std::find(algos.begin(), algos.end(), name.get<std::string>()) == algos.end()) {
        std::string all;
        for (const std::string& a : algos) all += (all.empty() ? "" : ", ") + a;
        return BadValue(path, name, absl::StrCat("is not one of ", all));
      }
      c->algo[op] = name.get<std::string>();
    }
  }
  return absl::OkStatus();
}

absl::Status ParseMemory(const nlohmann::json& json, const Cluster& cluster, MemoryPlan* m) {
  absl::StatusOr<ObjectReader> r =
      ObjectReader::Open(json, "plan.memory", {"budget_policy", "reserve_bytes", "act_quant"});
  if (!r.ok()) return r.status();
  GEMTB_RETURN_IF_ERROR(r->Enum("budget_policy", &m->budget_policy, {"per_region", "uniform", "none"}));
  GEMTB_RETURN_IF_ERROR(r->NonNegative("reserve_bytes", &m->reserve_bytes));
  GEMTB_RETURN_IF_ERROR(r->Named("act_quant", &m->act_quant, kActQuantNames));
  if (cluster.gpu.hbm_bytes > 0 && m->reserve_bytes >= cluster.gpu.hbm_bytes) {
    return BadField("plan.memory.reserve_bytes",
                    absl::StrCat(m->reserve_bytes, " must be < cluster.gpu.hbm_bytes ", cluster.gpu.hbm_bytes));
  }
  return absl::OkStatus();
}

absl::Status ParsePipeline(const nlohmann::json& json, PipelinePlan* p) {
  absl::StatusOr<ObjectReader> r = ObjectReader::Open(json, "plan.pipeline", {"sparse_ahead"});
  if (!r.ok()) return r.status();
  // 0 or 1: a deeper pipeline would hold more batches of embeddings and is not a TorchRec pipeline.
  GEMTB_RETURN_IF_ERROR(r->Int("sparse_ahead", &p->sparse_ahead, 0, 1));
  return absl::OkStatus();
}

}  // namespace

const std::vector<std::string>& CollectiveOpNames() {
  static const std::vector<std::string> names = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                                 "broadcast"};
  return names;
}

const std::vector<std::string>& CollectiveAlgoNames() {
  // As sim/network's CollAlgoName (all_to_allv is chosen by the workload, not by the plan).
  static const std::vector<std::string> names = {"auto", "ring", "tree", "halving_doubling", "direct", "hierarchical",
                                                 "nvls"};
  return names;
}

absl::StatusOr<Plan> ParsePlan(const nlohmann::json& json, const Cluster& cluster, const model::ModelGraph& model,
                               std::vector<std::string>* warnings) {
  absl::StatusOr<ObjectReader> r =
      ObjectReader::Open(json, "plan", {"cap_groups_at_world_size", "dense", "sparse", "layout", "torchrec_plan",
                                        "collectives", "memory", "pipeline"});
  if (!r.ok()) return r.status();
  bool cap = false;
  GEMTB_RETURN_IF_ERROR(r->Bool("cap_groups_at_world_size", &cap));
  Plan plan;
  const nlohmann::json empty = nlohmann::json::object();
  auto section = [&](std::string_view key) -> const nlohmann::json& {
    const nlohmann::json* v = r->Get(key);
    return v == nullptr ? empty : *v;
  };
  GEMTB_RETURN_IF_ERROR(ParseDense(section("dense"), cluster, model, cap, &plan.dense, warnings));
  GEMTB_RETURN_IF_ERROR(ParseSparse(section("sparse"), cluster, model, cap, &plan.sparse));
  GEMTB_RETURN_IF_ERROR(ParseLayout(section("layout"), cluster, cap, &plan, warnings));
  // TWRW's host groups: whole groups of consecutive MP positions on each host.
  const absl::StatusOr<int> host_positions =
      HostGroupPositions(plan.layout.mp, plan.layout.mp_stride, cluster.gpus_per_host);
  if (const nlohmann::json* torchrec = r->Get("torchrec_plan"); torchrec != nullptr) {
    GEMTB_RETURN_IF_ERROR(
        ApplyTorchRecPlan(*torchrec, model, plan.layout.mp, host_positions.ok() ? *host_positions : 1, &plan.sparse));
  }
  for (const TableSharding& t : plan.sparse.tables) {
    if (PlacedOnHosts(t.type) && !host_positions.ok()) {
      return BadField("plan.layout.sparse_order",
                      absl::StrCat("MP positions ", plan.layout.mp_stride, " ranks apart: ", ShardingTypeName(t.type),
                                   " tables need hosts of whole groups of positions (", host_positions.status().message(),
                                   ")"));
    }
  }
  GEMTB_RETURN_IF_ERROR(ParseCollectives(section("collectives"), cluster, &plan.collectives));
  GEMTB_RETURN_IF_ERROR(ParseMemory(section("memory"), cluster, &plan.memory));
  GEMTB_RETURN_IF_ERROR(ParsePipeline(section("pipeline"), &plan.pipeline));
  return plan;
}

}  // namespace gemtb::sim
