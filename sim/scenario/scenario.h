// The simulator's inputs as plain structs: cluster, plan, batches, noise, and
// the model (model.json, parsed by model/description). sim/scenario/scenario_json.* parses and
// validates them; sim/network costs collectives on a Cluster; sim/engine and sim/workload run a
// Scenario; sim/report writes what they return (sim/scenario/result.h).
//
// Units: seconds and bytes inside the simulator; JSON keeps GB/s and µs and the parser
// converts. Every field has its documented default where one exists (docs/scenario.md).
#ifndef GEMTB_SIM_SCENARIO_SCENARIO_H_
#define GEMTB_SIM_SCENARIO_SCENARIO_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/common/dtype.h"
#include "model/sharding/sharding_types.h"

namespace gemtb::model {
struct ModelGraph;  // model/description/model_graph.h
}

namespace gemtb::sim {

// ---- collectives -------------------------------------------------------------------------------

// Names (JSON, CLI, CSV): all_reduce, all_gather, reduce_scatter, all_to_all, broadcast.
enum class CollectiveOp { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kBroadcast };

// Collective algorithms and NCCL protocols (names and meaning: sim/network/collective_cost.h); here
// because calibration files name them (NcclFitSegment).
enum class CollAlgo {
  kRing,             // ring AG/RS/AR/broadcast (flat multi-host ring when the group spans hosts)
  kTree,             // double binary tree, pipelined (AR, broadcast)
  kHalvingDoubling,  // halving-doubling AR, recursive-halving RS, recursive-doubling AG
  kDirect,           // direct all-to-all with window (multi-tier when the group spans tiers)
  kHierarchical,     // RS down the tiers, AR/AG/RS at the top, AG back up
  kNvls,             // NVLink SHARP (nccl mode; alpha_beta when calibration.nvls)
  kPat,              // NCCL's PAT all-gather/reduce-scatter (nccl mode, one GPU per host)
  kAllToAllv,        // all-to-allv (only through EstimateAllToAllv)
};
enum class CollProto { kNone, kLL, kLL128, kSimple };  // kNone in alpha_beta mode

// Process-group classes, one comm stream each; names as the oracle's communication
// report: dense-shard, dense-replica, ep, expert-shard, sparse-mp, sparse-replica, sparse-intra.
enum class GroupClass { kDenseShard, kDenseReplica, kEp, kExpertShard, kSparseMp, kSparseReplica, kSparseIntra };

// ---- cluster -----------------------------------------------------------------------------------

// One network tier, innermost first: tiers[0] the NVLink host, tiers[1] the zone (RoCE), tiers[2]
// the oversubscribed cross-zone fabric. Bandwidths per GPU, one direction.
struct Tier {
  std::string name;
  double bw_Bps = 0;           // nominal link bandwidth (bw_GBps * 1e9)
  double eff_busbw_Bps = 0;    // effective ring busbw (eff_busbw_GBps * 1e9)
  double alpha_s = 0;          // per-step latency (alpha_us * 1e-6)
  double oversubscription = 1; // >= 1; divides the bandwidth seen across this tier
};

struct GpuSpec {
  std::map<std::string, double> peak_flops;  // per dtype: "bf16", "fp8" (FLOP/s)
  double hbm_bytes = 0;
  double hbm_Bps = 0;
  int sm_count = 132;
};

// Piecewise-linear in tokens (a scalar is one point).
struct Curve {
  std::vector<std::pair<double, double>> points;  // (tokens, value), tokens ascending
};

struct Efficiency {
  std::map<std::string, Curve> by_name_or_kind;  // op name first, then op kind ("linear", "attention", ...)
  double e_mem = 0.6;                            // memory-bound tasks: bytes / (hbm_bw * e_mem)
};

// A measured efficiency of one op (or op kind), forward and backward separately; either may be
// absent (that direction keeps the next source).
struct MeasuredEfficiency {
  std::optional<double> fwd, bwd;  // in (0, 1]: of peak FLOP/s, or of HBM bandwidth for memory-bound ops
};

// A per-layer calibration file (docs/layer-calibration.md): efficiencies measured by running each
// layer alone on one GPU. An op's efficiency comes from `ops` (by op name), then `layers` (by the
// op's region), then `kinds` (by op kind), then Efficiency (the cluster calibration's per-kind
// assumption).
struct LayerCalibration {
  int version = 1;
  std::string hardware, commit, command, config;  // provenance: where, from which code, how, which model
  std::map<std::string, MeasuredEfficiency> ops;
  // By region: e = the region's FLOPs (all its ops) / (peak x measured time), so it prices every op
  // of the region by FLOPs, memory-bound ones included.
  std::map<std::string, MeasuredEfficiency> layers;
  std::map<std::string, MeasuredEfficiency> kinds;
};

// A size-efficiency table: eta(S) interpolated log-linearly in S.
struct EtaTable {
  CollectiveOp op = CollectiveOp::kAllReduce;
  int hosts = 1;
  std::vector<std::pair<double, double>> size_eta;  // (bytes, eta), bytes ascending, 0 < eta <= 1
};

// Fitted alpha-beta parameters of one (op, tier) from measured collectives.
struct FittedLink {
  CollectiveOp op = CollectiveOp::kAllReduce;
  std::string tier;       // tier name
  std::string algo;       // "auto" or a pinned algorithm ("ring", "tree", ...)
  int gpus = 0;           // group size it was measured on; applies to groups of that size (0: any)
  double min_bytes = 0;   // the sizes S it was fitted on: [min_bytes, max_bytes), 0 = unbounded
  double max_bytes = 0;
  double alpha_s = 0;
  double busbw_Bps = 0;
};

// A fitted correction of cost mode nccl (sim/network/nccl_fit.h) for one (op, pinned algorithm, group
// size, NCCL's algorithm/protocol choice) and size segment: t = launch_s + t_NCCL / eta.
struct NcclFitSegment {
  CollectiveOp op = CollectiveOp::kAllReduce;
  std::string tier;                 // tier name: applies to groups whose top tier is this one
  std::optional<CollAlgo> pinned;   // how NCCL_ALGO was set when measured: ring, tree, nvls; nullopt: auto
  CollAlgo algo = CollAlgo::kRing;  // NCCL's choice the segment corrects: ring, tree, nvls, pat
  CollProto proto = CollProto::kSimple;  // LL, LL128, Simple
  int gpus = 0;                     // group size it was measured on (0: any)
  double min_bytes = 0;             // [min_bytes, max_bytes), 0 = unbounded
  double max_bytes = 0;
  double launch_s = 0;              // intercept; may be < 0 (calibrate.cc keeps t > 0 on the segment)
  double eta = 1;                   // > 0 (> 1: faster than NCCL's table)
};

struct Calibration {
  std::string nccl_version;  // calibration files record the NCCL version and commit
  std::string nccl_commit;
  bool nvls = false;         // whether NVLink SHARP was on where this was measured
  std::map<std::string, double> nccl_constants;  // overrides of NCCL's tuning constants, by name
  std::vector<FittedLink> fitted;
  std::vector<NcclFitSegment> nccl_fitted;  // mode nccl's launch/η segments
  std::vector<EtaTable> eta_tables;
  std::optional<double> kappa;  // SM-contention slowdown; default s / (n_SM - s)
  // Per CollectiveOp (index = its value): an SM-based collective's own kappa, instead of `kappa`.
  std::array<std::optional<double>, 5> kappa_ops{};
  // Slowdown of compute beside a copy-engine (SM-free) collective (HBM bandwidth, no SMs); none: 0.
  std::optional<double> kappa_copy_engine;
  Efficiency efficiency;
  std::optional<LayerCalibration> layers;  // measured per-layer efficiencies; none: the per-kind ones
};

struct Cluster {
  int world_size = 0;
  int gpus_per_host = 8;
  int zone_size = 0;  // GPUs per AI zone; a world smaller than a zone is one zone
  std::vector<Tier> tiers;
  int nics_per_gpu = 1;
  GpuSpec gpu;
  Calibration calibration;
};

// ---- plan --------------------------------------------------------------------------------------

// The formats plan.dense.comm_dtype and plan.memory.act_quant may name (model/common/dtype.h).
inline constexpr EnumName<Dtype> kCommDtypeNames[] = {{Dtype::kBf16, DtypeName(Dtype::kBf16)},
                                                       {Dtype::kFp16, DtypeName(Dtype::kFp16)},
                                                       {Dtype::kFp32, DtypeName(Dtype::kFp32)},
                                                       {Dtype::kFp8E4M3, DtypeName(Dtype::kFp8E4M3)}};
inline constexpr EnumName<Dtype> kActQuantNames[] = {{Dtype::kBf16, DtypeName(Dtype::kBf16)},
                                                      {Dtype::kFp8E4M3, DtypeName(Dtype::kFp8E4M3)},
                                                      {Dtype::kMx4, DtypeName(Dtype::kMx4)}};

struct DensePlan {
  int fsdp_shard_group = 1;      // S (capped at world_size by scenarios that say so)
  int ep_degree = 1;             // E
  int expert_shard_group = 1;    // S_E
  std::vector<std::string> dim_order;  // innermost first, e.g. {"ep", "expert_shard", "shard", "replica"}
  int prefetch_depth = 1;
  bool reshard_after_forward = true;
  double bucket_bytes = 25e6;
  Dtype comm_dtype = Dtype::kBf16;  // one of kCommDtypeNames; bytes per element follow from it
};

// plan.sparse: the sharding plan as model/sharding parses it (the object `gemtb ref embed`
// reads): one TableSharding per model table, in the model's order.
using SparsePlan = ShardingPlanSpec;

struct CollectivesPlan {
  std::string library = "sm_based";  // sm_based | sm_free
  int sms_per_collective = 24;
  std::map<std::string, std::string> algo;  // op name -> auto | ring | tree | halving_doubling | direct | nvls | hierarchical
  std::string cost_mode = "alpha_beta";     // alpha_beta | nccl
  std::string flow = "maxmin";              // none (lone costs) | maxmin (shared links)
  bool eta_tables = false;
  std::string a2av_end = "all";             // all | per_rank
};

struct MemoryPlan {
  std::string budget_policy = "per_region";  // per_region | uniform | none
  double reserve_bytes = 0;
  Dtype act_quant = Dtype::kBf16;            // bf16 (1) | fp8 (0.5) | mx4 (~0.27): kActQuantNames
};

// plan.pipeline: how the training loop overlaps consecutive batches.
struct PipelinePlan {
  // Batches by which the sparse forward (ids exchange, lookup, embedding exchange) runs ahead of its
  // dense forward. 0: the in-step order, every batch's sparse forward at the start of its
  // own step. 1: TorchRec's TrainPipelineSemiSync: step t gathers batch t+1's embeddings, its lookup
  // after step t's dense forward and its exchange beside step t's dense backward; batch t+1 is looked
  // up in tables that batch t has not yet updated; the next batch's embeddings stay resident.
  int sparse_ahead = 0;
};

// plan.layout: how the sparse plan's groups lie on ranks. The N = R/M replicas of an MP position
// split into V3's full-sharding group of F replicas (they share the position's rows) and N/F
// data-parallel copies; the three dimensions shard (F), mp (M) and dp (N/F) take ranks in
// sparse_order, innermost first (contiguous ranks), each dimension's stride the product of the
// sizes inside it. The default, {shard, mp, dp} with F = N, is rank = m*N + rho (TorchRec
// DMPCollection's: a position's replicas share a host).
struct LayoutPlan {
  std::vector<std::string> sparse_order = {"shard", "mp", "dp"};
  int sparse_shard_group = 0;  // F as given; 0 = N (every replica of a position)
  int shard = 1, mp = 1, dp = 1;  // resolved sizes at the scenario's world size: F, M, N/F
  int mp_stride = 1;              // ranks between consecutive MP positions
};

struct Plan {
  DensePlan dense;
  SparsePlan sparse;
  LayoutPlan layout;
  CollectivesPlan collectives;
  MemoryPlan memory;
  PipelinePlan pipeline;
};

// ---- batches -----------------------------------------------------------------------------------

// The length law of one sequence of the model (batches.features[j] <-> model sequence j).
struct LengthLaw {
  enum class Kind { kHistogram, kLognormal, kZipf } kind = Kind::kLognormal;
  std::vector<std::pair<double, double>> bins;  // histogram: (length, weight)
  double mu = 0, sigma = 0;                     // lognormal: l = min(max, max(min, ceil(exp(mu + sigma z))))
  double s = 1.1;                               // zipf exponent
  int64_t min = 1, max = 1;
  double corr = 0;  // correlation of z across a sample's draws; 1 = one shared draw per sample
};

struct Assignment {
  std::string policy = "random";  // random | bbs | global | padded (alias none)
  int sub_batch = 128;
  int pool_factor = 8;            // G
  int64_t max_len = 0;            // padded: every sequence padded to its Lmax when 0
};

struct Batches {
  int64_t local_batch = 0;   // samples per rank per step (global_batch / world_size when given globally)
  std::vector<LengthLaw> features;
  Assignment assignment;
  int warmup_steps = 1;
  int measured_steps = 3;
  // Hot-id skew of the embedding ids: the Zipf exponent of each table's id popularity (an
  // unpublished assumption; 0 = every row equally popular). Row-split tables send their hottest
  // id's share to one position (model/sharding/placement.h). `id_zipf` by table name, else the default.
  double id_zipf_default = 0;
  std::map<std::string, double> id_zipf;
  // Pooling factor of each table's pooled features: ids per bag (1 = one id per pooled feature), by
  // table name, else the default. Sequence features read one id per token whatever it is.
  double pooling_default = 1;
  std::map<std::string, double> pooling;
  double PoolingOf(const std::string& table) const {
    const auto it = pooling.find(table);
    return it != pooling.end() ? it->second : pooling_default;
  }
};

// ---- noise -------------------------------------------------------------------------------------

struct Noise {
  double step_sigma = 0;            // per-rank per-step lognormal (mean 1)
  std::vector<int> slow_ranks;      // explicit ranks, or
  double slow_fraction = 0;         // a fraction of ranks chosen by the seed
  double slow_factor = 1;
  double collective_jitter_sigma = 0;
};

// An unpublished value the scenario assumes: reported, and swept low/high for sensitivity.
struct Assumption {
  std::string path;   // JSON path of the field, e.g. "cluster.zone_size" (paths[0])
  double value = 0;   // of `path`
  double low = 0;     // of `path` in the low case
  double high = 0;    // of `path` in the high case
  std::string note;
  std::string name;                // short label for reports, e.g. "zone size"
  std::vector<std::string> paths;  // every field it sets (e.g. both RoCE alphas); path == paths[0]
  // The low/high cases scale every path's value by these factors (absolute low/high: low/value,
  // NaN at a value of 0, where a single path takes low/high directly; reports write null).
  double low_factor = 1;
  double high_factor = 1;
};

struct Scenario {
  uint64_t seed = 0;
  std::shared_ptr<const model::ModelGraph> model;
  Cluster cluster;
  Plan plan;
  Batches batches;
  Noise noise;
  std::vector<Assumption> assumptions;
  std::string name;  // file stem, for reports
  std::vector<std::string> warnings;  // valid but doubtful inputs (e.g. an MP group spanning zones)
};

// Counterfactual switches of the loss attribution, applied cumulatively in this order.
struct Counterfactuals {
  bool ideal_network = false;    // collectives cost zero on the dependency path (SM-based still hold SMs)
  bool sm_free = false;          // kappa = 0
  bool perfect_balance = false;  // every rank does the mean work
  bool no_noise = false;
  bool no_recompute = false;
};

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_SCENARIO_SCENARIO_H_
