// A group of ranks talking over NCCL, one GPU per rank, with every wait bounded: the trainer's
// collectives across processes and hosts.
//
// Rendezvous: rank 0 of the job's TCP store (model/launch/tcp_store.h) makes NCCL's unique id and
// sets it under "<name>/nccl_id"; every rank reads it and creates its communicator on the current
// device. Communicators are non-blocking (ncclConfig_t::blocking = 0): the host never sits inside
// NCCL, so a rank that died or stopped calling shows up as a deadline passing in Synchronize (or in
// Create), after which the communicator is aborted and the error names the group, the operation and
// the timeout. An error NCCL reports itself (a peer's connection lost) ends the same way, with
// NCCL's message. Sub-groups (FSDP's shard and replica groups, the sparse side's MP groups) come
// from Split, which every rank of the parent calls.
//
// The collectives are NCCL's, in stream order on the stream given; they return once enqueued. Sums
// are in the order NCCL's algorithm picks (not fixed): results agree with the oracle within the
// tolerance of a reduction, not bit for bit.
#ifndef GEMTB_GPU_COMM_NCCL_GROUP_H_
#define GEMTB_GPU_COMM_NCCL_GROUP_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/common/dtype.h"
#include "model/launch/tcp_store.h"

namespace gemtb::gpu::comm {

enum class ReduceOp { kSum, kAvg };

class NcclGroup {
 public:
  // Every rank of the store's world calls it with the same `name`, its GPU current. NVLink SHARP
  // stays off (NCCL_NVLS_ENABLE=0 unless the environment sets it). DeadlineExceeded after `timeout`
  // naming the ranks' init; the store's own errors (a rank gone) as the store reports them.
  static absl::StatusOr<std::unique_ptr<NcclGroup>> Create(launch::TcpStoreClient& store, std::string_view name,
                                                           launch::Millis timeout);
  ~NcclGroup();  // aborts the communicator if a wait failed, else destroys it
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  // The ranks of this group with the same `color`, ranked by `key` (then by rank): every rank of this
  // group calls it. `name` labels the new group in errors.
  absl::StatusOr<std::unique_ptr<NcclGroup>> Split(int color, int key, std::string_view name);

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }

  // `count` elements of `dtype` per rank: recv holds size() * count, rank r's at r * count.
  absl::Status AllGather(const void* send, void* recv, int64_t count, Dtype dtype, cudaStream_t stream);
  // send holds size() * count; rank r receives the reduction of every rank's block r.
  absl::Status ReduceScatter(const void* send, void* recv, int64_t count, Dtype dtype, ReduceOp op,
                             cudaStream_t stream);
  absl::Status AllReduce(const void* send, void* recv, int64_t count, Dtype dtype, ReduceOp op, cudaStream_t stream);
  absl::Status Broadcast(const void* send, void* recv, int64_t count, Dtype dtype, int root, cudaStream_t stream);
  // Variable all-gather, in place: rank r's counts[r] elements at data + offsets[r] reach every
  // rank (one NCCL group of broadcasts, rank r the root of its part).
  absl::Status AllGatherV(void* data, const std::vector<int64_t>& counts, const std::vector<int64_t>& offsets,
                          Dtype dtype, cudaStream_t stream);
  // Variable reduce-scatter: rank r receives into `recv` the sum (`op`) over ranks of their
  // counts[r] elements at send + offsets[r] (one NCCL group of reduces, rank r the root of its
  // part; zero counts move nothing).
  absl::Status ReduceScatterV(const void* send, void* recv, const std::vector<int64_t>& counts,
                              const std::vector<int64_t>& offsets, Dtype dtype, ReduceOp op, cudaStream_t stream);
  // All-to-all of bytes among the ranks `members` (distinct, this one among them) by grouped sends
  // and receives: send_counts[i] bytes at send + send_offsets[i] to members[i], recv_counts[i]
  // bytes from members[i] into recv + recv_offsets[i] (what a rank sends to another is what that
  // rank expects; zero moves nothing; the own part by a device copy).
  absl::Status AllToAllV(const std::vector<int>& members, const void* send, const std::vector<int64_t>& send_counts,
                         const std::vector<int64_t>& send_offsets, void* recv, const std::vector<int64_t>& recv_counts,
                         const std::vector<int64_t>& recv_offsets, cudaStream_t stream);
  // Among the ranks `members` (distinct, this one among them): each member's `bytes` at `in` into
  // out + i * bytes for members[i], by grouped sends and receives (the own part by a device copy).
  absl::Status AllGatherAmong(const std::vector<int>& members, const void* in, int64_t bytes, void* out,
                              cudaStream_t stream);
  // Waits until `stream`'s work so far is done, at most the group's timeout. On a deadline or an
  // error NCCL reports, aborts the communicator (every later call fails) and returns
  // DeadlineExceeded / Unavailable naming `what`, the group and the timeout. `job`, when set, is
  // asked every 100 ms how the job stands (the store's JobStatus): its error ends the wait
  // the same way (a rank that died shows there before any NCCL timeout).
  absl::Status Synchronize(cudaStream_t stream, std::string_view what,
                           const std::function<absl::Status()>& job = nullptr);
  // Aborts the communicator now (what a rank does to its other groups once one wait failed).
  void Abort() { (void)Fail(absl::OkStatus()); }
  // Whether a failed wait (or Abort) aborted the communicator.
  bool aborted() const { return aborted_; }

 private:
  NcclGroup() = default;
  // Waits while NCCL reports ncclInProgress for the last call, at most until `deadline_ms`.
  absl::Status Settle(std::string_view what);
  absl::Status Fail(absl::Status status);
  // The index of this rank in `members`, after checking they are distinct ranks of this group.
  absl::StatusOr<size_t> MemberIndex(const std::vector<int>& members) const;
  // Ends an NCCL group call whose calls inside returned `first_error` (an ncclResult_t) and settles it.
  absl::Status EndGroupCall(int first_error, std::string_view what);
  // The variable collectives: after checking one count and offset per rank, one NCCL group of
  // `call(root, byte offset of its part, ncclDataType_t)` for each rank with a non-zero count,
  // returning an ncclResult_t.
  absl::Status PerRootGroup(std::string_view what, const std::vector<int64_t>& counts,
                            const std::vector<int64_t>& offsets, Dtype dtype,
                            const std::function<int(int root, int64_t byte_offset, int type)>& call);

  void* comm_ = nullptr;  // ncclComm_t (nccl.h stays out of this header)
  int rank_ = 0;
  int size_ = 1;
  std::string name_;
  launch::Millis timeout_{0};
  bool aborted_ = false;
  cudaEvent_t sync_event_ = nullptr;
};

}  // namespace gemtb::gpu::comm

#endif  // GEMTB_GPU_COMM_NCCL_GROUP_H_
