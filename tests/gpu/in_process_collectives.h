// TrainerCollectives (gpu/train/trainer_collectives.h) for R virtual ranks in one process, every
// rank a GpuTrainer on its own host thread, all on the current GPU: the tests' way to run the
// trainer's job mode on one GPU (NCCL refuses two ranks on one device). Each collective waits for the
// rank's stream, meets the other ranks at a host barrier, and moves or sums their device arrays;
// sums are taken on the host in fp32 in rank (member) order, so results are deterministic and two
// layouts that add the same terms in the same order give the same bytes. The gathers, reduce-scatters
// and all-reduces write in the order of the stream they are given (the model's may be non-blocking).
#ifndef GEMTB_TESTS_GPU_IN_PROCESS_COLLECTIVES_H_
#define GEMTB_TESTS_GPU_IN_PROCESS_COLLECTIVES_H_

#include <atomic>
#include <barrier>
#include <cstdint>
#include <memory>
#include <vector>

#include "gpu/train/trainer_collectives.h"
#include "model/description/expert_params.h"
#include "tests/gpu/in_process_shard_exchange.h"

namespace gemtb::gpu::train::test {

// What the ranks of one virtual job share. expert_degree > 1: EP groups of that many consecutive
// ranks (expert_exchange), the experts' parameters sharded over expert_shard_group ranks
// (model/description/expert_params.h), fp32 sums in member order.
struct InProcessJob {
  InProcessJob(int world_size, int shard_group, int expert_degree = 1, int expert_shard_group = 1);
  int world_size, shard_group, expert_degree, expert_shard_group;
  std::atomic<int64_t> expert_collectives{0};  // the EP collectives every rank has run
  std::barrier<> barrier;
  std::vector<const void*> published;  // per rank, the pointer of the collective in progress
  gpu::test::InProcessShardGroup sparse;          // the sharded tables' MP group: the world
};

class InProcessCollectives : public TrainerCollectives {
 public:
  InProcessCollectives(InProcessJob& job, int rank)
      : job_(job), rank_(rank), sparse_(job.sparse, rank), experts_(this) {}
  ~InProcessCollectives() override;

  int rank() const override { return rank_; }
  int world_size() const override { return job_.world_size; }
  int shard_group_size() const override { return job_.shard_group; }
  absl::StatusOr<float*> ParamsBuffer(int64_t shard_count, int64_t tail = 0) override;
  absl::Status GatherParams(const float* shard, int64_t shard_count, cudaStream_t stream) override;
  absl::Status GatherParamRange(const float* shard, int64_t shard_count, int64_t first, int64_t count,
                                cudaStream_t stream) override;
  absl::Status GatherShards(const float* shard, float* full, int64_t shard_count, cudaStream_t stream) override;
  absl::Status ReduceScatterGrads(const float* full, float* shard, int64_t count, cudaStream_t stream) override;
  absl::Status ReduceScatterGradRange(const float* full, float* shard, int64_t shard_count, int64_t first,
                                      int64_t count, cudaStream_t stream) override;
  absl::Status AllReduceReplicas(float* shard, int64_t count, cudaStream_t stream) override;
  absl::Status AllGatherV(float* data, const std::vector<int64_t>& counts, const std::vector<int64_t>& offsets,
                          cudaStream_t stream) override;
  absl::Status AllReduceSum(double* data, int64_t count, cudaStream_t stream) override;
  absl::Status Synchronize(cudaStream_t stream, std::string_view what) override;
  embedding::ShardExchange* sparse_exchange() override { return &sparse_; }
  ExpertExchange* expert_exchange() override { return job_.expert_degree > 1 ? &experts_ : nullptr; }
  int expert_shard_group_size() const override { return job_.expert_degree > 1 ? job_.expert_shard_group : 1; }
  absl::Status GatherExpertShards(const float* shard, float* full, int64_t count, cudaStream_t stream) override;
  absl::Status ReduceScatterExpertGrads(const float* full, float* shard, int64_t count, cudaStream_t stream) override;
  absl::Status AllReduceExpertReplicas(float* shard, int64_t count, cudaStream_t stream) override;

 private:
  class Experts : public ExpertExchange {
   public:
    explicit Experts(InProcessCollectives* owner) : owner_(owner) {}
    int degree() const override { return owner_->job_.expert_degree; }
    int member() const override { return owner_->rank_ % owner_->job_.expert_degree; }
    absl::Status AllGather(const float* mine, float* all, int64_t count, cudaStream_t stream) override;
    absl::Status ReduceScatter(const float* all, float* mine, int64_t count, cudaStream_t stream) override;

   private:
    InProcessCollectives* owner_;
  };

  // Publishes `p`, waits for every rank's, and returns them (valid until the closing barrier).
  std::vector<const void*> Exchange(const void* p, cudaStream_t stream);
  // The collectives in `group` (ranks in member order), writing in `stream`'s order: every member's
  // `count` floats at `mine` into full + i * count for member i; member `member` receives the sum
  // over members of full[member * count, (member + 1) * count); every member's `count` floats
  // summed, in place.
  absl::Status GatherIn(const std::vector<int>& group, const float* mine, float* full, int64_t count,
                        cudaStream_t stream);
  absl::Status ReduceScatterIn(const std::vector<int>& group, int member, const float* full, float* mine,
                               int64_t count, cudaStream_t stream);
  absl::Status AllReduceIn(const std::vector<int>& group, float* data, int64_t count, cudaStream_t stream);
  // The ranks of this rank's shard group, replica group and EP group, in member order; its expert
  // shard and replica groups.
  std::vector<int> ShardGroup() const;
  std::vector<int> ReplicaGroup() const;
  std::vector<int> EpGroup() const;
  gemtb::model::ExpertGroups MyExpertGroups() const;
  // The sum in `ranks` order of every member's `count` floats at their published pointer + `offset`.
  absl::StatusOr<std::vector<float>> Sum(const std::vector<const void*>& all, const std::vector<int>& ranks,
                                         int64_t offset, int64_t count) const;

  InProcessJob& job_;
  int rank_;
  float* params_ = nullptr;
  gpu::test::InProcessShardExchange sparse_;
  Experts experts_;
};

}  // namespace gemtb::gpu::train::test

#endif  // GEMTB_TESTS_GPU_IN_PROCESS_COLLECTIVES_H_
