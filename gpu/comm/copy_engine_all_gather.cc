// CopyEngineAllGather: windows, flags and the per-call protocol of copy_engine_all_gather.h.
#include "gpu/comm/copy_engine_all_gather.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gpu/comm/stream_flags.h"
#include "gpu/common/device_buffer.h"

namespace gemtb::gpu::comm {
namespace {

#define CE_CUDA(call)                                                              \
  do {                                                                             \
    if (cudaError_t e_ = (call); e_ != cudaSuccess) return CudaOk(e_, #call);      \
  } while (false)
#define CE_RETURN_IF_ERROR(expr)                                                   \
  do {                                                                             \
    if (absl::Status s_ = (expr); !s_.ok()) return s_;                             \
  } while (false)

// Makes `device` current for a scope and restores the previous device after it.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    cudaGetDevice(&previous_);
    if (previous_ != device) cudaSetDevice(device);
    device_ = device;
  }
  ~DeviceScope() {
    if (previous_ != device_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
  int device_ = 0;
};

absl::Status CheckSlotBytes(int64_t slot_bytes) {
  if (slot_bytes < 1 || slot_bytes > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(absl::StrCat("slot_bytes: ", slot_bytes, " is not in [1, 2^40]"));
  }
  return absl::OkStatus();
}

// The bytes a window needs beside its slots: two flag arrays of `members` 32-bit words, rounded to 256.
int64_t FlagBytes(int members) { return (int64_t{8} * members + 255) / 256 * 256; }

// Where a window of `members` slots keeps its flags: after the slots, 256-byte aligned.
int64_t FlagOffset(int members, int64_t slot_bytes) { return (members * slot_bytes + 255) / 256 * 256; }

}  // namespace


absl::Status CopyEngineAllGather::AllocateWindow(int members) {
  const int64_t flags = FlagOffset(members, slot_bytes_);
  void* p = nullptr;
  CE_CUDA(cudaMalloc(&p, static_cast<size_t>(flags + FlagBytes(members))));
  window_ = static_cast<char*>(p);
  CE_CUDA(cudaMemset(window_ + flags, 0, static_cast<size_t>(FlagBytes(members))));
  return absl::OkStatus();
}

uint32_t* CopyEngineAllGather::Arrived(int j) const {
  return reinterpret_cast<uint32_t*>(peer_windows_[j] + FlagOffset(members(), slot_bytes_));
}
uint32_t* CopyEngineAllGather::Free(int j) const { return Arrived(j) + members(); }

absl::Status CopyEngineAllGather::MakeStreams() {
  const int p = members();
  side_.assign(p, nullptr);
  side_done_.assign(p, nullptr);
  for (int j = 0; j < p; ++j) {
    if (j == member_) continue;
    CE_CUDA(cudaStreamCreateWithFlags(&side_[j], cudaStreamNonBlocking));
    CE_CUDA(cudaEventCreateWithFlags(&side_done_[j], cudaEventDisableTiming));
  }
  CE_CUDA(cudaEventCreateWithFlags(&input_ready_, cudaEventDisableTiming));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::unique_ptr<CopyEngineAllGather>>> CopyEngineAllGather::CreateInProcess(
    const std::vector<int>& devices, int64_t slot_bytes) {
  CE_RETURN_IF_ERROR(CheckSlotBytes(slot_bytes));
  const int p = static_cast<int>(devices.size());
  if (p < 1) return absl::InvalidArgumentError("devices: empty");
  int visible = 0;
  CE_CUDA(cudaGetDeviceCount(&visible));
  for (int d : devices) {
    if (d < 0 || d >= visible) {
      return absl::InvalidArgumentError(absl::StrCat("devices: ", d, " is not one of the ", visible, " visible"));
    }
  }
  // Peer access between every ordered pair of distinct devices.
  for (int a : devices) {
    for (int b : devices) {
      if (a == b) continue;
      int can = 0;
      CE_CUDA(cudaDeviceCanAccessPeer(&can, a, b));
      if (!can) {
        return absl::FailedPreconditionError(absl::StrCat("device ", a, " cannot access device ", b,
                                                          " (no peer path): the copy-engine all-gather needs one"));
      }
      DeviceScope scope(a);
      const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();  // clear it
      } else if (e != cudaSuccess) {
        return CudaOk(e, "cudaDeviceEnablePeerAccess");
      }
    }
  }
  std::vector<std::unique_ptr<CopyEngineAllGather>> all;
  for (int i = 0; i < p; ++i) {
    auto m = std::unique_ptr<CopyEngineAllGather>(new CopyEngineAllGather());
    m->member_ = i;
    m->device_ = devices[i];
    m->slot_bytes_ = slot_bytes;
    DeviceScope scope(m->device_);
    CE_RETURN_IF_ERROR(m->AllocateWindow(p));
    all.push_back(std::move(m));
  }
  for (int i = 0; i < p; ++i) {
    CopyEngineAllGather& m = *all[i];
    for (int j = 0; j < p; ++j) m.peer_windows_.push_back(all[j]->window_);
    DeviceScope scope(m.device_);
    CE_RETURN_IF_ERROR(m.MakeStreams());
    CE_CUDA(cudaDeviceSynchronize());  // the zeroed flags before any member writes them
  }
  return all;
}

absl::StatusOr<std::unique_ptr<CopyEngineAllGather>> CopyEngineAllGather::CreateAcrossProcesses(
    launch::TcpStoreClient& store, std::string_view name, const std::vector<int>& member_ranks, int64_t slot_bytes) {
  CE_RETURN_IF_ERROR(CheckSlotBytes(slot_bytes));
  const int p = static_cast<int>(member_ranks.size());
  const auto self = std::find(member_ranks.begin(), member_ranks.end(), store.rank());
  if (self == member_ranks.end()) {
    return absl::InvalidArgumentError(absl::StrCat("member_ranks: [", absl::StrJoin(member_ranks, ", "),
                                                   "] does not hold this rank ", store.rank()));
  }
  for (int r : member_ranks) {
    if (r < 0 || r >= store.world_size() || std::count(member_ranks.begin(), member_ranks.end(), r) != 1) {
      return absl::InvalidArgumentError(absl::StrCat("member_ranks: [", absl::StrJoin(member_ranks, ", "),
                                                     "] is not a set of ranks of a world of ", store.world_size()));
    }
  }
  auto m = std::unique_ptr<CopyEngineAllGather>(new CopyEngineAllGather());
  m->member_ = static_cast<int>(self - member_ranks.begin());
  m->slot_bytes_ = slot_bytes;
  m->ipc_ = true;
  CE_CUDA(cudaGetDevice(&m->device_));
  CE_RETURN_IF_ERROR(m->AllocateWindow(p));
  CE_CUDA(cudaDeviceSynchronize());  // the zeroed flags before the handle is out

  // What every member must agree on, then the handle.
  const std::string agreement = absl::StrCat("slot_bytes=", slot_bytes, " members=", absl::StrJoin(member_ranks, ","));
  cudaIpcMemHandle_t handle{};
  CE_CUDA(cudaIpcGetMemHandle(&handle, m->window_));
  std::string value = agreement;
  value.push_back('\0');
  value.append(reinterpret_cast<const char*>(&handle), sizeof(handle));
  const std::string prefix = absl::StrCat(std::string(name), "/");
  CE_RETURN_IF_ERROR(store.Set(absl::StrCat(prefix, store.rank()), value));
  for (int j = 0; j < p; ++j) {
    if (j == m->member_) {
      m->peer_windows_.push_back(m->window_);
      continue;
    }
    absl::StatusOr<std::string> got = store.Get(absl::StrCat(prefix, member_ranks[j]));
    if (!got.ok()) return got.status();
    const size_t zero = got->find('\0');
    if (zero == std::string::npos || got->substr(0, zero) != agreement ||
        got->size() != zero + 1 + sizeof(cudaIpcMemHandle_t)) {
      return absl::InvalidArgumentError(absl::StrCat("copy-engine all-gather \"", std::string(name), "\": rank ",
                                                     member_ranks[j], " has ",
                                                     zero == std::string::npos ? *got : got->substr(0, zero),
                                                     ", rank ", store.rank(), " has ", agreement));
    }
    cudaIpcMemHandle_t peer{};
    std::memcpy(&peer, got->data() + zero + 1, sizeof(peer));
    void* mapped = nullptr;
    CE_CUDA(cudaIpcOpenMemHandle(&mapped, peer, cudaIpcMemLazyEnablePeerAccess));
    m->peer_windows_.push_back(static_cast<char*>(mapped));
  }
  CE_RETURN_IF_ERROR(m->MakeStreams());
  return m;
}

CopyEngineAllGather::~CopyEngineAllGather() {
  DeviceScope scope(device_);
  for (size_t j = 0; j < side_.size(); ++j) {
    if (side_[j] != nullptr) cudaStreamSynchronize(side_[j]), cudaStreamDestroy(side_[j]);
    if (side_done_[j] != nullptr) cudaEventDestroy(side_done_[j]);
  }
  if (input_ready_ != nullptr) cudaEventDestroy(input_ready_);
  for (size_t j = 0; ipc_ && j < peer_windows_.size(); ++j) {
    if (static_cast<int>(j) != member_ && peer_windows_[j] != nullptr) cudaIpcCloseMemHandle(peer_windows_[j]);
  }
  if (window_ != nullptr) cudaFree(window_);
}

absl::Status CopyEngineAllGather::AllGather(const void* input, int64_t bytes, cudaStream_t stream) {
  if (bytes < 1 || bytes > slot_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat("bytes: ", bytes, " is not in [1, slot_bytes=", slot_bytes_, "]"));
  }
  return Put(input, member_ * bytes, bytes, stream);
}

absl::Status CopyEngineAllGather::AllGatherPieces(const void* input, int64_t offset, int64_t bytes,
                                                  cudaStream_t stream) {
  const int64_t window_bytes = static_cast<int64_t>(members()) * slot_bytes_;
  if (offset < 0 || offset > window_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("offset: ", offset, " is not in [0, ", window_bytes, "]"));
  }
  if (bytes < 0 || offset + bytes > window_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("bytes: ", bytes, " at offset ", offset, " reach past the window's ", window_bytes));
  }
  return Put(input, offset, bytes, stream);
}

