#include "reference/dist/store_collectives.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/numerics/host_device.h"

namespace gemtb::reference::dist {
namespace {

template <typename T>
std::string Bytes(const T* data, size_t n) {
  return std::string(reinterpret_cast<const char*>(data), n * sizeof(T));
}

template <typename T>
absl::StatusOr<std::vector<T>> Values(const std::string& bytes, const std::string& key) {
  if (bytes.size() % sizeof(T) != 0)
    return absl::DataLossError(
        absl::StrCat("store collectives: ", key, " holds ", bytes.size(), " bytes, not whole elements"));
  std::vector<T> v(bytes.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

// This rank's index in `group`, or -1.
int IndexOf(absl::Span<const int> group, int rank) {
  const auto it = std::find(group.begin(), group.end(), rank);
  return it == group.end() ? -1 : static_cast<int>(it - group.begin());
}

// parts[0] + parts[1] + ... in group order (the first as is), as VirtualCollectives adds; `what`
// names the collective in the error for a part of another length.
absl::StatusOr<std::vector<float>> SumInGroupOrder(const MemberBuffers<float>& parts, const char* what) {
  std::vector<float> sum = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::vector<float>& part = parts[i];
    if (part.size() != sum.size())
      return absl::DataLossError(
          absl::StrCat(what, ": member ", i, " sent ", part.size(), " elements, member 0 ", sum.size()));
    for (size_t e = 0; e < sum.size(); ++e) sum[e] = numerics::AddRn(sum[e], part[e]);
  }
  return sum;
}

}  // namespace

// One collective call of this rank: the group's name, the round's key prefix, the keys it set.
struct StoreCollectives::Round {
  std::string group;
  std::string prefix;
  std::vector<std::string> keys;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
};

StoreCollectives::Round StoreCollectives::Begin(absl::Span<const int> group) {
  Round round;
  round.group = absl::StrJoin(group, ",");
  round.prefix = absl::StrCat("sc/", round.group, "/", rounds_[round.group]++, "/");
  return round;
}

absl::Status StoreCollectives::Put(Round& round, const std::string& key, const std::string& value) {
  round.keys.push_back(key);
  return store_.Set(key, value);
}

template <typename T>
absl::StatusOr<std::vector<T>> StoreCollectives::GetValues(const std::string& key) {
  absl::StatusOr<std::string> bytes = store_.Get(key);
  if (!bytes.ok()) return bytes.status();
  return Values<T>(*bytes, key);
}

absl::Status StoreCollectives::Finish(Round& round) {
  for (const std::string& key : keys_[round.group])
    if (absl::Status s = store_.Erase(key); !s.ok()) return s;
  keys_[round.group] = std::move(round.keys);
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - round.start).count();
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<ExchangeBuffers<T>> StoreCollectives::AllToAllOf(absl::Span<const int> group,
                                                                const ExchangeBuffers<T>& send) {
  const size_t p = group.size();
  ExchangeBuffers<T> recv(p, std::vector<std::vector<T>>(p));
  const int me = IndexOf(group, store_.rank());
  if (me < 0 || p < 2) {
    if (me >= 0) recv[0][0] = send[0][0];
    return recv;
  }
  if (send.size() != p || send[me].size() != p)
    return absl::InvalidArgumentError(
        absl::StrCat("all_to_all: member ", me, " has no message for each of ", p, " members"));
  Round round = Begin(group);
  for (size_t j = 0; j < p; ++j) {
    if (static_cast<int>(j) == me) continue;
    const std::vector<T>& m = send[me][j];
    if (absl::Status s = Put(round, absl::StrCat(round.prefix, me, "/", j), Bytes(m.data(), m.size())); !s.ok())
      return s;
  }
  for (size_t i = 0; i < p; ++i) {
    if (static_cast<int>(i) == me) {
      recv[me][i] = send[me][me];
      continue;
    }
    absl::StatusOr<std::vector<T>> v = GetValues<T>(absl::StrCat(round.prefix, i, "/", me));
    if (!v.ok()) return v.status();
    recv[me][i] = *std::move(v);
  }
  if (absl::Status s = Finish(round); !s.ok()) return s;
  return recv;
}

template <typename T>
absl::StatusOr<MemberBuffers<T>> StoreCollectives::PartsOf(absl::Span<const int> group, int me,
                                                           const std::vector<T>& mine) {
  const size_t p = group.size();
  MemberBuffers<T> parts(p);
  parts[me] = mine;
  if (p < 2) return parts;
  Round round = Begin(group);
  if (absl::Status s = Put(round, absl::StrCat(round.prefix, me), Bytes(mine.data(), mine.size())); !s.ok())
    return s;
  for (size_t i = 0; i < p; ++i) {
    if (static_cast<int>(i) == me) continue;
    absl::StatusOr<std::vector<T>> v = GetValues<T>(absl::StrCat(round.prefix, i));
    if (!v.ok()) return v.status();
    parts[i] = *std::move(v);
  }
  if (absl::Status s = Finish(round); !s.ok()) return s;
  return parts;
}

template <typename T>
absl::StatusOr<MemberBuffers<T>> StoreCollectives::AllGatherOf(absl::Span<const int> group,
                                                               const MemberBuffers<T>& chunks) {
  const size_t p = group.size();
  MemberBuffers<T> out(p);
  const int me = IndexOf(group, store_.rank());
  if (me < 0) return out;
  if (chunks.size() != p)
    return absl::InvalidArgumentError(absl::StrCat("all_gather: ", chunks.size(), " chunks for ", p, " members"));
  absl::StatusOr<MemberBuffers<T>> parts = PartsOf<T>(group, me, chunks[me]);
  if (!parts.ok()) return parts.status();
  for (const std::vector<T>& part : *parts) out[me].insert(out[me].end(), part.begin(), part.end());
  return out;
}

absl::StatusOr<ExchangeBuffers<float>> StoreCollectives::Exchange(GroupClass, absl::Span<const int> group,
                                                                  const ExchangeBuffers<float>& send, int64_t) {
  return AllToAllOf<float>(group, send);
}
absl::StatusOr<ExchangeBuffers<uint8_t>> StoreCollectives::Exchange(GroupClass, absl::Span<const int> group,
                                                                    const ExchangeBuffers<uint8_t>& send, int64_t) {
  return AllToAllOf<uint8_t>(group, send);
}
absl::StatusOr<MemberBuffers<float>> StoreCollectives::Gather(GroupClass, absl::Span<const int> group,
                                                              const MemberBuffers<float>& chunks, int64_t) {
  return AllGatherOf<float>(group, chunks);
}
absl::StatusOr<MemberBuffers<uint8_t>> StoreCollectives::Gather(GroupClass, absl::Span<const int> group,
                                                                const MemberBuffers<uint8_t>& chunks, int64_t) {
  return AllGatherOf<uint8_t>(group, chunks);
}

absl::StatusOr<MemberBuffers<float>> StoreCollectives::ReduceScatter(GroupClass, absl::Span<const int> group,
                                                                     const MemberBuffers<float>& buffers,
                                                                     absl::Span<const int64_t> chunk_elements,
                                                                     int64_t) {
  const size_t p = group.size();
  const int me = IndexOf(group, store_.rank());
  if (me < 0) return MemberBuffers<float>(p);
  if (buffers.size() != p || chunk_elements.size() != p)
    return absl::InvalidArgumentError(absl::StrCat("reduce_scatter: ", buffers.size(), " buffers and ",
                                                   chunk_elements.size(), " chunk sizes for ", p, " members"));
  std::vector<int64_t> begin(p + 1, 0);
  for (size_t j = 0; j < p; ++j) begin[j + 1] = begin[j] + chunk_elements[j];
  if (static_cast<int64_t>(buffers[me].size()) != begin[p])
    return absl::InvalidArgumentError(absl::StrCat("reduce_scatter: member ", me, " buffer has ", buffers[me].size(),
                                                   " elements, chunks sum to ", begin[p]));
  // Member j's chunk of every member's buffer goes to member j, which adds them in group order.
  ExchangeBuffers<float> send(p, std::vector<std::vector<float>>(p));
  for (size_t j = 0; j < p; ++j) send[me][j].assign(buffers[me].begin() + begin[j], buffers[me].begin() + begin[j + 1]);
  absl::StatusOr<ExchangeBuffers<float>> parts = AllToAllOf<float>(group, send);
  if (!parts.ok()) return parts.status();
  MemberBuffers<float> out(p);
  absl::StatusOr<std::vector<float>> sum = SumInGroupOrder((*parts)[me], "reduce_scatter");
  if (!sum.ok()) return sum.status();
  out[me] = *std::move(sum);
  return out;
}

absl::StatusOr<MemberBuffers<float>> StoreCollectives::AllReduce(GroupClass, absl::Span<const int> group,
                                                                 const MemberBuffers<float>& buffers, int64_t) {
  const size_t p = group.size();
  const int me = IndexOf(group, store_.rank());
  if (me < 0) return MemberBuffers<float>(p);
  if (buffers.size() != p)
    return absl::InvalidArgumentError(absl::StrCat("all_reduce: ", buffers.size(), " buffers for ", p, " members"));
  // Every member's whole buffer to every member (one copy in the store each), each adding them in
  // group order.
  absl::StatusOr<MemberBuffers<float>> parts = PartsOf<float>(group, me, buffers[me]);
  if (!parts.ok()) return parts.status();
  MemberBuffers<float> out(p);
  absl::StatusOr<std::vector<float>> sum = SumInGroupOrder(*parts, "all_reduce");
  if (!sum.ok()) return sum.status();
  out[me] = *std::move(sum);
  return out;
}

}  // namespace gemtb::reference::dist
