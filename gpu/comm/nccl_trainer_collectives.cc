// NcclTrainerCollectives: the trainer's collectives on NCCL groups (see nccl_trainer_collectives.h).
#include "gpu/comm/nccl_trainer_collectives.h"

#include <unistd.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/description/expert_params.h"

namespace gemtb::gpu::comm {

absl::StatusOr<std::unique_ptr<NcclTrainerCollectives>> NcclTrainerCollectives::Create(
    launch::TcpStoreClient& store, const TrainerCollectivesOptions& options) {
  const int R = store.world_size(), s = options.shard_group;
  if (s < 1 || R % s != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard_group: ", s, " does not divide the job's world size ", R));
  }
  const int D = options.expert_degree;
  if (D < 1 || R % D != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert_degree: ", D, " does not divide the job's world size ", R));
  }
  if (D > 1) {
    if (absl::Status v = gemtb::model::CheckExpertShardGroup(R, D, options.expert_shard_group, "expert_shard_group");
        !v.ok())
      return v;
    if (options.param_gather == ParamGather::kCopyEngine)
      return absl::InvalidArgumentError(
          "param_gather: copy_engine does not run with expert parallelism (its window holds the dense parameters "
          "only; the experts' are gathered by NCCL)");
  }
  auto c = std::unique_ptr<NcclTrainerCollectives>(new NcclTrainerCollectives());
  c->store_ = &store;
  c->options_ = options;
  absl::StatusOr<std::unique_ptr<NcclGroup>> world = NcclGroup::Create(store, "world", options.timeout);
  if (!world.ok()) return world.status();
  c->world_ = *std::move(world);
  const int r = store.rank(), g = r / s, q = r % s;
  absl::StatusOr<std::unique_ptr<NcclGroup>> shard = c->world_->Split(g, q, absl::StrCat("shard", g));
  if (!shard.ok()) return shard.status();
  c->shard_ = *std::move(shard);
  absl::StatusOr<std::unique_ptr<NcclGroup>> replica = c->world_->Split(q, g, absl::StrCat("replica", q));
  if (!replica.ok()) return replica.status();
  c->replica_ = *std::move(replica);
  if (D > 1) {
    absl::StatusOr<std::unique_ptr<NcclGroup>> expert = c->world_->Split(r / D, r % D, absl::StrCat("expert", r / D));
    if (!expert.ok()) return expert.status();
    c->expert_ = *std::move(expert);
    // The experts' groups of expert_params.h: each split by its first rank, members in rank order.
    const gemtb::model::ExpertGroups groups = gemtb::model::ExpertGroupsOf(r, R, D, options.expert_shard_group);
    absl::StatusOr<std::unique_ptr<NcclGroup>> eshard = c->world_->Split(
        groups.shard.front(), groups.shard_member, absl::StrCat("expert_shard", groups.shard.front()));
    if (!eshard.ok()) return eshard.status();
    c->expert_shard_ = *std::move(eshard);
    absl::StatusOr<std::unique_ptr<NcclGroup>> ereplica =
        c->world_->Split(groups.replica.front(), r, absl::StrCat("expert_replica", groups.replica.front()));
    if (!ereplica.ok()) return ereplica.status();
    c->expert_replica_ = *std::move(ereplica);
  }
  if (options.param_gather == ParamGather::kCopyEngine) {
    // CUDA IPC reaches GPUs of this host only: every member of the shard group must be here.
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    absl::StatusOr<std::vector<std::string>> hosts = launch::StoreAllGather(store, "trainer/hosts", host);
    if (!hosts.ok()) return hosts.status();
    for (int k = g * s; k < (g + 1) * s; ++k) {
      if ((*hosts)[k] != (*hosts)[g * s]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "param_gather: copy_engine needs each shard group on one host; shard group ", g, " has rank ", g * s,
            " on ", (*hosts)[g * s], " and rank ", k, " on ", (*hosts)[k]));
      }
    }
  }
  return c;
}

NcclTrainerCollectives::~NcclTrainerCollectives() {
  if (copy_engine_ == nullptr && params_ != nullptr) cudaFree(params_);
}

