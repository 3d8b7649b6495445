// embedding::ShardExchange (gpu/embedding/shard_exchange.h) for M virtual positions in one process,
// each a host thread, all on the current GPU: the tests' way to run sharded embedding modules on one
// GPU. Every call waits for the device first, then moves the bytes by device copies.
#ifndef GEMTB_TESTS_GPU_IN_PROCESS_SHARD_EXCHANGE_H_
#define GEMTB_TESTS_GPU_IN_PROCESS_SHARD_EXCHANGE_H_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <barrier>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gpu/embedding/shard_exchange.h"

namespace gemtb::gpu::test {

// The positions of one virtual MP group: an all-to-all publishes its pointers, meets the others
// at a barrier, copies what it receives, and meets them again before anyone reuses a buffer. A
// gather among some positions meets only those: the n-th gather of one member list is one meeting.
struct InProcessShardGroup {
  explicit InProcessShardGroup(int m) : size(m), barrier(m), send(static_cast<size_t>(m)), offsets(static_cast<size_t>(m)) {}
  int size;
  std::barrier<> barrier;
  std::vector<const char*> send;
  std::vector<const std::vector<int64_t>*> offsets;
  struct Meeting {
    std::vector<const float*> in;
    int arrived = 0;
    int left = 0;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, Meeting> meetings;
  std::map<std::pair<int, std::string>, int> calls;  // (position, member list) -> gathers so far
};

class InProcessShardExchange : public embedding::ShardExchange {
 public:
  InProcessShardExchange(InProcessShardGroup& g, int position) : g_(g), position_(position) {}
  int position() const override { return position_; }
  int group_size() const override { return g_.size; }
  absl::Status AllToAllV(const void* send, const std::vector<int64_t>& send_counts,
                         const std::vector<int64_t>& send_offsets, void* recv, const std::vector<int64_t>& recv_counts,
                         const std::vector<int64_t>& recv_offsets, CUstream_st*) override {
    (void)send_counts;
    if (cudaDeviceSynchronize() != cudaSuccess) return absl::InternalError("cudaDeviceSynchronize");
    g_.send[static_cast<size_t>(position_)] = static_cast<const char*>(send);
    g_.offsets[static_cast<size_t>(position_)] = &send_offsets;
    g_.barrier.arrive_and_wait();
    absl::Status status;
    for (int p = 0; p < g_.size; ++p) {
      const size_t pp = static_cast<size_t>(p);
      if (recv_counts[pp] == 0) continue;
      const char* src = g_.send[pp] + (*g_.offsets[pp])[static_cast<size_t>(position_)];
      if (cudaMemcpy(static_cast<char*>(recv) + recv_offsets[pp], src, static_cast<size_t>(recv_counts[pp]),
                     cudaMemcpyDeviceToDevice) != cudaSuccess) {
        status = absl::InternalError("all-to-all copy");
      }
    }
    g_.barrier.arrive_and_wait();
    return status;
  }
  absl::Status AllGatherAmong(const std::vector<int>& members, const float* in, int64_t count, float* out,
                              CUstream_st*) override {
    if (cudaDeviceSynchronize() != cudaSuccess) return absl::InternalError("cudaDeviceSynchronize");
    std::string list;
    for (int q : members) list += std::to_string(q) + ",";
    std::unique_lock<std::mutex> lock(g_.mu);
    const std::string key = list + "#" + std::to_string(g_.calls[{position_, list}]++);
    InProcessShardGroup::Meeting& meeting = g_.meetings[key];
    meeting.in.resize(members.size());
    const size_t self = static_cast<size_t>(std::find(members.begin(), members.end(), position_) - members.begin());
    meeting.in[self] = in;
    ++meeting.arrived;
    g_.cv.notify_all();
    g_.cv.wait(lock, [&] { return meeting.arrived == static_cast<int>(members.size()); });
    absl::Status status;
    for (size_t i = 0; i < members.size(); ++i) {
      if (cudaMemcpy(out + static_cast<int64_t>(i) * count, meeting.in[i], static_cast<size_t>(count) * sizeof(float),
                     cudaMemcpyDeviceToDevice) != cudaSuccess) {
        status = absl::InternalError("all-gather copy");
      }
    }
    // The last to leave ends the meeting; nobody's input is reused before then.
    if (++meeting.left == static_cast<int>(members.size())) {
      g_.meetings.erase(key);
      g_.cv.notify_all();
    } else {
      g_.cv.wait(lock, [&] { return g_.meetings.count(key) == 0; });
    }
    return status;
  }
  absl::Status Synchronize(CUstream_st*, std::string_view what) override {
    return cudaDeviceSynchronize() == cudaSuccess ? absl::OkStatus() : absl::InternalError(std::string(what));
  }

 private:
  InProcessShardGroup& g_;
  int position_;
};

}  // namespace gemtb::gpu::test

#endif  // GEMTB_TESTS_GPU_IN_PROCESS_SHARD_EXCHANGE_H_
