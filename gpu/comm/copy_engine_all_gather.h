// An all-gather among the GPUs of one host that no SM takes part in: the copy engines move the
// bytes (cudaMemcpyAsync between device memories over NVLink) and the GPUs' front ends order them
// (stream_flags.h), so the SMs stay with the model's kernels, where NCCL's all-gather runs as
// kernels on SMs of its own.
//
// Each member owns a window: the gathered output, `members` slots of up to `slot_bytes`, with member
// i's input at byte i * bytes of a call of `bytes` (contiguous, as NCCL's all-gather writes). Every
// member can write into every other's window: peer pointers in one process, CUDA IPC mappings
// (cudaIpcGetMemHandle / cudaIpcOpenMemHandle, handles handed over through the job's TCP store)
// across processes. Beside the window lie two flag arrays, `arrived[j]` and `free[j]`: the last call
// whose slot from member j has landed here, and the last call for which member j may write here.
//
// Call n on member i (every member calls n times, with the same byte count):
//   on `stream`:   free[i] := n in every peer's flags (the stream's earlier work, the window's last
//                  readers included, is done with the window); an event marks the input ready;
//   per peer j, on side stream j (after that event): wait own free[j] >= n, copy the input into
//                  j's window at slot i, arrived[i] := n in j's flags;
//   on `stream`:   copy the input into the own slot unless in place, wait own arrived[j] >= n for
//                  every peer, and wait for the side streams (the input may change afterwards).
// A member whose peer never calls waits forever on the device; the trainer's synchronisation points
// carry the timeout (a host-side wait with a deadline), as for NCCL.
#ifndef GEMTB_GPU_COMM_COPY_ENGINE_ALL_GATHER_H_
#define GEMTB_GPU_COMM_COPY_ENGINE_ALL_GATHER_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/launch/tcp_store.h"

namespace gemtb::gpu::comm {

class CopyEngineAllGather {
 public:
  // One process driving every member: member i on devices[i]. A device may appear more than once
  // (its members then copy within that GPU, which the tests use on one GPU); each member takes
  // `members` streams of its device, and where a device's streams outnumber its hardware queues
  // (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default) a flag wait can hold back a stream that shares its
  // queue, so a device should carry at most two members. Peer access is turned on
  // between the distinct devices; FailedPrecondition when two of them cannot reach each other.
  static absl::StatusOr<std::vector<std::unique_ptr<CopyEngineAllGather>>> CreateInProcess(
      const std::vector<int>& devices, int64_t slot_bytes);
  // One member per process, on the current device: the members are the job's ranks `member_ranks`
  // (this rank among them, in member order, all on this host), which hand each other their windows'
  // IPC handles through `store` under keys "<name>/...". Every member calls it with the same name,
  // ranks and slot size; InvalidArgument naming the argument otherwise (as far as one rank can see).
  static absl::StatusOr<std::unique_ptr<CopyEngineAllGather>> CreateAcrossProcesses(
      launch::TcpStoreClient& store, std::string_view name, const std::vector<int>& member_ranks,
      int64_t slot_bytes);

  ~CopyEngineAllGather();
  CopyEngineAllGather(const CopyEngineAllGather&) = delete;
  CopyEngineAllGather& operator=(const CopyEngineAllGather&) = delete;

  int member() const { return member_; }
  int members() const { return static_cast<int>(peer_windows_.size()); }
  int device() const { return device_; }
  int64_t slot_bytes() const { return slot_bytes_; }
  // This member's window: members() * slot_bytes() bytes on device().
  void* window() const { return window_; }

  // Gathers `bytes` (1 .. slot_bytes) of `input` (device memory of device(); may be this member's
  // own slot, window() + member() * bytes) from every member into every window, in stream order on
  // `stream` (see above). InvalidArgument naming `bytes` when out of range.
  absl::Status AllGather(const void* input, int64_t bytes, cudaStream_t stream);
  // The same protocol with pieces at places of the caller's: this member's `bytes` (0 .. the
  // window) of `input` land at byte `offset` of every window; the members' pieces of one call do
  // not overlap (one FSDP unit's parameters, each member sending what its shard holds of them).
  // InvalidArgument naming `offset` or `bytes` when the piece is not inside the window.
  absl::Status AllGatherPieces(const void* input, int64_t offset, int64_t bytes, cudaStream_t stream);

 private:
  CopyEngineAllGather() = default;
  // One call of the protocol: this member's `bytes` of `input` to byte `offset` of every window.
  absl::Status Put(const void* input, int64_t offset, int64_t bytes, cudaStream_t stream);
  absl::Status MakeStreams();
  // Allocates this member's window for `members` slots of slot_bytes_, its flags zeroed.
  absl::Status AllocateWindow(int members);
  // Member j's flag arrays, as this member addresses them (they follow the slots in j's window).
  uint32_t* Arrived(int j) const;
  uint32_t* Free(int j) const;

  int member_ = 0;
  int device_ = 0;
  int64_t slot_bytes_ = 0;
  uint32_t calls_ = 0;
  char* window_ = nullptr;            // owned: members * slot_bytes, then arrived[members], free[members]
  std::vector<char*> peer_windows_;  // member j's window as this member addresses it (j == member_: own)
  std::vector<cudaStream_t> side_;        // one per peer (the copies to different peers run side by side)
  std::vector<cudaEvent_t> side_done_;
  cudaEvent_t input_ready_ = nullptr;
  bool ipc_ = false;                      // peer windows are IPC mappings to close
};

}  // namespace gemtb::gpu::comm

#endif  // GEMTB_GPU_COMM_COPY_ENGINE_ALL_GATHER_H_
