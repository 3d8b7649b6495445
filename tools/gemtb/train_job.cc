#include "tools/gemtb/train_job.h"

#include <iostream>

#include "absl/strings/str_cat.h"
#include "model/common/sha256.h"

namespace gemtb::cli {

absl::StatusOr<std::unique_ptr<TrainJob>> TrainJob::Join(const launch::LaunchInfo& info, launch::Millis timeout,
                                                         const std::string& fingerprint, const std::string& command) {
  std::unique_ptr<TrainJob> job(new TrainJob());
  job->info_ = info;
  job->command_ = command;
  if (info.world_size == 1) return job;
  absl::StatusOr<launch::Rendezvous> where = launch::RequireRendezvous(info);
  if (!where.ok()) return where.status();
  if (info.rank == 0) {
    auto server = launch::TcpStoreServer::Start(where->port, info.world_size);
    if (!server.ok()) return server.status();
    job->server_ = *std::move(server);
  }
  auto store = launch::TcpStoreClient::Connect(*where, info.rank, info.world_size, timeout);
  if (!store.ok()) return store.status();
  job->store_ = *std::move(store);
  // Ranks compare a hash of their flags; the first that differs from rank 0's is named.
  auto all = launch::StoreAllGather(*job->store_, "start/flags", Sha256Hex(fingerprint));
  if (!all.ok()) return all.status();
  for (int r = 1; r < info.world_size; ++r)
    if ((*all)[r] != (*all)[0])
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", r, " was started with other flags than rank 0 (every rank must run the same command)"));
  job->group_ = std::make_unique<reference::dist::StoreDataParallelGroup>(*job->store_);
  job->collectives_ = std::make_unique<reference::dist::StoreCollectives>(*job->store_);
  return job;
}

absl::Status TrainJob::Save(const std::string& dir, int64_t step, const reference::dist::CheckpointIdentity& identity,
                            const reference::model::NamedArrays& arrays, const reference::model::NamedArrays& own) {
  reference::model::NamedArrays mine;
  for (size_t i = 0; i < arrays.size(); ++i)
    if (static_cast<int>(i % static_cast<size_t>(world_size())) == rank()) mine.push_back(arrays[i]);
  mine.insert(mine.end(), own.begin(), own.end());
  return reference::dist::WriteShardedCheckpoint(dir, step, identity, mine, *store_);
}

absl::StatusOr<reference::model::NamedArrays> TrainJob::Load(const std::string& dir,
                                                             const reference::dist::CheckpointIdentity& identity) {
  auto loaded = reference::dist::LoadWholeShardedCheckpoint(dir, identity, *store_);
  if (!loaded.ok()) return loaded.status();
  return std::move(loaded->arrays);
}

absl::StatusOr<int> TrainJob::AgreeOnStop(int signal) {
  if (!several()) return signal;
  auto all = group_->AllGather(std::to_string(signal));
  if (!all.ok()) return all.status();
  for (const std::string& s : *all)
    if (s != "0") return std::stoi(s);
  return 0;
}

int TrainJob::Leave(int exit_code, launch::Millis timeout) {
  if (!several()) return exit_code;
  if (exit_code != 0) {
    (void)store_->Fail(absl::StrCat("stopped with exit code ", exit_code));
    (void)store_->Close();
    if (server_) (void)server_->Shutdown(timeout);
    return exit_code;
  }
  absl::Status s = store_->Close();
  if (s.ok() && server_) s = server_->Shutdown(timeout);
  if (s.ok()) return exit_code;
  std::cerr << "gemtb " << command_ << ": error: rank " << rank() << ": " << s.message() << "\n";
  return 1;
}

}  // namespace gemtb::cli