absl::Status CopyEngineAllGather::Put(const void* input, int64_t offset, int64_t bytes, cudaStream_t stream) {
  DeviceScope scope(device_);
  const int p = members();
  const int i = member_;
  const uint32_t n = ++calls_;
  const size_t b = static_cast<size_t>(bytes);
  char* own_slot = window_ + offset;
  // This window may take call n's slots: `stream`'s earlier readers of it are done.
  for (int j = 0; j < p; ++j) {
    if (j != i) CE_RETURN_IF_ERROR(StreamWriteFlag(stream, Free(j) + i, n));
  }
  CE_CUDA(cudaEventRecord(input_ready_, stream));
  // Peers in the order i+1, i+2, ...: at any moment the members push to different windows.
  for (int k = 1; k < p; ++k) {
    const int j = (i + k) % p;
    CE_CUDA(cudaStreamWaitEvent(side_[j], input_ready_, 0));
    CE_RETURN_IF_ERROR(StreamWaitFlag(side_[j], Free(i) + j, n));
    if (b > 0) CE_CUDA(cudaMemcpyAsync(peer_windows_[j] + offset, input, b, cudaMemcpyDefault, side_[j]));
    CE_RETURN_IF_ERROR(StreamWriteFlag(side_[j], Arrived(j) + i, n));
    CE_CUDA(cudaEventRecord(side_done_[j], side_[j]));
  }
  if (b > 0 && input != own_slot) CE_CUDA(cudaMemcpyAsync(own_slot, input, b, cudaMemcpyDefault, stream));
  for (int j = 0; j < p; ++j) {
    if (j == i) continue;
    CE_RETURN_IF_ERROR(StreamWaitFlag(stream, Arrived(i) + j, n));
    CE_CUDA(cudaStreamWaitEvent(stream, side_done_[j], 0));
  }
  return absl::OkStatus();
}

}  // namespace gemtb::gpu::comm