absl::StatusOr<float*> NcclTrainerCollectives::ParamsBuffer(int64_t shard_count, int64_t tail) {
  if (params_ != nullptr) return absl::FailedPreconditionError("ParamsBuffer: called twice");
  if (shard_count < 1) return absl::InvalidArgumentError(absl::StrCat("shard_count: ", shard_count, " must be >= 1"));
  if (tail < 0 || (tail > 0 && options_.param_gather == ParamGather::kCopyEngine))
    return absl::InvalidArgumentError(absl::StrCat("tail: ", tail, " (none past a copy-engine window)"));
  shard_count_ = shard_count;
  const int s = options_.shard_group;
  if (options_.param_gather == ParamGather::kCopyEngine) {
    std::vector<int> members;
    const int g = rank() / s;
    for (int k = g * s; k < (g + 1) * s; ++k) members.push_back(k);
    absl::StatusOr<std::unique_ptr<CopyEngineAllGather>> ce = CopyEngineAllGather::CreateAcrossProcesses(
        *store_, absl::StrCat("trainer/params_ce", g), members, shard_count * static_cast<int64_t>(sizeof(float)));
    if (!ce.ok()) return ce.status();
    copy_engine_ = *std::move(ce);
    params_ = static_cast<float*>(copy_engine_->window());
    return params_;
  }
  void* p = nullptr;
  if (cudaError_t e = cudaMalloc(&p, static_cast<size_t>(shard_count * s + tail) * sizeof(float)); e != cudaSuccess) {
    return absl::ResourceExhaustedError(absl::StrCat("the gathered parameters (", shard_count * s + tail,
                                                     " floats): ", cudaGetErrorString(e)));
  }
  params_ = static_cast<float*>(p);
  return params_;
}

absl::Status NcclTrainerCollectives::GatherParams(const float* shard, int64_t shard_count, cudaStream_t stream) {
  if (params_ == nullptr || shard_count != shard_count_) {
    return absl::FailedPreconditionError(absl::StrCat("GatherParams: shard_count ", shard_count,
                                                      " is not ParamsBuffer's ", shard_count_));
  }
  if (copy_engine_ != nullptr) {
    return copy_engine_->AllGather(shard, shard_count * static_cast<int64_t>(sizeof(float)), stream);
  }
  return shard_->AllGather(shard, params_, shard_count, Dtype::kFp32, stream);
}

absl::Status NcclTrainerCollectives::GatherParamRange(const float* shard, int64_t shard_count, int64_t first,
                                                      int64_t count, cudaStream_t stream) {
  if (params_ == nullptr || shard_count != shard_count_) {
    return absl::FailedPreconditionError(absl::StrCat("GatherParamRange: shard_count ", shard_count,
                                                      " is not ParamsBuffer's ", shard_count_));
  }
  const int s = options_.shard_group, q = rank() % s;
  if (first < 0 || count < 0 || first + count > shard_count * s) {
    return absl::InvalidArgumentError(absl::StrCat("GatherParamRange: [", first, ", ", first + count,
                                                   ") is not inside the ", shard_count * s, " gathered values"));
  }
  const train::ParamPiece mine = train::ParamPieceOf(q, shard_count, first, count);
  if (copy_engine_ != nullptr) {
    return copy_engine_->AllGatherPieces(shard + (mine.begin - q * shard_count),
                                         mine.begin * static_cast<int64_t>(sizeof(float)),
                                         mine.size() * static_cast<int64_t>(sizeof(float)), stream);
  }
  // NCCL's variable all-gather is in place: the own piece first goes to its place.
  if (mine.size() > 0) {
    if (cudaError_t e = cudaMemcpyAsync(params_ + mine.begin, shard + (mine.begin - q * shard_count),
                                        static_cast<size_t>(mine.size()) * sizeof(float), cudaMemcpyDeviceToDevice,
                                        stream);
        e != cudaSuccess) {
      return absl::InternalError(absl::StrCat("GatherParamRange's own piece: ", cudaGetErrorString(e)));
    }
  }
  std::vector<int64_t> counts, offsets;
  train::ParamPieces(s, shard_count, first, count, &counts, &offsets);
  return shard_->AllGatherV(params_, counts, offsets, Dtype::kFp32, stream);
}

absl::Status NcclTrainerCollectives::GatherShards(const float* shard, float* full, int64_t shard_count,
                                                  cudaStream_t stream) {
  return shard_->AllGather(shard, full, shard_count, Dtype::kFp32, stream);
}

