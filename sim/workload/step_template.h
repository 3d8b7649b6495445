// The per-step task DAG, built ONCE per scenario from model.json and the
// plan; every rank runs the same template and only durations and bytes differ, through the rank's
// BatchStats row (a StatAffine per task). Streams are in-order: a task starts when its
// dependencies are done and it heads its stream.
//
// Order inside a step:
//   [global balancing A2A] -> sparse forward ([V3 AG sparse-intra] -> ids A2A -> lookup -> [RW RS]
//   -> [TWRW RS in the host -> A2A across hosts] -> embeddings A2A) -> dense forward per region (FSDP AG prefetch_depth regions ahead; EP AG,
//   experts, EP RS) -> dense backward per region in reverse (AG if resharded, recompute, compute,
//   grads RS per bucket then replica AR) -> sparse backward (grads A2A, fused update, [V3 RS],
//   [V2 replica AR every sync_period]) -> optimizer.
// With plan.pipeline.sparse_ahead = 1 (TorchRec's semi-synchronous pipeline) the sparse forward is the
// next batch's and sits between the dense forward and backward; the dense forward waits for the
// previous step's.
// Compute tasks are coarsened to one per region segment (forward and backward) so that a step of
// thousands of ranks stays within the event budget; their time is the sum of their ops'.
#ifndef GEMTB_SIM_WORKLOAD_STEP_TEMPLATE_H_
#define GEMTB_SIM_WORKLOAD_STEP_TEMPLATE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/description/model_graph.h"
#include "model/sharding/comm_pattern.h"
#include "model/sharding/placement.h"
#include "sim/scenario/scenario.h"
#include "sim/workload/batch_stats.h"
#include "sim/workload/rank_groups.h"

namespace gemtb::sim {

// Streams of a rank: compute, one per group class, the copy engine.
inline constexpr int kComputeStream = 0;
inline constexpr int kCopyStream = 1 + kNumGroupClasses;
inline constexpr int kNumStreams = 2 + kNumGroupClasses;
inline int CommStream(GroupClass c) { return 1 + static_cast<int>(c); }
std::vector<std::string> StreamNames();

// Group layouts used by collectives: the seven classes plus the expert replica group (ranks with the
// same expert and expert-shard position), which reports as dense-replica.
inline constexpr int kExpertReplicaLayout = kNumGroupClasses;
inline constexpr int kNumLayouts = kNumGroupClasses + 1;
// Bytes per activation element on the wire (e_a): bf16, as the GPU trainer sends them.
inline constexpr double kWireBytesPerActivation = 2.0;

// An op whose efficiency depends on its token count (a curve with more than one point): its time is
// evaluated per rank instead of folded into the task's StatAffine.
struct CurveTerm {
  StatAffine flops;      // FLOPs (or bytes for memory-bound ops)
  StatAffine tokens;     // where the curve is read
  const Curve* curve = nullptr;
  double rate = 0;       // peak FLOP/s (or HBM B/s * e_mem); time = flops / (rate * curve(tokens))
};

struct TaskTemplate {
  std::string name;
  bool collective = false;
  int stream = kComputeStream;
  std::vector<int> deps;       // tasks of the same step
  std::vector<int> prev_deps;  // tasks of the previous step (none in step 0)
  // compute
  bool nonlayer = false;       // optimizer, lookups, sparse update: not layer compute
  StatAffine time;             // seconds at contention 1 and noise 1
  std::vector<CurveTerm> curve_terms;
  int recompute_region = -1;   // this backward task re-runs region's forward when it is checkpointed
  // collective
  GroupClass group_class = GroupClass::kDenseShard;
  int layout = 0;              // index into layouts
  CollectiveOp op = CollectiveOp::kAllGather;
  StatAffine bytes;            // S (nccl-tests' convention) for this rank
  bool a2av = false;           // lasts as long as its heaviest member needs
  int comm_site = -1;          // the sparse call site (model/sharding CommSite) of a sparse collective
  int period = 1;              // issued every `period` steps (sparse replica sync); else a no-op
};

// One sparse all-to-all call site over the whole MP group, table by table: each table's bytes for
// the group's average member and where its traffic goes (model/sharding/placement.h). The slowest
// member of the all-to-allv is the position that serves (ids) or sends (embeddings) the most.
struct SiteTraffic {
  CommSite site = CommSite::kIdsA2a;
  int positions = 1;                   // M
  std::vector<StatAffine> bytes;       // per table with traffic at this site
  std::vector<PositionShares> shares;  // the same tables' shares
};

// The ops of one region that share a recompute class (model.json `saved.recompute`): the unit the
// per_region policy checkpoints. Dropping a piece frees its ops' saved activations and costs their
// forward again in the region's backward, so cheap pieces (pointwise ops, norms) go before GEMMs
// and attention, as selective activation checkpointing does.
struct CheckpointPiece {
  int region = 0;
  model::RecomputeClass recompute = model::RecomputeClass::kNone;
  StatAffine fwd_time;              // constant-efficiency part of the pieces' forward
  std::vector<CurveTerm> fwd_curve_terms;
  StatAffine saved_bytes;           // saved activations (act_quant applied)
};

// A region's forward is the sum of its pieces'; its saved bytes are kept summed as well, so that a
// rank-step's total costs one evaluation per region, not one per piece.
struct RegionTemplate {
  std::string name;
  StatAffine saved_bytes;           // saved activations (act_quant applied): its pieces' sum
  int piece_begin = 0, piece_end = 0;  // its pieces in StepTemplate::pieces, one per recompute class present
};

struct StepTemplate {
  StatLayout layout;
  std::vector<TaskTemplate> tasks;
  std::vector<RegionTemplate> regions;
  std::vector<CheckpointPiece> pieces;                // every region's, region by region
  std::vector<std::vector<int>> stream_tasks;         // per stream, its tasks in issue order
  std::vector<std::vector<int>> dependents;           // same-step dependents of each task
  std::vector<std::vector<int>> next_step_dependents; // dependents in the next step
  std::vector<GroupLayout> layouts;                   // kNumLayouts, then TWRW's host and cross-host parts if used
  StatAffine model_flops;        // fwd + bwd model FLOPs of one rank-step (recompute excluded)
  StatAffine local_flops;        // Local MFU's FLOPs: every op of every layer (= model_flops)
  StatAffine local_time;         // every layer op alone at its own efficiency, plus the lookup
  std::vector<CurveTerm> local_curve_terms;
  double static_bytes = 0;       // per rank, max over ranks, without batch_static_bytes
  // Static bytes that follow the rank-step's batch: V3's gathered copy of the MP shard,
  // and with plan.pipeline.sparse_ahead = 1 the next batch's embeddings, resident through the step
  // (the rank-step's own batch statistics stand for the next batch's). Zero when neither applies.
  StatAffine batch_static_bytes;
  std::vector<SiteTraffic> a2a_traffic;  // the MP group's all-to-all sites, per table
  double peak_flops = 0;
};

// Builds the template. Errors name the field (plan.*, model.ops[i].*) and value.
absl::StatusOr<StepTemplate> BuildStepTemplate(const Scenario& scenario, const RankGroups& groups);

// Time of a compute task at one rank-step (contention and noise excluded).
double EvalTime(const StatAffine& time, const std::vector<CurveTerm>& curve_terms, absl::Span<const double> stats);

// Piecewise-linear curve value at x (clamped at the ends; 1 when empty).
double CurveAt(const Curve& curve, double x);

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_WORKLOAD_STEP_TEMPLATE_H_
