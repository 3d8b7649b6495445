// Per sharding type, the communication pattern of one training step: which collective, over which
// group, how many bytes. reference/ executes it (its communication report is tested against it:
// tests/sim/oracle_bytes), sim/ prices it (sim/workload/step_template.cc builds its sparse
// collectives from it).
//
// Bytes are S (nccl-tests' convention) for the average member of the group (A2A: what it sends to
// the others; AG: the gathered buffer; RS and AR: the buffer), affine in the table's per-rank
// traffic (B|F_t|, nu, kappa, pi, sigma, U). "Average" spreads a table over the MP group: the ids a
// rank sends leave it with probability (M-1)/M, a table-wise table's collectives load each position
// 1/M of the time. Summed over a group class, these averages are exact whenever every rank's ids
// are spread evenly over the row blocks and shard holders (the batch the oracle test draws).
#ifndef GEMTB_MODEL_SHARDING_COMM_PATTERN_H_
#define GEMTB_MODEL_SHARDING_COMM_PATTERN_H_

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "model/embedding/embedding_config.h"
#include "model/sharding/sharding_types.h"

namespace gemtb {

enum class Collective { kAllToAll, kAllGather, kReduceScatter, kAllReduce };
enum class CommPhase { kForward, kBackward, kSync };
// Which ranks a group holds: MP-group positions (sparse-mp), or the N replicas of one position:
// V2's weight sync (sparse-replica) and V3's gather and scatter (sparse-intra).
enum class CommGroupClass { kSparseMp, kSparseReplica, kSparseIntra };

// One collective call site of the step; the simulator issues one task per site and group shape.
enum class CommSite {
  kIdsA2a,            // fwd: ids (lengths and values) to the holders
  kPooledRs,          // fwd RW: pooled partial sums, RS(M) of M*pi
  kHostRs,            // fwd TWRW/GRID: RS(g) of M*pi/c inside the table's host
  kCrossHostA2a,      // fwd TWRW/GRID: A2A over the M/g positions of one host index
  kEmbA2a,            // fwd: embeddings (TW/CW pooled, every type's sequence rows) back
  kDpGradAr,          // bwd DP: AR(M) of the dense gradient and per-row touch counts
  kPooledGradAg,      // bwd RW: AG(M) of the pooled gradients
  kCrossHostGradA2a,  // bwd TWRW/GRID: gradients back across hosts
  kHostGradAg,        // bwd TWRW/GRID: AG(g) inside the host
  kEmbGradA2a,        // bwd: gradients of kEmbA2a's embeddings
  kColumnNormAg,      // bwd CW/GRID, rowwise Adagrad, cw_state=shared: AG of partial square sums, 4U
  kV3Gather,          // fwd V3: AG(N) of the MP shard (or its touched rows)
  kV3GatherBwd,       // bwd V3 without keep_gathered: the same gather again
  kV3Scatter,         // bwd V3: RS(N) of the updated copy
  kReplicaSync,       // sync V2: AR(N) of shard weights (and optimizer state); V3 with F < N: AR(N/F) of
                      // each rank's updated sub-block
};
inline constexpr int kNumCommSites = 15;
// "ids_a2a", "pooled_rs", "twrw_rs", "twrw_a2a", "emb_a2a", "dp_ar", "pooled_rs_grad",
// "twrw_a2a_grad", "twrw_ag_grad", "emb_a2a_grad", "cw_norm_ag", "v3_ag", "v3_ag_bwd", "v3_rs",
// "replica_sync" (the simulator's task names, after "sparse.").
const char* CommSiteName(CommSite site);
CommPhase CommSitePhase(CommSite site);
const char* CollectiveName(Collective op);  // all_to_all, all_gather, reduce_scatter, all_reduce

// The per-rank traffic of one table in one step that bytes are affine in.
enum class TrafficTerm {
  kOne,
  kBags,             // B|F_t|: bags of every feature reading the table (4-byte lengths)
  kIds,              // nu: ids (8 bytes each)
  kKjt,              // kappa = 4 B|F_t| + 8 nu: the rank's KJT bytes of the table
  kPooled,           // pi = B|F_pooled| D e_a: its pooled embeddings' bytes
  kSequence,         // sigma = nu_sequence D e_a: its sequence embeddings' bytes
  kMpUniqueRows,     // U: distinct rows of the table the rank's MP group looks up
  kShardTouchedRows, // V3 gather=touched: rows its MP position stores that some rank looks up (in
                     // full-width rows; a DP position's copy holds every such row)
};
inline constexpr int kNumTrafficTerms = 8;
using TableTraffic = std::array<double, kNumTrafficTerms>;  // indexed by TrafficTerm

struct CommBytes {
  std::array<double, kNumTrafficTerms> coef{};
  double& operator[](TrafficTerm t) { return coef[static_cast<int>(t)]; }
  double operator[](TrafficTerm t) const { return coef[static_cast<int>(t)]; }
  double Eval(const TableTraffic& traffic) const;
};

struct CommCall {
  CommSite site = CommSite::kIdsA2a;
  Collective op = Collective::kAllToAll;
  CommGroupClass group_class = CommGroupClass::kSparseMp;
  // Members: sparse-mp groups are `size` MP positions `stride` apart (a TWRW host: g consecutive
  // positions; its cross-host groups: M/g positions g apart; a table's column-shard holders: which
  // positions is the executor's placement, the average member's bytes do not depend on it);
  // replica-class groups are the N replicas of one position (V3's: its F replicas, and the N / F
  // copies of one sub-block).
  int size = 1;
  int stride = 1;
  CommBytes bytes;
};

// What the pattern needs of a table besides its sharding.
struct CommTable {
  int64_t rows = 0;
  int64_t dim = 0;
  double storage_bytes = 4;  // e_w
  OptimizerKind optimizer = OptimizerKind::kSgd;
};

// The plan's shape on the world: M, N, TWRW/GRID's host group g (MP positions per host) and V3's
// full-sharding group F (the replicas of a position that share its rows; 0 = all N). With F < N the
// N / F fully sharded copies are data parallel: each rank all-reduces its updated sub-block with
// the ranks holding the same sub-block in the other copies (sparse-replica) every sync_period steps.
struct CommWorld {
  int mp_group = 1;
  int replicas = 1;
  int host_positions = 1;
  int shard_group = 0;
};

// Every collective table `sharding` takes part in during one step of `plan` (the plan-level
// switches: fully_sharded, state_sync, cw_state, gather, keep_gathered). Calls over a group of one
// rank and calls of zero bytes are left out. The replica sync runs every plan.sync_period steps.
std::vector<CommCall> TableCommPattern(const TableSharding& sharding, const CommTable& table,
                                       const ShardingPlanSpec& plan, const CommWorld& world);

}  // namespace gemtb

#endif  // GEMTB_MODEL_SHARDING_COMM_PATTERN_H_
