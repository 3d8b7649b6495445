// What a rank of a multi-GPU job gives the trainer (trainer.h): its place in the job and the
// collectives its step calls, in stream order on the stream given. The trainer does not know who
// carries them: gpu/comm's NCCL groups (with the copy-engine all-gather for the parameters where
// chosen), or anything else that keeps these contracts.
//
// Ranks form 2D FSDP groups of s = shard_group_size() ranks: shard group g is ranks [g s, (g + 1) s)
// (consecutive ranks: one host when s divides the GPUs per host), replica group q is ranks
// {q, q + s, q + 2 s, ...}. Member q of a shard group owns the q-th of s equal pieces of the flat
// parameter array (padded with zeros to a multiple of s). Under expert parallelism of degree D, EP
// group g is ranks [g D, (g + 1) D), each member running its share of the Wukong experts
// (gem_model.h's ExpertExchange); then the dense array holds the parameters that are no expert's,
// and the member's experts' parameters are a second array, sharded over the expert shard group and
// summed over its replicas (model/description/expert_params.h says which ranks).
#ifndef GEMTB_GPU_TRAIN_TRAINER_COLLECTIVES_H_
#define GEMTB_GPU_TRAIN_TRAINER_COLLECTIVES_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpu/embedding/shard_exchange.h"
#include "gpu/train/gem_model.h"

namespace gemtb::gpu::train {

// What member q of a shard group holds of values [first, first + count) of the whole array:
// [begin, end), empty when begin == end.
struct ParamPiece {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
inline ParamPiece ParamPieceOf(int q, int64_t shard_count, int64_t first, int64_t count) {
  const int64_t lo = std::max(first, q * shard_count), hi = std::min(first + count, (q + 1) * shard_count);
  return hi > lo ? ParamPiece{lo, hi} : ParamPiece{lo, lo};
}

// Every member's piece of [first, first + count) in a shard group of `s`: counts and offsets (into
// the whole array) per member, as the variable collectives take them.
inline void ParamPieces(int s, int64_t shard_count, int64_t first, int64_t count, std::vector<int64_t>* counts,
                        std::vector<int64_t>* offsets) {
  counts->resize(static_cast<size_t>(s));
  offsets->resize(static_cast<size_t>(s));
  for (int m = 0; m < s; ++m) {
    const ParamPiece p = ParamPieceOf(m, shard_count, first, count);
    (*counts)[static_cast<size_t>(m)] = p.size();
    (*offsets)[static_cast<size_t>(m)] = p.begin;
  }
}

class TrainerCollectives {
 public:
  virtual ~TrainerCollectives() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual int shard_group_size() const = 0;  // s, dividing world_size()

  // The buffer GatherParams fills: s * shard_count floats on this rank's GPU, owned by the
  // collectives (a copy-engine all-gather writes only into its registered window), then `tail`
  // floats more (the gathered experts' parameters under expert parallelism). Called once.
  virtual absl::StatusOr<float*> ParamsBuffer(int64_t shard_count, int64_t tail = 0) = 0;
  // In the shard group: every member's `shard` (shard_count floats) into ParamsBuffer, member q's at
  // q * shard_count.
  virtual absl::Status GatherParams(const float* shard, int64_t shard_count, cudaStream_t stream) = 0;
  // In the shard group: values [first, first + count) of the whole array into ParamsBuffer at
  // their places, each member sending what its shard holds of them (ParamPieceOf): one FSDP unit
  // gathered alone (the trainer's per-unit prefetch).
  virtual absl::Status GatherParamRange(const float* shard, int64_t shard_count, int64_t first, int64_t count,
                                        cudaStream_t stream) = 0;
  // In the shard group, into a buffer of the caller's (optimizer states for a checkpoint).
  virtual absl::Status GatherShards(const float* shard, float* full, int64_t shard_count, cudaStream_t stream) = 0;
  // In the shard group: member q receives the sum over members of full[q * count, (q + 1) * count).
  virtual absl::Status ReduceScatterGrads(const float* full, float* shard, int64_t count, cudaStream_t stream) = 0;
  // In the shard group: of values [first, first + count) of every member's `full` gradient, member q
  // receives the sum over members of its piece (ParamPieceOf) into its shard at the piece's place
  // (shard + piece.begin - q * shard_count): one FSDP unit's gradient reduce-scattered alone.
  virtual absl::Status ReduceScatterGradRange(const float* full, float* shard, int64_t shard_count, int64_t first,
                                              int64_t count, cudaStream_t stream) = 0;
  // In the replica group: `shard` becomes the sum of every replica's, in place.
  virtual absl::Status AllReduceReplicas(float* shard, int64_t count, cudaStream_t stream) = 0;
  // In the world, in place: rank r's counts[r] floats at data + offsets[r] reach every rank (each
  // vector has world_size() entries).
  virtual absl::Status AllGatherV(float* data, const std::vector<int64_t>& counts,
                                  const std::vector<int64_t>& offsets, cudaStream_t stream) = 0;
  // In the world, in place: the sum of every rank's `count` doubles.
  virtual absl::Status AllReduceSum(double* data, int64_t count, cudaStream_t stream) = 0;
  // Waits for `stream`'s work so far within the job's timeout: DeadlineExceeded / Unavailable naming
  // `what` when a rank is gone or stopped calling (the collectives are then unusable).
  virtual absl::Status Synchronize(cudaStream_t stream, std::string_view what) = 0;
  // The all-to-alls and gathers of sharded embedding tables (gpu/embedding/sharded_tbe.h) over the
  // world as one MP group (1D plans); null where these collectives carry none.
  virtual embedding::ShardExchange* sparse_exchange() { return nullptr; }
  // This rank's EP group, when the job runs the Wukong experts expert-parallel; null where every
  // rank runs every expert.
  virtual ExpertExchange* expert_exchange() { return nullptr; }
  // With an EP group: the experts' parameters' collectives. The expert shard group's S_E members
  // each hold a piece of their experts' array: every member's `shard` (count floats) into `full`,
  // member q's at q * count; member q receives the sum over members of full[q * count, (q + 1) *
  // count); the expert replica group's sum of `shard`, in place.
  virtual int expert_shard_group_size() const { return 1; }
  virtual absl::Status GatherExpertShards(const float* shard, float* full, int64_t count, cudaStream_t stream) {
    return absl::FailedPreconditionError("GatherExpertShards: these collectives run no expert parallelism");
  }
  virtual absl::Status ReduceScatterExpertGrads(const float* full, float* shard, int64_t count, cudaStream_t stream) {
    return absl::FailedPreconditionError("ReduceScatterExpertGrads: these collectives run no expert parallelism");
  }
  virtual absl::Status AllReduceExpertReplicas(float* shard, int64_t count, cudaStream_t stream) {
    return absl::FailedPreconditionError("AllReduceExpertReplicas: these collectives run no expert parallelism");
  }
};

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_TRAINER_COLLECTIVES_H_
