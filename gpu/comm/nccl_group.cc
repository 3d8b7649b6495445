// NcclGroup: non-blocking NCCL communicators with bounded waits (see nccl_group.h).
#include "gpu/comm/nccl_group.h"

#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <initializer_list>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gemtb::gpu::comm {
namespace {

using Clock = std::chrono::steady_clock;

ncclComm_t Comm(void* comm) { return static_cast<ncclComm_t>(comm); }

absl::StatusOr<ncclDataType_t> NcclType(Dtype dtype) {
  switch (dtype) {
    case Dtype::kFp32: return ncclFloat32;
    case Dtype::kBf16: return ncclBfloat16;
    case Dtype::kFp16: return ncclFloat16;
    case Dtype::kFp64: return ncclFloat64;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("dtype: ", std::string(DtypeName(dtype)), " is not one NCCL moves (fp64, fp32, fp16, bf16)"));
  }
}

ncclRedOp_t NcclOp(ReduceOp op) { return op == ReduceOp::kAvg ? ncclAvg : ncclSum; }

absl::Status CheckCount(int64_t count, std::string_view field) {
  if (count < 0) return absl::InvalidArgumentError(absl::StrCat(std::string(field), ": ", count, " is negative"));
  return absl::OkStatus();
}

// A collective's element count and NCCL's type for `dtype`, or the InvalidArgument naming the bad one.
absl::StatusOr<ncclDataType_t> CountAndType(int64_t count, Dtype dtype) {
  if (absl::Status s = CheckCount(count, "count"); !s.ok()) return s;
  return NcclType(dtype);
}

