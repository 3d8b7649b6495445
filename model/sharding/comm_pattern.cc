#include "model/sharding/comm_pattern.h"

#include <algorithm>
#include <utility>

namespace gemtb {
namespace {

struct SiteInfo {
  CommSite site;
  const char* name;
  CommPhase phase;
};

constexpr std::array<SiteInfo, kNumCommSites> kSites = {{
    {CommSite::kIdsA2a, "ids_a2a", CommPhase::kForward},
    {CommSite::kPooledRs, "pooled_rs", CommPhase::kForward},
    {CommSite::kHostRs, "twrw_rs", CommPhase::kForward},
    {CommSite::kCrossHostA2a, "twrw_a2a", CommPhase::kForward},
    {CommSite::kEmbA2a, "emb_a2a", CommPhase::kForward},
    {CommSite::kDpGradAr, "dp_ar", CommPhase::kBackward},
    {CommSite::kPooledGradAg, "pooled_rs_grad", CommPhase::kBackward},
    {CommSite::kCrossHostGradA2a, "twrw_a2a_grad", CommPhase::kBackward},
    {CommSite::kHostGradAg, "twrw_ag_grad", CommPhase::kBackward},
    {CommSite::kEmbGradA2a, "emb_a2a_grad", CommPhase::kBackward},
    {CommSite::kColumnNormAg, "cw_norm_ag", CommPhase::kBackward},
    {CommSite::kV3Gather, "v3_ag", CommPhase::kForward},
    {CommSite::kV3GatherBwd, "v3_ag_bwd", CommPhase::kBackward},
    {CommSite::kV3Scatter, "v3_rs", CommPhase::kBackward},
    {CommSite::kReplicaSync, "replica_sync", CommPhase::kSync},
}};

const SiteInfo& InfoOf(CommSite site) {
  for (const SiteInfo& s : kSites) {
    if (s.site == site) return s;
  }
  return kSites[0];
}

// Collects one table's calls, dropping those over one rank or of no bytes.
class Calls {
 public:
  void Add(CommSite site, Collective op, CommGroupClass cls, int size, int stride, const CommBytes& bytes) {
    if (size <= 1) return;
    if (std::all_of(bytes.coef.begin(), bytes.coef.end(), [](double c) { return c == 0.0; })) return;
    out_.push_back(CommCall{site, op, cls, size, stride, bytes});
  }
  std::vector<CommCall> Take() { return std::move(out_); }

