// The job a `gemtb ref train` or `gemtb train` process runs in: one process, or one rank of a job
// started by torchrun, mpirun or srun (model/launch/launch_env.h). For several ranks it holds the
// rendezvous store (rank 0 serves it), checks that every rank was started with the same flags, gives
// the CPU trainer its data-parallel group and its sharded tables' collectives (the GPU trainer's
// NCCL groups rendezvous through the same store), and saves and loads the job's sharded checkpoint
// folder.
#ifndef GEMTB_TOOLS_GEMTB_TRAIN_JOB_H_
#define GEMTB_TOOLS_GEMTB_TRAIN_JOB_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/launch/launch_env.h"
#include "model/launch/tcp_store.h"
#include "reference/dist/sharded_checkpoint.h"
#include "reference/dist/store_collectives.h"
#include "reference/dist/store_group.h"
#include "reference/model/checkpoint.h"

namespace gemtb::cli {

class TrainJob {
 public:
  // Joins the job: for several ranks, connects to the store (rank 0 starts it) and compares
  // `fingerprint` (the flags) across ranks: FailedPrecondition naming the rank that differs.
  // `command` ("ref train", "train") names the command in Leave's error line.
  static absl::StatusOr<std::unique_ptr<TrainJob>> Join(const launch::LaunchInfo& info, launch::Millis timeout,
                                                        const std::string& fingerprint, const std::string& command);

  bool several() const { return store_ != nullptr; }
  int rank() const { return info_.rank; }
  int world_size() const { return info_.world_size; }
  // The rendezvous store (null for one process).
  launch::TcpStoreClient* store() { return store_.get(); }
  reference::dist::StoreDataParallelGroup* group() { return group_.get(); }
  // The sharded tables' collectives (null for one process).
  reference::dist::StoreCollectives* collectives() { return collectives_.get(); }

  // The job's checkpoint: rank r saves the state arrays i with i mod R = r, and `own` (what only
  // this rank holds: its table shards); every rank loads all.
  absl::Status Save(const std::string& dir, int64_t step, const reference::dist::CheckpointIdentity& identity,
                    const reference::model::NamedArrays& arrays, const reference::model::NamedArrays& own = {});
  absl::StatusOr<reference::model::NamedArrays> Load(const std::string& dir,
                                                     const reference::dist::CheckpointIdentity& identity);

  // The signal that stops the job after this step: this rank's `signal` (0: none) for one process;
  // for several, the first nonzero signal in rank order of all ranks', so every rank stops (and
  // saves) after the same step even when only some ranks received the signal.
  absl::StatusOr<int> AgreeOnStop(int signal);

  // Ends this rank's part: with exit code 0 a goodbye (rank 0 then waits for every rank to leave);
  // otherwise every other rank's waits end with this rank's error. Returns the exit code to use.
  int Leave(int exit_code, launch::Millis timeout);

 private:
  launch::LaunchInfo info_;
  std::string command_;
  std::unique_ptr<launch::TcpStoreServer> server_;
  std::unique_ptr<launch::TcpStoreClient> store_;
  std::unique_ptr<reference::dist::StoreDataParallelGroup> group_;
  std::unique_ptr<reference::dist::StoreCollectives> collectives_;
};

}  // namespace gemtb::cli

#endif  // GEMTB_TOOLS_GEMTB_TRAIN_JOB_H_