// Each of `vectors` has `size` entries, none negative; InvalidArgument naming the first that does not.
absl::Status CheckPerRank(std::initializer_list<std::pair<const std::vector<int64_t>*, const char*>> vectors,
                          int size) {
  for (const auto& [v, field] : vectors) {
    if (v->size() != static_cast<size_t>(size)) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": ", v->size(), " entries for a group of ", size));
    }
    for (int64_t x : *v) {
      if (absl::Status s = CheckCount(x, field); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

// Polls a non-blocking communicator until its last call has left ncclInProgress, or the deadline.
absl::Status PollComm(ncclComm_t comm, Clock::time_point deadline, ncclResult_t* state) {
  for (int spins = 0;; ++spins) {
    if (ncclResult_t r = ncclCommGetAsyncError(comm, state); r != ncclSuccess) {
      *state = r;
      return absl::OkStatus();
    }
    if (*state != ncclInProgress) return absl::OkStatus();
    if (Clock::now() >= deadline) return absl::DeadlineExceededError("");
    if (spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclGroup>> NcclGroup::Create(launch::TcpStoreClient& store, std::string_view name,
                                                             launch::Millis timeout) {
  if (timeout.count() < 1) return absl::InvalidArgumentError(absl::StrCat("timeout: ", timeout.count(), " ms"));
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  const std::string key = absl::StrCat(std::string(name), "/nccl_id");
  ncclUniqueId id{};
  if (store.rank() == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
      return absl::InternalError(absl::StrCat("ncclGetUniqueId: ", ncclGetErrorString(r)));
    }
    if (absl::Status s = store.Set(key, std::string_view(reinterpret_cast<const char*>(&id), sizeof(id))); !s.ok()) {
      return s;
    }
  } else {
    absl::StatusOr<std::string> got = store.Get(key);
    if (!got.ok()) return got.status();
    if (got->size() != sizeof(id)) {
      return absl::InternalError(absl::StrCat("store key ", key, ": ", got->size(), " bytes, not an ncclUniqueId"));
    }
    std::memcpy(&id, got->data(), sizeof(id));
  }
  auto g = std::unique_ptr<NcclGroup>(new NcclGroup());
  g->rank_ = store.rank();
  g->size_ = store.world_size();
  g->name_ = std::string(name);
  g->timeout_ = timeout;
  if (cudaError_t e = cudaEventCreateWithFlags(&g->sync_event_, cudaEventDisableTiming); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("cudaEventCreateWithFlags: ", cudaGetErrorString(e)));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = g->name_.c_str();
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, g->size_, id, g->rank_, &config);
  g->comm_ = comm;
  if (r != ncclSuccess && r != ncclInProgress) {
    return g->Fail(absl::UnavailableError(absl::StrCat("NCCL group \"", g->name_, "\": init: ", ncclGetErrorString(r))));
  }
  if (absl::Status s = g->Settle("init"); !s.ok()) return s;
  return g;
}

NcclGroup::~NcclGroup() {
  if (comm_ != nullptr) {
    if (aborted_) {
      ncclCommAbort(Comm(comm_));
    } else {
      // Finalize flushes what is in flight; a peer gone by now must not hang the process.
      ncclResult_t state = ncclCommFinalize(Comm(comm_));
      if (state == ncclSuccess || state == ncclInProgress) {
        const absl::Status s = PollComm(Comm(comm_), Clock::now() + timeout_, &state);
        if (s.ok() && state == ncclSuccess) {
          ncclCommDestroy(Comm(comm_));
        } else {
          ncclCommAbort(Comm(comm_));
        }
      } else {
        ncclCommAbort(Comm(comm_));
      }
    }
  }
  if (sync_event_ != nullptr) cudaEventDestroy(sync_event_);
}

absl::Status NcclGroup::Fail(absl::Status status) {
  if (comm_ != nullptr && !aborted_) {
    ncclCommAbort(Comm(comm_));
    comm_ = nullptr;
  }
  aborted_ = true;
  return status;
}

absl::Status NcclGroup::Settle(std::string_view what) {
  if (aborted_) return absl::FailedPreconditionError(absl::StrCat("NCCL group \"", name_, "\" was aborted"));
  ncclResult_t state = ncclSuccess;
  const absl::Status polled = PollComm(Comm(comm_), Clock::now() + timeout_, &state);
  if (!polled.ok()) {
    return Fail(absl::DeadlineExceededError(absl::StrCat("NCCL group \"", name_, "\": ", std::string(what), " not done after ",
                                                         timeout_.count(), " ms (a rank died or stopped calling); "
                                                         "communicator aborted")));
  }
  if (state != ncclSuccess) {
    return Fail(absl::UnavailableError(absl::StrCat("NCCL group \"", name_, "\": ", std::string(what), ": ", ncclGetErrorString(state),
                                                    " (", ncclGetLastError(Comm(comm_)), "); communicator aborted")));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<NcclGroup>> NcclGroup::Split(int color, int key, std::string_view name) {
  if (aborted_) return absl::FailedPreconditionError(absl::StrCat("NCCL group \"", name_, "\" was aborted"));
  if (color < 0) return absl::InvalidArgumentError(absl::StrCat("color: ", color, " is negative"));
  auto g = std::unique_ptr<NcclGroup>(new NcclGroup());
  g->name_ = std::string(name);
  g->timeout_ = timeout_;
  if (cudaError_t e = cudaEventCreateWithFlags(&g->sync_event_, cudaEventDisableTiming); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("cudaEventCreateWithFlags: ", cudaGetErrorString(e)));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = g->name_.c_str();
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommSplit(Comm(comm_), color, key, &comm, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    return Fail(absl::UnavailableError(absl::StrCat("NCCL group \"", name_, "\": split into \"", g->name_,
                                                    "\": ", ncclGetErrorString(r))));
  }
  if (absl::Status s = Settle(absl::StrCat("split into \"", g->name_, "\"")); !s.ok()) return s;
  g->comm_ = comm;
  if (absl::Status s = g->Settle("init"); !s.ok()) return s;
  int rank = 0, size = 0;
  if (ncclCommUserRank(comm, &rank) != ncclSuccess || ncclCommCount(comm, &size) != ncclSuccess) {
    return g->Fail(absl::InternalError(absl::StrCat("NCCL group \"", g->name_, "\": rank and size unreadable")));
  }
  g->rank_ = rank;
  g->size_ = size;
  return g;
}

#define GROUP_RETURN_IF_ERROR(expr)                  \
  do {                                               \
    if (absl::Status s_ = (expr); !s_.ok()) return s_; \
  } while (false)

// Issues one NCCL call and settles it: its own error, or a wait past the timeout, aborts the group.
#define GROUP_NCCL(what, call)                                                                              \
  do {                                                                                                      \
    if (aborted_) return absl::FailedPreconditionError(absl::StrCat("NCCL group \"", name_, "\" was aborted")); \
    const ncclResult_t r_ = (call);                                                                         \
    if (r_ != ncclSuccess && r_ != ncclInProgress) {                                                        \
      return Fail(absl::UnavailableError(absl::StrCat("NCCL group \"", name_, "\": ", std::string(what), ": ",           \
                                                      ncclGetErrorString(r_), "; communicator aborted")));  \
    }                                                                                                       \
    GROUP_RETURN_IF_ERROR(Settle(what));                                                                    \
  } while (false)

absl::Status NcclGroup::AllGather(const void* send, void* recv, int64_t count, Dtype dtype, cudaStream_t stream) {
  absl::StatusOr<ncclDataType_t> type = CountAndType(count, dtype);
  if (!type.ok()) return type.status();
  GROUP_NCCL("all_gather", ncclAllGather(send, recv, static_cast<size_t>(count), *type, Comm(comm_), stream));
  return absl::OkStatus();
}

absl::Status NcclGroup::ReduceScatter(const void* send, void* recv, int64_t count, Dtype dtype, ReduceOp op,
                                      cudaStream_t stream) {
  absl::StatusOr<ncclDataType_t> type = CountAndType(count, dtype);
  if (!type.ok()) return type.status();
  GROUP_NCCL("reduce_scatter",
             ncclReduceScatter(send, recv, static_cast<size_t>(count), *type, NcclOp(op), Comm(comm_), stream));
  return absl::OkStatus();
}

absl::Status NcclGroup::AllReduce(const void* send, void* recv, int64_t count, Dtype dtype, ReduceOp op,
                                  cudaStream_t stream) {
  absl::StatusOr<ncclDataType_t> type = CountAndType(count, dtype);
  if (!type.ok()) return type.status();
  GROUP_NCCL("all_reduce",
             ncclAllReduce(send, recv, static_cast<size_t>(count), *type, NcclOp(op), Comm(comm_), stream));
  return absl::OkStatus();
}

absl::Status NcclGroup::Broadcast(const void* send, void* recv, int64_t count, Dtype dtype, int root,
                                  cudaStream_t stream) {
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(absl::StrCat("root: ", root, " is not a rank of a group of ", size_));
  }
  absl::StatusOr<ncclDataType_t> type = CountAndType(count, dtype);
  if (!type.ok()) return type.status();
  GROUP_NCCL("broadcast", ncclBroadcast(send, recv, static_cast<size_t>(count), *type, root, Comm(comm_), stream));
  return absl::OkStatus();
}

absl::Status NcclGroup::EndGroupCall(int first_error, std::string_view what) {
  ncclResult_t r = static_cast<ncclResult_t>(first_error);
  const ncclResult_t end = ncclGroupEnd();
  if (r == ncclSuccess) r = end;
  if (r != ncclSuccess && r != ncclInProgress) {
    return Fail(absl::UnavailableError(absl::StrCat("NCCL group \"", name_, "\": ", std::string(what), ": ",
                                                    ncclGetErrorString(r), "; communicator aborted")));
  }
  return Settle(what);
}

absl::Status NcclGroup::PerRootGroup(std::string_view what, const std::vector<int64_t>& counts,
                                     const std::vector<int64_t>& offsets, Dtype dtype,
                                     const std::function<int(int root, int64_t byte_offset, int type)>& call) {
  GROUP_RETURN_IF_ERROR(CheckPerRank({{&counts, "counts"}, {&offsets, "offsets"}}, size_));
  absl::StatusOr<ncclDataType_t> type = NcclType(dtype);
  if (!type.ok()) return type.status();
  const int64_t elem = InfoOf(dtype).element_bits / 8;
  if (aborted_) return absl::FailedPreconditionError(absl::StrCat("NCCL group \"", name_, "\" was aborted"));
  ncclResult_t r = ncclGroupStart();
  for (int root = 0; r == ncclSuccess && root < size_; ++root) {
    if (counts[static_cast<size_t>(root)] == 0) continue;
    r = static_cast<ncclResult_t>(call(root, offsets[static_cast<size_t>(root)] * elem, static_cast<int>(*type)));
  }
  return EndGroupCall(r, what);
}

absl::Status NcclGroup::AllGatherV(void* data, const std::vector<int64_t>& counts,
                                   const std::vector<int64_t>& offsets, Dtype dtype, cudaStream_t stream) {
  return PerRootGroup("all_gather_v", counts, offsets, dtype, [&](int root, int64_t byte_offset, int type) {
    char* at = static_cast<char*>(data) + byte_offset;
    return static_cast<int>(ncclBroadcast(at, at, static_cast<size_t>(counts[static_cast<size_t>(root)]),
                                          static_cast<ncclDataType_t>(type), root, Comm(comm_), stream));
  });
}

absl::Status NcclGroup::ReduceScatterV(const void* send, void* recv, const std::vector<int64_t>& counts,
                                       const std::vector<int64_t>& offsets, Dtype dtype, ReduceOp op,
                                       cudaStream_t stream) {
  return PerRootGroup("reduce_scatter_v", counts, offsets, dtype, [&](int root, int64_t byte_offset, int type) {
    const char* at = static_cast<const char*>(send) + byte_offset;
    return static_cast<int>(ncclReduce(at, recv, static_cast<size_t>(counts[static_cast<size_t>(root)]),
                                       static_cast<ncclDataType_t>(type), NcclOp(op), root, Comm(comm_), stream));
  });
}

// The members' checks shared by the point-to-point collectives: distinct ranks of this group,
// this one among them; its index.
absl::StatusOr<size_t> NcclGroup::MemberIndex(const std::vector<int>& members) const {
  size_t self = members.size();
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] < 0 || members[i] >= size_) {
      return absl::InvalidArgumentError(absl::StrCat("members: rank ", members[i], " is not in a group of ", size_));
    }
    for (size_t j = 0; j < i; ++j) {
      if (members[j] == members[i]) return absl::InvalidArgumentError(absl::StrCat("members: rank ", members[i], " twice"));
    }
    if (members[i] == rank_) self = i;
  }
  if (self == members.size()) return absl::InvalidArgumentError(absl::StrCat("members: rank ", rank_, " is not among them"));
  return self;
}

absl::Status NcclGroup::AllToAllV(const std::vector<int>& members, const void* send,
                                  const std::vector<int64_t>& send_counts, const std::vector<int64_t>& send_offsets,
                                  void* recv, const std::vector<int64_t>& recv_counts,
                                  const std::vector<int64_t>& recv_offsets, cudaStream_t stream) {
  const int n = static_cast<int>(members.size());
  GROUP_RETURN_IF_ERROR(CheckPerRank({{&send_counts, "send_counts"}, {&send_offsets, "send_offsets"},
                                      {&recv_counts, "recv_counts"}, {&recv_offsets, "recv_offsets"}},
                                     n));
  absl::StatusOr<size_t> self = MemberIndex(members);
  if (!self.ok()) return self.status();
  if (aborted_) return absl::FailedPreconditionError(absl::StrCat("NCCL group \"", name_, "\" was aborted"));
  if (recv_counts[*self] != send_counts[*self]) {
    return absl::InvalidArgumentError(absl::StrCat("all_to_all_v: ", send_counts[*self], " bytes to itself, ",
                                                   recv_counts[*self], " expected"));
  }
  if (send_counts[*self] > 0) {
    if (cudaError_t e = cudaMemcpyAsync(static_cast<char*>(recv) + recv_offsets[*self],
                                        static_cast<const char*>(send) + send_offsets[*self],
                                        static_cast<size_t>(send_counts[*self]), cudaMemcpyDeviceToDevice, stream);
        e != cudaSuccess) {
      return absl::InternalError(absl::StrCat("NCCL group \"", name_, "\": all_to_all_v's own part: ", cudaGetErrorString(e)));
    }
  }
  ncclResult_t r = ncclGroupStart();
  for (size_t i = 0; r == ncclSuccess && i < members.size(); ++i) {
    if (i == *self) continue;
    if (send_counts[i] > 0) {
      r = ncclSend(static_cast<const char*>(send) + send_offsets[i], static_cast<size_t>(send_counts[i]), ncclUint8,
                   members[i], Comm(comm_), stream);
    }
    if (r == ncclSuccess && recv_counts[i] > 0) {
      r = ncclRecv(static_cast<char*>(recv) + recv_offsets[i], static_cast<size_t>(recv_counts[i]), ncclUint8,
                   members[i], Comm(comm_), stream);
    }
  }
  return EndGroupCall(r, "all_to_all_v");
}

absl::Status NcclGroup::AllGatherAmong(const std::vector<int>& members, const void* in, int64_t bytes, void* out,
                                       cudaStream_t stream) {
  GROUP_RETURN_IF_ERROR(CheckCount(bytes, "bytes"));
  absl::StatusOr<size_t> self = MemberIndex(members);
  if (!self.ok()) return self.status();
  if (aborted_) return absl::FailedPreconditionError(absl::StrCat("NCCL group \"", name_, "\" was aborted"));
  if (bytes == 0) return absl::OkStatus();
  char* own = static_cast<char*>(out) + static_cast<int64_t>(*self) * bytes;
  if (cudaError_t e = cudaMemcpyAsync(own, in, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream);
      e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("NCCL group \"", name_, "\": all_gather_among's own part: ", cudaGetErrorString(e)));
  }
  ncclResult_t r = ncclGroupStart();
  for (size_t i = 0; r == ncclSuccess && i < members.size(); ++i) {
    if (members[i] == rank_) continue;
    r = ncclSend(in, static_cast<size_t>(bytes), ncclUint8, members[i], Comm(comm_), stream);
    if (r == ncclSuccess) {
      r = ncclRecv(static_cast<char*>(out) + static_cast<int64_t>(i) * bytes, static_cast<size_t>(bytes), ncclUint8,
                   members[i], Comm(comm_), stream);
    }
  }
  return EndGroupCall(r, "all_gather_among");
}

