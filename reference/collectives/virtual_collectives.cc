#include "reference/collectives/virtual_collectives.h"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "model/numerics/fp32_ops.h"

namespace gemtb::reference {
namespace {

absl::Status CheckGroup(absl::Span<const int> group, size_t members, const char* what) {
  if (group.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": empty group"));
  for (size_t i = 0; i < group.size(); ++i) {
    if (group[i] < 0)
      return absl::InvalidArgumentError(absl::StrCat(what, ": group[", i, "]=", group[i], " is negative"));
    for (size_t j = 0; j < i; ++j) {
      if (group[j] == group[i]) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": rank ", group[i], " appears twice in the group"));
      }
    }
  }
  if (members != group.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", members, " buffers for a group of ", group.size(), " members"));
  }
  return absl::OkStatus();
}

absl::Status CheckElementBytes(int64_t element_bytes, const char* what) {
  if (element_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": element_bytes=", element_bytes, " must be >= 1"));
  }
  return absl::OkStatus();
}

// out[e] = ((in_0[e] + in_1[e]) + in_2[e]) + ... for e in [begin, end): the documented order.
void SeqSumMembers(const MemberBuffers<float>& in, int64_t begin, int64_t end, float* out) {
  tbb::parallel_for(tbb::blocked_range<int64_t>(begin, end, 4096), [&](const tbb::blocked_range<int64_t>& range) {
    for (int64_t e = range.begin(); e < range.end(); ++e) {
      float sum = in[0][e];
      for (size_t m = 1; m < in.size(); ++m) sum = numerics::AddRn(sum, in[m][e]);
      out[e - begin] = sum;
    }
  });
}

}  // namespace

std::vector<int64_t> EvenChunks(int64_t n, int p) {
  std::vector<int64_t> chunks(static_cast<size_t>(p), n / p);
  for (int64_t i = 0; i < n % p; ++i) ++chunks[i];
  return chunks;
}

void VirtualCollectives::Record(CollectiveOp op, GroupClass group_class, absl::Span<const int> group,
                                std::vector<int64_t> send, std::vector<int64_t> recv) {
  if (report_ == nullptr || group.size() < 2) return;
  report_->collectives.push_back(CollectiveRecord{
      step_, phase_, op, group_class, std::vector<int>(group.begin(), group.end()), std::move(send), std::move(recv)});
}

template <typename T>
absl::StatusOr<ExchangeBuffers<T>> VirtualCollectives::AllToAll(GroupClass group_class, absl::Span<const int> group,
                                                                const ExchangeBuffers<T>& send, int64_t element_bytes) {
  GEMTB_RETURN_IF_ERROR(CheckGroup(group, send.size(), "all_to_all"));
  GEMTB_RETURN_IF_ERROR(CheckElementBytes(element_bytes, "all_to_all"));
  const size_t p = group.size();
  for (size_t i = 0; i < p; ++i) {
    if (send[i].size() != p) {
      return absl::InvalidArgumentError(
          absl::StrCat("all_to_all: member ", i, " has ", send[i].size(), " messages for ", p, " members"));
    }
  }
  ExchangeBuffers<T> recv(p, std::vector<std::vector<T>>(p));
  std::vector<int64_t> sent(p, 0), received(p, 0);
  for (size_t i = 0; i < p; ++i) {
    for (size_t j = 0; j < p; ++j) {
      recv[j][i] = send[i][j];
      if (i == j) continue;
      const int64_t bytes = static_cast<int64_t>(send[i][j].size()) * element_bytes;
      sent[i] += bytes;
      received[j] += bytes;
    }
  }
  Record(CollectiveOp::kAllToAll, group_class, group, std::move(sent), std::move(received));
  return recv;
}

template <typename T>
absl::StatusOr<MemberBuffers<T>> VirtualCollectives::AllGather(GroupClass group_class, absl::Span<const int> group,
                                                               const MemberBuffers<T>& chunks, int64_t element_bytes) {
  GEMTB_RETURN_IF_ERROR(CheckGroup(group, chunks.size(), "all_gather"));
  GEMTB_RETURN_IF_ERROR(CheckElementBytes(element_bytes, "all_gather"));
  const size_t p = group.size();
  std::vector<T> gathered;
  int64_t total = 0;
  for (const std::vector<T>& c : chunks) {
    gathered.insert(gathered.end(), c.begin(), c.end());
    total += static_cast<int64_t>(c.size());
  }
  std::vector<int64_t> sent(p), received(p);
  for (size_t i = 0; i < p; ++i) {
    const int64_t own = static_cast<int64_t>(chunks[i].size());
    sent[i] = static_cast<int64_t>(p - 1) * own * element_bytes;
    received[i] = (total - own) * element_bytes;
  }
  Record(CollectiveOp::kAllGather, group_class, group, std::move(sent), std::move(received));
  return MemberBuffers<T>(p, gathered);
}

