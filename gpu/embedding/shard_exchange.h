// What a sharded embedding module (sharded_tbe.h) needs from the job's ranks: point-to-point
// collectives among a list of ranks (an MP group's, a replica group's), in stream order. The module
// does not know who carries them: gpu/comm's NCCL world group, or the tests' ranks in one process.
#ifndef GEMTB_GPU_EMBEDDING_SHARD_EXCHANGE_H_
#define GEMTB_GPU_EMBEDDING_SHARD_EXCHANGE_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

struct CUstream_st;  // cudaStream_t without the CUDA headers

namespace gemtb::gpu::embedding {

class ShardExchange {
 public:
  virtual ~ShardExchange() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // Among the job's ranks `ranks` (distinct, this one among them, the same list on each, in the
  // same order of calls): send_counts[i] bytes at send + send_offsets[i] to ranks[i], recv_counts[i]
  // bytes from ranks[i] into recv + recv_offsets[i] (both sides agree on every count).
  virtual absl::Status AllToAllV(const std::vector<int>& ranks, const void* send,
                                 const std::vector<int64_t>& send_counts, const std::vector<int64_t>& send_offsets,
                                 void* recv, const std::vector<int64_t>& recv_counts,
                                 const std::vector<int64_t>& recv_offsets, CUstream_st* stream) = 0;
  // Among `ranks` (as above): every member's `bytes` at `in` into out + i * bytes for ranks[i].
  virtual absl::Status AllGatherAmong(const std::vector<int>& ranks, const void* in, int64_t bytes, void* out,
                                      CUstream_st* stream) = 0;
  // Waits for `stream`'s work so far within the job's timeout (a named error when a rank is gone).
  virtual absl::Status Synchronize(CUstream_st* stream, std::string_view what) = 0;
};

}  // namespace gemtb::gpu::embedding

#endif  // GEMTB_GPU_EMBEDDING_SHARD_EXCHANGE_H_
