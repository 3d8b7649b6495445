// One MP group of a sharded run: M virtual ranks that shard every
// table with its 1D type, exchanging ids, embeddings and gradients through the virtual collectives.
// 1D sharding is one group of all ranks; 2D sharding runs N of them side by side.
//
// Per table (config order), the forward moves
//   DP          nothing: each rank looks up its own copy;
//   TW, CW      ids A2A(M) to the holders (kappa each), pooled A2A back (pi, pi/c per column shard);
//   RW          ids A2A(M) bucketed by row block (4B|F_t| + 8 nu_{r->s}), pooled RS(M) of M*pi;
//   TWRW, GRID  ids A2A(M) bucketed; per column shard: RS(g) of M*pi/c inside its host, then one A2A
//               per local index k over the ranks {h*g + k}, pi/c from the table's host to each;
// and sequence (NONE) rows A2A(M) from each holder straight back to the requester (sigma). The
// backward moves the gradients the reverse way (TW/CW A2A; RW AG(M) of pi; TWRW/GRID A2A per local
// index then AG(g); DP an AR(M) of the dense gradient N_t*D_t*4 and of a per-row touch count N_t*4,
// which decides the rows to update), and, for rowwise Adagrad on c > 1 column shards with
// cw_state=shared, an AG of the partial square sums (4U per shard) among each row block's holders.
// Every collective is one call per table (per column shard, per local index where said above); a
// table no KJT key uses moves nothing (its Adam products still advance).
// Across processes (Collectives::Holds) a process computes only for the members it holds; the
// collectives bring it what the other members computed.
// These are the collectives of model/sharding/comm_pattern.h's pattern; tests/sim/oracle_bytes checks
// that the communication report moves exactly its bytes.
// MEAN pooling divides by n on the requester: after the embeddings come back, and before its
// gradients leave (gamma / n), so holders only sum.
#ifndef GEMTB_REFERENCE_SHARDING_MP_GROUP_H_
#define GEMTB_REFERENCE_SHARDING_MP_GROUP_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/sharding/sharding_types.h"
#include "reference/collectives/collectives.h"
#include "reference/embedding/kjt.h"
#include "reference/embedding/tbe.h"
#include "reference/sharding/shard_layout.h"
#include "reference/sharding/shard_math.h"
#include "reference/sharding/table_ids.h"

namespace gemtb::reference {

// One virtual rank: its local batch, upstream gradients, output, and the shards it holds.
struct RankData {
  int rank = 0;
  KeyedJaggedTensor kjt;
  KjtLayout layout;
  EmbeddingGrads grads;            // local slice; unused in forward-only runs
  EmbeddingOutput output;          // local layout
  std::vector<ShardState> shards;  // indexed by GroupLayout shard; entries it does not hold stay empty
};

// What every group of the run shares.
struct GroupEnv {
  const EmbeddingConfig* config = nullptr;
  const ShardingPlanSpec* plan = nullptr;
  const GroupLayout* layout = nullptr;
  std::vector<TableFeatures> features;  // per table
  int64_t pooled_width = 0;
  int64_t local_batch = 0;
  bool weighted = false;
  // e_a: wire bytes per element of embeddings and their gradients (4 in the oracle). Optimizer
  // values (Adagrad partial sums, DP's dense gradient and touch counts) always count 4.
  int64_t activation_bytes = 4;
};

class MpGroup {
 public:
  // `members` in position order.
  MpGroup(const GroupEnv& env, std::vector<RankData*> members, Collectives* collectives);

  // Forward, first half: the ids all-to-all of every table.
  absl::Status ExchangeIds();
  // Forward, second half: lookups on the holders, embeddings back to the requesters, MEAN.
  absl::Status LookupAndReturn();
  // Backward: gradient exchange, G_r on the holders, fused optimizer at SR step `step`.
  absl::Status Backward(int64_t step);

  // Rows of group shard `shard` that this step reads or updates (ascending): those its holder's
  // received ids reference, or for a DP copy those of every member's ids. In-process only.
  std::vector<int64_t> NeededRows(int shard) const;

  // The forward's traffic of one table, kept for the backward.
  struct TableTraffic {
    std::vector<int> holders;                             // positions
    std::vector<std::vector<std::vector<int64_t>>> sent;  // [source][holder index]: KJT value indices
    std::vector<std::vector<TableIds>> received;          // [holder index][source]
  };
  // The last forward's traffic of every table, which its backward routes by; a runner with two
  // batches outstanding swaps it with the other batch's.
  std::vector<TableTraffic>& traffic() { return traffic_; }

 private:

  std::vector<int> Ranks(const std::vector<int>& positions) const;
  // Whether this process holds the member at `position` (every member, in one process).
  bool Mine(int position) const { return coll_->Holds(members_[position]->rank); }
  int HolderIndex(int table, int position) const;
  // Requester side.
  std::vector<float> PooledGrads(int position, int table) const;  // [B][num_pooled][D], MEAN divided
  std::vector<float> SequenceGrads(int position, int table, int holder, const Shard& shard) const;
  void PlacePooled(int position, int table, const Shard& shard, const float* values);
  // Returns the number of rows placed.
  int64_t PlaceSequence(int position, int table, int holder, const Shard& shard, const float* rows);
  void ApplyMean(int position);

  void ForwardDataParallel(int table);
  absl::Status ReturnPooledToRequesters(int table, std::vector<std::vector<std::vector<float>>>& pooled);
  absl::Status BackwardDataParallel(int table, int64_t step);
  absl::Status UpdateShards(int table, std::vector<RowGradients>& grads, int64_t step);

  const GroupEnv& env_;
  std::vector<RankData*> members_;
  Collectives* coll_;
  std::vector<TableTraffic> traffic_;
};

}  // namespace gemtb::reference

#endif  // GEMTB_REFERENCE_SHARDING_MP_GROUP_H_
