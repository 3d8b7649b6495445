#include "tests/gpu/in_process_shard_exchange.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

namespace gemtb::gpu::test {

template <typename Copy>
absl::Status InProcessShardExchange::Meet(const std::vector<int>& ranks, const void* send,
                                          const std::vector<int64_t>* offsets, Copy copy) {
  if (cudaDeviceSynchronize() != cudaSuccess) return absl::InternalError("cudaDeviceSynchronize before a meeting");
  const auto self = std::find(ranks.begin(), ranks.end(), rank_);
  if (self == ranks.end()) return absl::InvalidArgumentError(absl::StrCat("ranks: ", rank_, " is not among them"));
  const size_t me = static_cast<size_t>(self - ranks.begin());
  std::string list;
  for (int q : ranks) absl::StrAppend(&list, q, ",");
  std::unique_lock<std::mutex> lock(g_.mu);
  const std::string key = absl::StrCat(list, "#", g_.calls[{rank_, list}]++);
  InProcessShardGroup::Meeting& meeting = g_.meetings[key];
  meeting.send.resize(ranks.size());
  meeting.offsets.resize(ranks.size());
  meeting.send[me] = static_cast<const char*>(send);
  meeting.offsets[me] = offsets;
  ++meeting.arrived;
  g_.cv.notify_all();
  g_.cv.wait(lock, [&] { return meeting.arrived == static_cast<int>(ranks.size()); });
  lock.unlock();
  const absl::Status status = copy(meeting, me);
  lock.lock();
  if (++meeting.left == static_cast<int>(ranks.size())) {
    g_.meetings.erase(key);
    g_.cv.notify_all();
  } else {
    g_.cv.wait(lock, [&] { return g_.meetings.count(key) == 0; });
  }
  return status;
}

absl::Status InProcessShardExchange::AllToAllV(const std::vector<int>& ranks, const void* send,
                                               const std::vector<int64_t>& send_counts,
                                               const std::vector<int64_t>& send_offsets, void* recv,
                                               const std::vector<int64_t>& recv_counts,
                                               const std::vector<int64_t>& recv_offsets, CUstream_st*) {
  (void)send_counts;
  return Meet(ranks, send, &send_offsets, [&](const InProcessShardGroup::Meeting& m, size_t me) {
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (recv_counts[i] == 0) continue;
      const char* src = m.send[i] + (*m.offsets[i])[me];
      if (cudaMemcpy(static_cast<char*>(recv) + recv_offsets[i], src, static_cast<size_t>(recv_counts[i]),
                     cudaMemcpyDeviceToDevice) != cudaSuccess) {
        return absl::InternalError("all-to-all copy");
      }
    }
    return absl::OkStatus();
  });
}

absl::Status InProcessShardExchange::AllGatherAmong(const std::vector<int>& ranks, const void* in, int64_t bytes,
                                                    void* out, CUstream_st*) {
  return Meet(ranks, in, nullptr, [&](const InProcessShardGroup::Meeting& m, size_t) {
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (bytes > 0 && cudaMemcpy(static_cast<char*>(out) + static_cast<int64_t>(i) * bytes, m.send[i],
                                  static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice) != cudaSuccess) {
        return absl::InternalError("all-gather copy");
      }
    }
    return absl::OkStatus();
  });
}

absl::Status InProcessShardExchange::Synchronize(CUstream_st*, std::string_view what) {
  return cudaDeviceSynchronize() == cudaSuccess ? absl::OkStatus()
                                                : absl::InternalError(absl::StrCat("synchronize: ", std::string(what)));
}

}  // namespace gemtb::gpu::test
