#include "tests/gpu/in_process_collectives.h"

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "gpu/common/device_buffer.h"
#include "model/description/expert_params.h"

namespace gemtb::gpu::train::test {
namespace {

using gpu::CudaOk;

#define IPC_RETURN_IF_ERROR(expr)                      \
  do {                                                 \
    if (absl::Status s_ = (expr); !s_.ok()) return s_; \
  } while (false)

// `values` into `dst` in `stream`'s order (the caller's later work on a non-blocking stream must not
// pass it), done before returning.
absl::Status WriteOn(cudaStream_t stream, float* dst, const std::vector<float>& values, const char* what) {
  IPC_RETURN_IF_ERROR(
      CudaOk(cudaMemcpyAsync(dst, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice, stream), what));
  return CudaOk(cudaStreamSynchronize(stream), what);
}

}  // namespace

InProcessJob::InProcessJob(int world_size_in, int shard_group_in, int expert_degree_in, int expert_shard_group_in)
    : world_size(world_size_in),
      shard_group(shard_group_in),
      expert_degree(expert_degree_in),
      expert_shard_group(expert_shard_group_in),
      barrier(world_size_in),
      published(world_size_in),
      sparse(world_size_in) {}

InProcessCollectives::~InProcessCollectives() {
  if (params_ != nullptr) cudaFree(params_);
}

std::vector<const void*> InProcessCollectives::Exchange(const void* p, cudaStream_t stream) {
  cudaStreamSynchronize(stream);
  cudaDeviceSynchronize();  // every rank's earlier work, whatever stream it used
  job_.barrier.arrive_and_wait();  // the previous collective's readers are done
  job_.published[rank_] = p;
  job_.barrier.arrive_and_wait();
  return job_.published;
}

std::vector<int> InProcessCollectives::ShardGroup() const {
  const int s = job_.shard_group, g = rank_ / s;
  std::vector<int> ranks;
  for (int k = g * s; k < (g + 1) * s; ++k) ranks.push_back(k);
  return ranks;
}

std::vector<int> InProcessCollectives::ReplicaGroup() const {
  std::vector<int> ranks;
  for (int k = rank_ % job_.shard_group; k < job_.world_size; k += job_.shard_group) ranks.push_back(k);
  return ranks;
}

absl::StatusOr<std::vector<float>> InProcessCollectives::Sum(const std::vector<const void*>& all,
                                                             const std::vector<int>& ranks, int64_t offset,
                                                             int64_t count) const {
  std::vector<float> sum(static_cast<size_t>(count), 0.0f), part(static_cast<size_t>(count));
  for (size_t i = 0; i < ranks.size(); ++i) {
    const float* src = static_cast<const float*>(all[ranks[i]]) + offset;
    IPC_RETURN_IF_ERROR(CudaOk(cudaMemcpy(part.data(), src, count * sizeof(float), cudaMemcpyDeviceToHost), "sum read"));
    for (int64_t k = 0; k < count; ++k) sum[k] = i == 0 ? part[k] : sum[k] + part[k];
  }
  return sum;
}

absl::Status InProcessCollectives::GatherIn(const std::vector<int>& group, const float* mine, float* full,
                                            int64_t count, cudaStream_t stream) {
  const std::vector<const void*> all = Exchange(mine, stream);
  absl::Status status;
  for (size_t i = 0; i < group.size() && status.ok(); ++i)
    status = CudaOk(cudaMemcpyAsync(full + i * count, all[group[i]], count * sizeof(float), cudaMemcpyDeviceToDevice,
                                    stream),
                    "gather");
  if (status.ok()) status = CudaOk(cudaStreamSynchronize(stream), "gather");
  job_.barrier.arrive_and_wait();  // every member has read every input
  return status;
}

absl::Status InProcessCollectives::ReduceScatterIn(const std::vector<int>& group, int member, const float* full,
                                                   float* mine, int64_t count, cudaStream_t stream) {
  const std::vector<const void*> all = Exchange(full, stream);
  absl::StatusOr<std::vector<float>> sum = Sum(all, group, member * count, count);
  job_.barrier.arrive_and_wait();  // every member has read every input
  if (!sum.ok()) return sum.status();
  return WriteOn(stream, mine, *sum, "reduce-scatter write");
}

absl::Status InProcessCollectives::AllReduceIn(const std::vector<int>& group, float* data, int64_t count,
                                               cudaStream_t stream) {
  const std::vector<const void*> all = Exchange(data, stream);
  absl::StatusOr<std::vector<float>> sum = Sum(all, group, 0, count);
  job_.barrier.arrive_and_wait();  // every member has read every input before any is overwritten
  if (!sum.ok()) return sum.status();
  return WriteOn(stream, data, *sum, "all-reduce write");
}

std::vector<int> InProcessCollectives::EpGroup() const {
  const int D = job_.expert_degree, g = rank_ / D;
  std::vector<int> ranks;
  for (int k = g * D; k < (g + 1) * D; ++k) ranks.push_back(k);
  return ranks;
}

gemtb::model::ExpertGroups InProcessCollectives::MyExpertGroups() const {
  return gemtb::model::ExpertGroupsOf(rank_, job_.world_size, job_.expert_degree, job_.expert_shard_group);
}

absl::Status InProcessCollectives::Experts::AllGather(const float* mine, float* all, int64_t count,
                                                      cudaStream_t stream) {
  ++owner_->job_.expert_collectives;
  return owner_->GatherIn(owner_->EpGroup(), mine, all, count, stream);
}

absl::Status InProcessCollectives::Experts::ReduceScatter(const float* all, float* mine, int64_t count,
                                                          cudaStream_t stream) {
  ++owner_->job_.expert_collectives;
  return owner_->ReduceScatterIn(owner_->EpGroup(), member(), all, mine, count, stream);
}

absl::Status InProcessCollectives::GatherExpertShards(const float* shard, float* full, int64_t count,
                                                     cudaStream_t stream) {
  return GatherIn(MyExpertGroups().shard, shard, full, count, stream);
}

absl::Status InProcessCollectives::ReduceScatterExpertGrads(const float* full, float* shard, int64_t count,
                                                           cudaStream_t stream) {
  const gemtb::model::ExpertGroups groups = MyExpertGroups();
  return ReduceScatterIn(groups.shard, groups.shard_member, full, shard, count, stream);
}

absl::Status InProcessCollectives::AllReduceExpertReplicas(float* shard, int64_t count, cudaStream_t stream) {
  return AllReduceIn(MyExpertGroups().replica, shard, count, stream);
}

absl::StatusOr<float*> InProcessCollectives::ParamsBuffer(int64_t shard_count, int64_t tail) {
  void* p = nullptr;
  IPC_RETURN_IF_ERROR(
      CudaOk(cudaMalloc(&p, (shard_count * job_.shard_group + tail) * sizeof(float)), "params buffer"));
  params_ = static_cast<float*>(p);
  return params_;
}

absl::Status InProcessCollectives::GatherParams(const float* shard, int64_t shard_count, cudaStream_t stream) {
  return GatherShards(shard, params_, shard_count, stream);
}

absl::Status InProcessCollectives::GatherParamRange(const float* shard, int64_t shard_count, int64_t first,
                                                    int64_t count, cudaStream_t stream) {
  const std::vector<const void*> all = Exchange(shard, stream);
  const std::vector<int> group = ShardGroup();
  for (size_t q = 0; q < group.size(); ++q) {
    const ParamPiece p = ParamPieceOf(static_cast<int>(q), shard_count, first, count);
    if (p.size() == 0) continue;
    const float* src = static_cast<const float*>(all[group[q]]) + (p.begin - static_cast<int64_t>(q) * shard_count);
    IPC_RETURN_IF_ERROR(CudaOk(cudaMemcpy(params_ + p.begin, src, p.size() * sizeof(float), cudaMemcpyDeviceToDevice),
                               "gather range"));
  }
  job_.barrier.arrive_and_wait();
  return absl::OkStatus();
}

absl::Status InProcessCollectives::GatherShards(const float* shard, float* full, int64_t shard_count,
                                                cudaStream_t stream) {
  return GatherIn(ShardGroup(), shard, full, shard_count, stream);
}

absl::Status InProcessCollectives::ReduceScatterGrads(const float* full, float* shard, int64_t count,
                                                      cudaStream_t stream) {
  return ReduceScatterIn(ShardGroup(), rank_ % job_.shard_group, full, shard, count, stream);
}

absl::Status InProcessCollectives::ReduceScatterGradRange(const float* full, float* shard, int64_t shard_count,
                                                          int64_t first, int64_t count, cudaStream_t stream) {
  const std::vector<const void*> all = Exchange(full, stream);
  const int q = rank_ % job_.shard_group;
  const ParamPiece p = ParamPieceOf(q, shard_count, first, count);
  absl::StatusOr<std::vector<float>> sum = Sum(all, ShardGroup(), p.begin, p.size());
  job_.barrier.arrive_and_wait();  // every member has read every full gradient
  if (!sum.ok()) return sum.status();
  if (p.size() == 0) return absl::OkStatus();
  return CudaOk(cudaMemcpy(shard + (p.begin - q * shard_count), sum->data(), p.size() * sizeof(float),
                           cudaMemcpyHostToDevice),
                "reduce-scatter range write");
}

absl::Status InProcessCollectives::AllReduceReplicas(float* shard, int64_t count, cudaStream_t stream) {
  return AllReduceIn(ReplicaGroup(), shard, count, stream);
}

absl::Status InProcessCollectives::AllGatherV(float* data, const std::vector<int64_t>& counts,
                                              const std::vector<int64_t>& offsets, cudaStream_t stream) {
  if (static_cast<int>(counts.size()) != job_.world_size || static_cast<int>(offsets.size()) != job_.world_size) {
    return absl::InvalidArgumentError("counts/offsets: one entry per rank");
  }
  const std::vector<const void*> all = Exchange(data, stream);
  for (int r = 0; r < job_.world_size; ++r) {
    if (r == rank_ || counts[r] == 0) continue;
    IPC_RETURN_IF_ERROR(CudaOk(cudaMemcpy(data + offsets[r], static_cast<const float*>(all[r]) + offsets[r],
                                        counts[r] * sizeof(float), cudaMemcpyDeviceToDevice),
                             "all-gather-v"));
  }
  job_.barrier.arrive_and_wait();
  return absl::OkStatus();
}

absl::Status InProcessCollectives::AllReduceSum(double* data, int64_t count, cudaStream_t stream) {
  const std::vector<const void*> all = Exchange(data, stream);
  std::vector<double> sum(static_cast<size_t>(count), 0.0), part(static_cast<size_t>(count));
  absl::Status status;
  for (int r = 0; r < job_.world_size && status.ok(); ++r) {
    status = CudaOk(cudaMemcpy(part.data(), all[r], count * sizeof(double), cudaMemcpyDeviceToHost), "sum read");
    for (int64_t k = 0; k < count; ++k) sum[k] += part[k];
  }
  job_.barrier.arrive_and_wait();
  IPC_RETURN_IF_ERROR(status);
  return CudaOk(cudaMemcpy(data, sum.data(), count * sizeof(double), cudaMemcpyHostToDevice), "all-reduce write");
}

absl::Status InProcessCollectives::Synchronize(cudaStream_t stream, std::string_view what) {
  return CudaOk(cudaStreamSynchronize(stream), "synchronize");
}

}  // namespace gemtb::gpu::train::test
