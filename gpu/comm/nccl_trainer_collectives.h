// The trainer's collectives (gpu/train/trainer_collectives.h) on NCCL: a world group over the job's
// TCP store, split into the 2D FSDP shard groups (consecutive ranks) and replica groups, and, under
// expert parallelism, into EP groups (consecutive ranks, on NVLink where D divides a host). The
// parameters' all-gather in the shard group runs on NCCL or, where chosen, on the copy engines
// (copy_engine_all_gather.h), which needs the shard group's ranks on one host.
#ifndef GEMTB_GPU_COMM_NCCL_TRAINER_COLLECTIVES_H_
#define GEMTB_GPU_COMM_NCCL_TRAINER_COLLECTIVES_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "gpu/comm/copy_engine_all_gather.h"
#include "gpu/comm/nccl_group.h"
#include "gpu/train/trainer_collectives.h"
#include "model/launch/tcp_store.h"

namespace gemtb::gpu::comm {

// Who moves the parameters' all-gather: NCCL's kernels, or the copy engines (no SM).
enum class ParamGather { kNccl, kCopyEngine };

struct TrainerCollectivesOptions {
  int shard_group = 1;  // s: ranks sharing one copy of the dense parameters; divides the world size
  int expert_degree = 1;  // D: ranks of an EP group (1: every rank runs every Wukong expert); divides the world size
  int expert_shard_group = 1;  // S_E: ranks that run the same experts and shard their parameters; divides R / D
  ParamGather param_gather = ParamGather::kNccl;
  launch::Millis timeout{300000};  // every wait of a collective
};

class NcclTrainerCollectives : public train::TrainerCollectives {
 public:
  // Every rank calls it with its GPU current and the same options. InvalidArgument naming the option
  // when s does not divide the world, or (copy_engine) when a shard group spans hosts (naming them).
  static absl::StatusOr<std::unique_ptr<NcclTrainerCollectives>> Create(launch::TcpStoreClient& store,
                                                                         const TrainerCollectivesOptions& options);
  ~NcclTrainerCollectives() override;

  int rank() const override { return world_->rank(); }
  int world_size() const override { return world_->size(); }
  int shard_group_size() const override { return options_.shard_group; }
  absl::StatusOr<float*> ParamsBuffer(int64_t shard_count, int64_t tail = 0) override;
  absl::Status GatherParams(const float* shard, int64_t shard_count, cudaStream_t stream) override;
  absl::Status GatherParamRange(const float* shard, int64_t shard_count, int64_t first, int64_t count,
                                cudaStream_t stream) override;
  absl::Status ReduceScatterGradRange(const float* full, float* shard, int64_t shard_count, int64_t first,
                                      int64_t count, cudaStream_t stream) override;
  absl::Status GatherShards(const float* shard, float* full, int64_t shard_count, cudaStream_t stream) override;
  absl::Status ReduceScatterGrads(const float* full, float* shard, int64_t count, cudaStream_t stream) override;
  absl::Status AllReduceReplicas(float* shard, int64_t count, cudaStream_t stream) override;
  absl::Status AllGatherV(float* data, const std::vector<int64_t>& counts, const std::vector<int64_t>& offsets,
                          cudaStream_t stream) override;
  absl::Status AllReduceSum(double* data, int64_t count, cudaStream_t stream) override;
  absl::Status Synchronize(cudaStream_t stream, std::string_view what) override;
  embedding::ShardExchange* sparse_exchange() override { return &sparse_; }
  train::ExpertExchange* expert_exchange() override { return expert_ ? &experts_ : nullptr; }
  int expert_shard_group_size() const override { return expert_ ? options_.expert_shard_group : 1; }
  absl::Status GatherExpertShards(const float* shard, float* full, int64_t count, cudaStream_t stream) override;
  absl::Status ReduceScatterExpertGrads(const float* full, float* shard, int64_t count, cudaStream_t stream) override;
  absl::Status AllReduceExpertReplicas(float* shard, int64_t count, cudaStream_t stream) override;
  // Aborts every group now: what a rank that stops on an error does, so that its exit does not wait
  // for the other ranks (destroying a healthy group waits until every rank has finished with it).
  void AbortAll();

 private:
  NcclTrainerCollectives() : sparse_(this), experts_(this) {}

  // The EP group's all-gather and reduce-scatter, fp32 sums.
  class ExpertGroup : public train::ExpertExchange {
   public:
    explicit ExpertGroup(NcclTrainerCollectives* owner) : owner_(owner) {}
    int degree() const override { return owner_->expert_->size(); }
    int member() const override { return owner_->expert_->rank(); }
    absl::Status AllGather(const float* mine, float* all, int64_t count, cudaStream_t stream) override {
      return owner_->expert_->AllGather(mine, all, count, Dtype::kFp32, stream);
    }
    absl::Status ReduceScatter(const float* all, float* mine, int64_t count, cudaStream_t stream) override {
      return owner_->expert_->ReduceScatter(all, mine, count, Dtype::kFp32, ReduceOp::kSum, stream);
    }

   private:
    NcclTrainerCollectives* owner_;
  };

  // The sparse tables' exchange on the world group, its waits those of Synchronize.
  class WorldExchange : public embedding::ShardExchange {
   public:
    explicit WorldExchange(NcclTrainerCollectives* owner) : owner_(owner) {}
    int rank() const override { return owner_->world_->rank(); }
    int world_size() const override { return owner_->world_->size(); }
    absl::Status AllToAllV(const std::vector<int>& ranks, const void* send, const std::vector<int64_t>& send_counts,
                           const std::vector<int64_t>& send_offsets, void* recv, const std::vector<int64_t>& recv_counts,
                           const std::vector<int64_t>& recv_offsets, CUstream_st* stream) override {
      return owner_->world_->AllToAllV(ranks, send, send_counts, send_offsets, recv, recv_counts, recv_offsets, stream);
    }
    absl::Status AllGatherAmong(const std::vector<int>& ranks, const void* in, int64_t bytes, void* out,
                                CUstream_st* stream) override {
      return owner_->world_->AllGatherAmong(ranks, in, bytes, out, stream);
    }
    absl::Status Synchronize(CUstream_st* stream, std::string_view what) override {
      return owner_->Synchronize(stream, what);
    }

   private:
    NcclTrainerCollectives* owner_;
  };

  launch::TcpStoreClient* store_ = nullptr;
  TrainerCollectivesOptions options_;
  // expert_ (the EP group), expert_shard_, expert_replica_: null without expert parallelism.
  std::unique_ptr<NcclGroup> world_, shard_, replica_, expert_, expert_shard_, expert_replica_;
  std::unique_ptr<CopyEngineAllGather> copy_engine_;
  float* params_ = nullptr;  // NCCL gather: owned; copy engine: its window
  int64_t shard_count_ = 0;
  WorldExchange sparse_;
  ExpertGroup experts_;
};

}  // namespace gemtb::gpu::comm

#endif  // GEMTB_GPU_COMM_NCCL_TRAINER_COLLECTIVES_H_