absl::Status NcclTrainerCollectives::ReduceScatterGrads(const float* full, float* shard, int64_t count,
                                                        cudaStream_t stream) {
  return shard_->ReduceScatter(full, shard, count, Dtype::kFp32, ReduceOp::kSum, stream);
}

absl::Status NcclTrainerCollectives::ReduceScatterGradRange(const float* full, float* shard, int64_t shard_count,
                                                            int64_t first, int64_t count, cudaStream_t stream) {
  const int s = options_.shard_group, q = rank() % s;
  if (shard_count < 1 || first < 0 || count < 0 || first + count > shard_count * s) {
    return absl::InvalidArgumentError(absl::StrCat("ReduceScatterGradRange: [", first, ", ", first + count,
                                                   ") is not inside ", s, " shards of ", shard_count));
  }
  std::vector<int64_t> counts, offsets;
  train::ParamPieces(s, shard_count, first, count, &counts, &offsets);
  const train::ParamPiece mine = train::ParamPieceOf(q, shard_count, first, count);
  return shard_->ReduceScatterV(full, shard + (mine.begin - q * shard_count), counts, offsets, Dtype::kFp32,
                                ReduceOp::kSum, stream);
}

absl::Status NcclTrainerCollectives::AllReduceReplicas(float* shard, int64_t count, cudaStream_t stream) {
  if (replica_->size() == 1) return absl::OkStatus();
  return replica_->AllReduce(shard, shard, count, Dtype::kFp32, ReduceOp::kSum, stream);
}

absl::Status NcclTrainerCollectives::AllGatherV(float* data, const std::vector<int64_t>& counts,
                                                const std::vector<int64_t>& offsets, cudaStream_t stream) {
  return world_->AllGatherV(data, counts, offsets, Dtype::kFp32, stream);
}

absl::Status NcclTrainerCollectives::AllReduceSum(double* data, int64_t count, cudaStream_t stream) {
  return world_->AllReduce(data, data, count, Dtype::kFp64, ReduceOp::kSum, stream);
}

absl::Status NcclTrainerCollectives::GatherExpertShards(const float* shard, float* full, int64_t count,
                                                        cudaStream_t stream) {
  if (!expert_shard_) return train::TrainerCollectives::GatherExpertShards(shard, full, count, stream);
  return expert_shard_->AllGather(shard, full, count, Dtype::kFp32, stream);
}

absl::Status NcclTrainerCollectives::ReduceScatterExpertGrads(const float* full, float* shard, int64_t count,
                                                              cudaStream_t stream) {
  if (!expert_shard_) return train::TrainerCollectives::ReduceScatterExpertGrads(full, shard, count, stream);
  return expert_shard_->ReduceScatter(full, shard, count, Dtype::kFp32, ReduceOp::kSum, stream);
}

absl::Status NcclTrainerCollectives::AllReduceExpertReplicas(float* shard, int64_t count, cudaStream_t stream) {
  if (!expert_replica_) return train::TrainerCollectives::AllReduceExpertReplicas(shard, count, stream);
  return expert_replica_->AllReduce(shard, shard, count, Dtype::kFp32, ReduceOp::kSum, stream);
}

void NcclTrainerCollectives::AbortAll() {
  for (NcclGroup* g : {world_.get(), shard_.get(), replica_.get(), expert_.get(), expert_shard_.get(),
                       expert_replica_.get()}) {
    if (g != nullptr) g->Abort();
  }
}

absl::Status NcclTrainerCollectives::Synchronize(cudaStream_t stream, std::string_view what) {
  // One event covers every group's work on the stream; the world group's wait bounds it, and a
  // failure aborts every group (a rank gone leaves none of them usable).
  // The store is asked along the way: a rank that died ends the wait at once, not at the timeout.
  absl::Status s = world_->Synchronize(stream, what, [this] { return store_->JobStatus(); });
  if (!s.ok()) {
    shard_->Abort();
    replica_->Abort();
    for (NcclGroup* g : {expert_.get(), expert_shard_.get(), expert_replica_.get()})
      if (g != nullptr) g->Abort();
  }
  return s;
}

}  // namespace gemtb::gpu::comm
