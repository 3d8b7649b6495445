// Sharded checkpoints of a job of R ranks: every rank writes its own shard, rank 0 writes the
// manifest last, after every rank has reported its shard written; a checkpoint without a manifest
// does not exist. The ranks coordinate through the rendezvous store (model/launch/tcp_store.h), so a
// rank killed at any moment ends every rank's write with the store's named error and leaves the
// previous checkpoint as the newest one with a manifest: still loadable.
//
// Layout of checkpoint folder DIR at step s:
//   DIR/step-<s>/rank-<r>.ckpt   rank r's arrays (reference/model/checkpoint.h's file format,
//                                written atomically: temp file, fsync, rename, fsync the folder)
//   DIR/step-<s>/manifest.json   written atomically by rank 0 once all R shards are on disk:
//     {"format": "gemtb sharded checkpoint", "version": 1, "step": s, "world_size": R,
//      "config_hash": "...", "plan_hash": "...",
//      "shards": [{"rank": r, "file": "rank-<r>.ckpt", "bytes": n, "sha256": "<hex>"}, ...]}
// After the manifest, rank 0 removes the folders of earlier steps. A reader takes the highest step
// whose folder has a manifest and checks every value above against the job it resumes.
#ifndef GEMTB_REFERENCE_DIST_SHARDED_CHECKPOINT_H_
#define GEMTB_REFERENCE_DIST_SHARDED_CHECKPOINT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/launch/tcp_store.h"
#include "reference/model/checkpoint.h"

namespace gemtb::reference::dist {

// What a checkpoint must match to be resumed by a job: the same world size, config and plan.
struct CheckpointIdentity {
  int world_size = 1;
  std::string config_hash;  // any text that changes when the config changes (e.g. a SHA-256)
  std::string plan_hash;
};

struct ShardedWriteOptions {
  model::CheckpointWriteOptions shard;     // failure injection for this rank's shard file (tests)
  model::CheckpointWriteOptions manifest;  // and for rank 0's manifest
};

// Collective: every rank of `store` calls it with its own arrays for the same step. OK on every
// rank once the manifest is on disk; otherwise every rank returns an error naming the rank and
// step that failed (or the store's error: a rank died, a timeout).
absl::Status WriteShardedCheckpoint(const std::string& dir, int64_t step, const CheckpointIdentity& identity,
                                    const model::NamedArrays& arrays, launch::TcpStoreClient& store,
                                    const ShardedWriteOptions& options = {});

// The same layout written by one process alone (world size 1, no store): the shard, then the
// manifest, then the earlier steps removed. For a trainer that holds its whole state in one process
// (`gemtb train`); ReadShardOfNewestCheckpoint(dir, identity, 0) reads it back.
absl::Status WriteOneProcessCheckpoint(const std::string& dir, int64_t step, const CheckpointIdentity& identity,
                                       const model::NamedArrays& arrays, const ShardedWriteOptions& options = {});

struct LoadedShard {
  int64_t step = 0;
  model::NamedArrays arrays;    // this rank's (LoadWholeShardedCheckpoint: every rank's)
  std::string manifest_sha256;  // of the manifest's bytes: which checkpoint this is
};

// This rank's shard of the newest checkpoint in `dir`: NotFound when there is none; FailedPrecondition
// when its world size, config or plan differ from `identity`; DataLoss when a file is damaged.
absl::StatusOr<LoadedShard> ReadShardOfNewestCheckpoint(const std::string& dir, const CheckpointIdentity& identity,
                                                        int rank);

// Collective: every rank reads its shard, then the ranks agree that they all resume the same
// checkpoint (step and manifest). Every rank returns the same error when one rank cannot read its
// shard or one rank found another checkpoint (a stale copy of the folder).
absl::StatusOr<LoadedShard> LoadShardedCheckpoint(const std::string& dir, const CheckpointIdentity& identity,
                                                  launch::TcpStoreClient& store);

// As LoadShardedCheckpoint, but every rank reads every rank's shard, the arrays concatenated in rank
// order: for state that every rank holds whole (data parallelism) and the ranks save in parts.
absl::StatusOr<LoadedShard> LoadWholeShardedCheckpoint(const std::string& dir, const CheckpointIdentity& identity,
                                                       launch::TcpStoreClient& store);

}  // namespace gemtb::reference::dist

#endif  // GEMTB_REFERENCE_DIST_SHARDED_CHECKPOINT_H_
