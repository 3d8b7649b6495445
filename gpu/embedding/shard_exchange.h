// What a sharded embedding module (sharded_tbe.h) needs from the ranks of its MP group: two
// collectives in stream order. The module does not know who carries them: gpu/comm's NCCL groups,
// or the tests' ranks in one process.
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

  virtual int position() const = 0;    // this rank's place in the MP group
  virtual int group_size() const = 0;  // M

  // All-to-all of bytes in the MP group: member q's receives send[send_offsets[q], + send_counts[q])
  // of every member p at recv + recv_offsets[p] (recv_counts[p] bytes; both sides agree on them).
  virtual absl::Status AllToAllV(const void* send, const std::vector<int64_t>& send_counts,
                                 const std::vector<int64_t>& send_offsets, void* recv,
                                 const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_offsets,
                                 CUstream_st* stream) = 0;
  // Among the MP-group positions `members` (distinct, this one among them, the same list on
  // each): every member's `count` floats at `in` into `out`, member members[i]'s at out + i * count.
  virtual absl::Status AllGatherAmong(const std::vector<int>& members, const float* in, int64_t count, float* out,
                                      CUstream_st* stream) = 0;
  // Waits for `stream`'s work so far within the job's timeout (a named error when a rank is gone).
  virtual absl::Status Synchronize(CUstream_st* stream, std::string_view what) = 0;
};

}  // namespace gemtb::gpu::embedding

#endif  // GEMTB_GPU_EMBEDDING_SHARD_EXCHANGE_H_