absl::StatusOr<MemberBuffers<float>> VirtualCollectives::ReduceScatter(GroupClass group_class,
                                                                       absl::Span<const int> group,
                                                                       const MemberBuffers<float>& buffers,
                                                                       absl::Span<const int64_t> chunk_elements,
                                                                       int64_t element_bytes) {
  GEMTB_RETURN_IF_ERROR(CheckGroup(group, buffers.size(), "reduce_scatter"));
  GEMTB_RETURN_IF_ERROR(CheckElementBytes(element_bytes, "reduce_scatter"));
  const size_t p = group.size();
  if (chunk_elements.size() != p) {
    return absl::InvalidArgumentError(
        absl::StrCat("reduce_scatter: ", chunk_elements.size(), " chunk sizes for ", p, " members"));
  }
  int64_t n = 0;
  for (int64_t c : chunk_elements) {
    if (c < 0) return absl::InvalidArgumentError(absl::StrCat("reduce_scatter: negative chunk size ", c));
    n += c;
  }
  for (size_t i = 0; i < p; ++i) {
    if (static_cast<int64_t>(buffers[i].size()) != n) {
      return absl::InvalidArgumentError(absl::StrCat("reduce_scatter: member ", i, " buffer has ", buffers[i].size(),
                                                     " elements, chunks sum to ", n));
    }
  }
  MemberBuffers<float> out(p);
  std::vector<int64_t> sent(p), received(p);
  int64_t begin = 0;
  for (size_t i = 0; i < p; ++i) {
    out[i].resize(static_cast<size_t>(chunk_elements[i]));
    SeqSumMembers(buffers, begin, begin + chunk_elements[i], out[i].data());
    begin += chunk_elements[i];
    sent[i] = (n - chunk_elements[i]) * element_bytes;
    received[i] = static_cast<int64_t>(p - 1) * chunk_elements[i] * element_bytes;
  }
  Record(CollectiveOp::kReduceScatter, group_class, group, std::move(sent), std::move(received));
  return out;
}

absl::StatusOr<MemberBuffers<float>> VirtualCollectives::AllReduce(GroupClass group_class, absl::Span<const int> group,
                                                                   const MemberBuffers<float>& buffers,
                                                                   int64_t element_bytes) {
  GEMTB_RETURN_IF_ERROR(CheckGroup(group, buffers.size(), "all_reduce"));
  GEMTB_RETURN_IF_ERROR(CheckElementBytes(element_bytes, "all_reduce"));
  const size_t p = group.size();
  const int64_t n = static_cast<int64_t>(buffers[0].size());
  for (size_t i = 1; i < p; ++i) {
    if (static_cast<int64_t>(buffers[i].size()) != n) {
      return absl::InvalidArgumentError(
          absl::StrCat("all_reduce: member ", i, " buffer has ", buffers[i].size(), " elements, member 0 has ", n));
    }
  }
  std::vector<float> sum(static_cast<size_t>(n));
  SeqSumMembers(buffers, 0, n, sum.data());
  const std::vector<int64_t> chunks = EvenChunks(n, static_cast<int>(p));
  std::vector<int64_t> sent(p), received(p);
  for (size_t i = 0; i < p; ++i) {
    sent[i] = ((n - chunks[i]) + static_cast<int64_t>(p - 1) * chunks[i]) * element_bytes;
    received[i] = sent[i];
  }
  Record(CollectiveOp::kAllReduce, group_class, group, std::move(sent), std::move(received));
  return MemberBuffers<float>(p, sum);
}

template <typename T>
absl::StatusOr<MemberBuffers<T>> VirtualCollectives::Broadcast(GroupClass group_class, absl::Span<const int> group,
                                                               int root, const std::vector<T>& buffer,
                                                               int64_t element_bytes) {
  GEMTB_RETURN_IF_ERROR(CheckGroup(group, group.size(), "broadcast"));
  GEMTB_RETURN_IF_ERROR(CheckElementBytes(element_bytes, "broadcast"));
  const size_t p = group.size();
  if (root < 0 || static_cast<size_t>(root) >= p) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast: root ", root, " is not a member index of [0, ", p, ")"));
  }
  const int64_t bytes = static_cast<int64_t>(buffer.size()) * element_bytes;
  std::vector<int64_t> sent(p, 0), received(p, bytes);
  sent[root] = static_cast<int64_t>(p - 1) * bytes;
  received[root] = 0;
  Record(CollectiveOp::kBroadcast, group_class, group, std::move(sent), std::move(received));
  return MemberBuffers<T>(p, buffer);
}

template absl::StatusOr<ExchangeBuffers<float>> VirtualCollectives::AllToAll<float>(GroupClass, absl::Span<const int>,
                                                                                    const ExchangeBuffers<float>&,
                                                                                    int64_t);
template absl::StatusOr<ExchangeBuffers<uint8_t>> VirtualCollectives::AllToAll<uint8_t>(GroupClass,
                                                                                        absl::Span<const int>,
                                                                                        const ExchangeBuffers<uint8_t>&,
                                                                                        int64_t);
template absl::StatusOr<MemberBuffers<float>> VirtualCollectives::AllGather<float>(GroupClass, absl::Span<const int>,
                                                                                   const MemberBuffers<float>&,
                                                                                   int64_t);
template absl::StatusOr<MemberBuffers<uint8_t>> VirtualCollectives::AllGather<uint8_t>(GroupClass,
                                                                                       absl::Span<const int>,
                                                                                       const MemberBuffers<uint8_t>&,
                                                                                       int64_t);
template absl::StatusOr<MemberBuffers<float>> VirtualCollectives::Broadcast<float>(GroupClass, absl::Span<const int>,
                                                                                   int, const std::vector<float>&,
                                                                                   int64_t);
template absl::StatusOr<MemberBuffers<uint8_t>> VirtualCollectives::Broadcast<uint8_t>(GroupClass,
                                                                                       absl::Span<const int>, int,
                                                                                       const std::vector<uint8_t>&,
                                                                                       int64_t);

}  // namespace gemtb::reference