 private:
  std::vector<CommCall> out_;
};

CommBytes Term(TrafficTerm t, double coef) {
  CommBytes b;
  b[t] = coef;
  return b;
}

}  // namespace

const char* CommSiteName(CommSite site) { return InfoOf(site).name; }
CommPhase CommSitePhase(CommSite site) { return InfoOf(site).phase; }

const char* CollectiveName(Collective op) {
  switch (op) {
    case Collective::kAllToAll: return "all_to_all";
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllReduce: return "all_reduce";
  }
  return "?";
}

double CommBytes::Eval(const TableTraffic& traffic) const {
  double v = 0.0;
  for (int i = 0; i < kNumTrafficTerms; ++i) v += coef[i] * traffic[i];
  return v;
}

std::vector<CommCall> TableCommPattern(const TableSharding& sharding, const CommTable& table,
                                       const ShardingPlanSpec& plan, const CommWorld& world) {
  using T = TrafficTerm;
  const int M = world.mp_group, N = world.replicas, g = std::max(1, world.host_positions);
  const double D = static_cast<double>(table.dim);
  const double rows = static_cast<double>(table.rows);
  const double off = M > 1 ? static_cast<double>(M - 1) / M : 0.0;  // share of a uniform exchange off-rank
  const int hosts = M / g;
  const double off_x = hosts > 1 ? static_cast<double>(hosts - 1) / hosts : 0.0;
  const ShardingType type = sharding.type;
  const double c = HasColumnShards(type) ? std::max(1, sharding.shards) : 1;
  const bool dp = type == ShardingType::kDataParallel;
  constexpr auto kMp = CommGroupClass::kSparseMp;
  Calls calls;

  // Embeddings back to the requesters and their gradients the reverse way: TW and CW pooled (pi/c
  // from each of c shards), every non-DP type's sequence rows.
  CommBytes emb;
  if (type == ShardingType::kTableWise || type == ShardingType::kColumnWise) emb[T::kPooled] = off;
  if (!dp) emb[T::kSequence] = off;

  switch (type) {
    case ShardingType::kDataParallel:
      // The dense fp32 gradient and a per-row touch count (only rows some rank looked up update).
      calls.Add(CommSite::kDpGradAr, Collective::kAllReduce, kMp, M, 1, Term(T::kOne, rows * (D * 4.0 + 4.0)));
      break;
    case ShardingType::kTableWise:
    case ShardingType::kColumnWise: {
      // Once to each holder position: c column shards on min(c, M) positions.
      const double holders = std::min(c, static_cast<double>(M));
      calls.Add(CommSite::kIdsA2a, Collective::kAllToAll, kMp, M, 1, Term(T::kKjt, off * holders));
      break;
    }
    case ShardingType::kRowWise: {
      CommBytes ids;
      ids[T::kBags] = 4.0 * (M - 1);  // lengths to every row block
      ids[T::kIds] = 8.0 * off;
      calls.Add(CommSite::kIdsA2a, Collective::kAllToAll, kMp, M, 1, ids);
      calls.Add(CommSite::kPooledRs, Collective::kReduceScatter, kMp, M, 1, Term(T::kPooled, M));
      break;
    }
    case ShardingType::kTableRowWise:
    case ShardingType::kGrid: {
      // Ids to the g holders of each host holding a column shard, once per host (c shards on
      // min(c, M/g) hosts): lengths to each holder, each id to its row block's.
      const double shard_hosts = std::min(c, static_cast<double>(hosts));
      CommBytes ids;
      ids[T::kBags] = 4.0 * g * shard_hosts * off;
      ids[T::kIds] = 8.0 * shard_hosts * off;
      calls.Add(CommSite::kIdsA2a, Collective::kAllToAll, kMp, M, 1, ids);
      // The table's host reduce-scatters an M*pi buffer; the average rank holds the table on g of the
      // M positions, so it carries g*pi.
      calls.Add(CommSite::kHostRs, Collective::kReduceScatter, kMp, g, 1, Term(T::kPooled, g));
      calls.Add(CommSite::kCrossHostA2a, Collective::kAllToAll, kMp, hosts, g, Term(T::kPooled, off_x));
      break;
    }
  }
  calls.Add(CommSite::kEmbA2a, Collective::kAllToAll, kMp, M, 1, emb);

  // Backward, mirroring the forward's embedding exchanges.
  switch (type) {
    case ShardingType::kRowWise:
      calls.Add(CommSite::kPooledGradAg, Collective::kAllGather, kMp, M, 1, Term(T::kPooled, M));
      break;
    case ShardingType::kTableRowWise:
    case ShardingType::kGrid:
      calls.Add(CommSite::kCrossHostGradA2a, Collective::kAllToAll, kMp, hosts, g,
                Term(T::kPooled, off_x));
      calls.Add(CommSite::kHostGradAg, Collective::kAllGather, kMp, g, 1, Term(T::kPooled, g));
      break;
    default:
      break;
  }
  calls.Add(CommSite::kEmbGradA2a, Collective::kAllToAll, kMp, M, 1, emb);

  // Rowwise Adagrad on c > 1 column shards with shared state: per row block, the p distinct holders
  // of its column shards all-gather their partial square sums, c * 4U bytes in all (CW: p of the M
  // positions, consecutive; GRID: p of the M/g hosts, g positions apart); the average rank is in
  // such a group p/M of the time.
  if (HasColumnShards(type) && c > 1 && table.optimizer == OptimizerKind::kRowwiseAdagrad &&
      plan.cw_state == CwState::kShared) {
    const int holders = type == ShardingType::kGrid ? hosts : M;
    const int p = std::min(static_cast<int>(c), holders);
    calls.Add(CommSite::kColumnNormAg, Collective::kAllGather, kMp, p, type == ShardingType::kGrid ? g : 1,
              Term(T::kMpUniqueRows, c * 4.0 * p / M));
  }

  // The average position stores 1/M of the table, a DP position a whole copy.
  const double holders = dp ? 1.0 : static_cast<double>(M);
  const double e_w = table.storage_bytes;
  if (plan.fully_sharded) {
    // V3: AG(F) of the position's shards (gather=touched: only the rows some rank looks up), the
    // same again in the backward unless kept, RS(F) of the updated copy; F = N unless the layout
    // splits the replicas into N / F data-parallel copies, which all-reduce each rank's updated
    // sub-block (1/F of the copy) every sync_period steps.
    const int F = world.shard_group > 0 ? world.shard_group : N;
    const CommBytes gathered = plan.gather == GatherMode::kTouched ? Term(T::kShardTouchedRows, D * e_w)
                                                                  : Term(T::kOne, rows * D * e_w / holders);
    calls.Add(CommSite::kV3Gather, Collective::kAllGather, CommGroupClass::kSparseIntra, F, 1, gathered);
    if (!plan.keep_gathered) {
      calls.Add(CommSite::kV3GatherBwd, Collective::kAllGather, CommGroupClass::kSparseIntra, F, 1, gathered);
    }
    calls.Add(CommSite::kV3Scatter, Collective::kReduceScatter, CommGroupClass::kSparseIntra, F, 1, gathered);
    CommBytes sub_block = gathered;
    for (double& coef : sub_block.coef) coef /= F;
    calls.Add(CommSite::kReplicaSync, Collective::kAllReduce, CommGroupClass::kSparseReplica, N / F, 1, sub_block);
  } else {
    // V2: AR(N) of the weights and, with state_sync, the optimizer state: 4 bytes a row per
    // (column) shard for rowwise Adagrad, m and v (8 bytes an element) for Adam.
    double state = 0.0;
    if (plan.state_sync && table.optimizer == OptimizerKind::kRowwiseAdagrad) state = 4.0 * c;
    if (plan.state_sync && table.optimizer == OptimizerKind::kAdam) state = 8.0 * D;
    calls.Add(CommSite::kReplicaSync, Collective::kAllReduce, CommGroupClass::kSparseReplica, N, 1,
              Term(T::kOne, rows * (D * e_w + state) / holders));
  }
  return calls.Take();
}

}  // namespace gemtb
