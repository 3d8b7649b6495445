// embedding::ShardExchange (gpu/embedding/shard_exchange.h) for the ranks of a virtual job in one
// process, each a host thread, all on the current GPU: the tests' way to run sharded embedding
// modules on one GPU. A collective among a list of ranks is a meeting of those ranks only (the n-th
// call of one list is one meeting): each waits for the device, publishes its pointers, and once all
// have come copies what it receives; the last to leave ends the meeting, so no buffer is reused
// while another rank reads it.
#ifndef GEMTB_TESTS_GPU_IN_PROCESS_SHARD_EXCHANGE_H_
#define GEMTB_TESTS_GPU_IN_PROCESS_SHARD_EXCHANGE_H_

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gpu/embedding/shard_exchange.h"

namespace gemtb::gpu::test {

// What the ranks of one virtual job share.
struct InProcessShardGroup {
  explicit InProcessShardGroup(int world_size) : size(world_size) {}
  int size;
  struct Meeting {
    std::vector<const char*> send;                     // per member: its send buffer (or input)
    std::vector<const std::vector<int64_t>*> offsets;  // per member: its send offsets (all-to-all)
    int arrived = 0;
    int left = 0;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, Meeting> meetings;
  std::map<std::pair<int, std::string>, int> calls;  // (rank, member list) -> calls so far
};

class InProcessShardExchange : public embedding::ShardExchange {
 public:
  InProcessShardExchange(InProcessShardGroup& g, int rank) : g_(g), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return g_.size; }
  absl::Status AllToAllV(const std::vector<int>& ranks, const void* send, const std::vector<int64_t>& send_counts,
                         const std::vector<int64_t>& send_offsets, void* recv, const std::vector<int64_t>& recv_counts,
                         const std::vector<int64_t>& recv_offsets, CUstream_st* stream) override;
  absl::Status AllGatherAmong(const std::vector<int>& ranks, const void* in, int64_t bytes, void* out,
                              CUstream_st* stream) override;
  absl::Status Synchronize(CUstream_st* stream, std::string_view what) override;

 private:
  // Joins this call's meeting with `send` (and `offsets`), waits for every member, runs `copy`
  // with the meeting, then waits until every member has copied.
  template <typename Copy>
  absl::Status Meet(const std::vector<int>& ranks, const void* send, const std::vector<int64_t>* offsets, Copy copy);

  InProcessShardGroup& g_;
  int rank_;
};

}  // namespace gemtb::gpu::test

#endif  // GEMTB_TESTS_GPU_IN_PROCESS_SHARD_EXCHANGE_H_