absl::Status NcclGroup::Synchronize(cudaStream_t stream, std::string_view what,
                                    const std::function<absl::Status()>& job) {
  if (aborted_) return absl::FailedPreconditionError(absl::StrCat("NCCL group \"", name_, "\" was aborted"));
  if (cudaError_t e = cudaEventRecord(sync_event_, stream); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("cudaEventRecord: ", cudaGetErrorString(e)));
  }
  const Clock::time_point deadline = Clock::now() + timeout_;
  Clock::time_point next_job_check = Clock::now() + std::chrono::milliseconds(100);
  for (int spins = 0;; ++spins) {
    const cudaError_t e = cudaEventQuery(sync_event_);
    if (e == cudaSuccess) return absl::OkStatus();
    if (e != cudaErrorNotReady) {
      return Fail(absl::InternalError(absl::StrCat("NCCL group \"", name_, "\": ", std::string(what), ": ", cudaGetErrorString(e))));
    }
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(Comm(comm_), &state) != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
      return Fail(absl::UnavailableError(absl::StrCat("NCCL group \"", name_, "\": ", std::string(what), ": ",
                                                      ncclGetErrorString(state), "; communicator aborted")));
    }
    if (Clock::now() >= deadline) {
      return Fail(absl::DeadlineExceededError(absl::StrCat("NCCL group \"", name_, "\": ", std::string(what), " not done after ",
                                                           timeout_.count(), " ms (a rank died or stopped calling); "
                                                           "communicator aborted")));
    }
    if (job && Clock::now() >= next_job_check) {
      if (absl::Status s = job(); !s.ok()) {
        return Fail(absl::Status(s.code(), absl::StrCat("NCCL group \"", name_, "\": ", std::string(what),
                                                        " abandoned: ", s.message(), "; communicator aborted")));
      }
      next_job_check = Clock::now() + std::chrono::milliseconds(100);
    }
    if (spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace gemtb::gpu::comm
