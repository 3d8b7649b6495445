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

}  // namespace

// One collective call of this rank: the group's name, its round and this rank's index.
struct StoreCollectives::Round {
  std::string group;
  std::string prefix;
  int me = -1;
  std::vector<std::string> keys;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
};

absl::Status StoreCollectives::Put(Round& round, const std::string& key, const std::string& value) {
  round.keys.push_back(key);
  return store_.Set(key, value);
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
  Round round;
  round.me = IndexOf(group, store_.rank());
  if (round.me < 0 || p < 2) {
    if (round.me >= 0) recv[0][0] = send[0][0];
    return recv;
  }
  if (send.size() != p || send[round.me].size() != p)
    return absl::InvalidArgumentError(
        absl::StrCat("all_to_all: member ", round.me, " has no message for each of ", p, " members"));
  round.group = absl::StrJoin(group, ",");
  round.prefix = absl::StrCat("sc/", round.group, "/", rounds_[round.group]++, "/");
  const int me = round.me;
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
    const std::string key = absl::StrCat(round.prefix, i, "/", me);
    absl::StatusOr<std::string> bytes = store_.Get(key);
    if (!bytes.ok()) return bytes.status();
    absl::StatusOr<std::vector<T>> v = Values<T>(*bytes, key);
    if (!v.ok()) return v.status();
    recv[me][i] = *std::move(v);
  }
  if (absl::Status s = Finish(round); !s.ok()) return s;
  return recv;
}

template <typename T>
absl::StatusOr<MemberBuffers<T>> StoreCollectives::AllGatherOf(absl::Span<const int> group,
                                                               const MemberBuffers<T>& chunks) {
  const size_t p = group.size();
  MemberBuffers<T> out(p);
  Round round;
  round.me = IndexOf(group, store_.rank());
  if (round.me < 0) return out;
  if (chunks.size() != p)
    return absl::InvalidArgumentError(absl::StrCat("all_gather: ", chunks.size(), " chunks for ", p, " members"));
  const int me = round.me;
  if (p < 2) {
    out[0] = chunks[0];
    return out;
  }
  round.group = absl::StrJoin(group, ",");
  round.prefix = absl::StrCat("sc/", round.group, "/", rounds_[round.group]++, "/");
  if (absl::Status s = Put(round, absl::StrCat(round.prefix, me), Bytes(chunks[me].data(), chunks[me].size())); !s.ok())
    return s;
  for (size_t i = 0; i < p; ++i) {
    if (static_cast<int>(i) == me) {
      out[me].insert(out[me].end(), chunks[me].begin(), chunks[me].end());
      continue;
    }
    const std::string key = absl::StrCat(round.prefix, i);
    absl::StatusOr<std::string> bytes = store_.Get(key);
    if (!bytes.ok()) return bytes.status();
    absl::StatusOr<std::vector<T>> v = Values<T>(*bytes, key);
    if (!v.ok()) return v.status();
    out[me].insert(out[me].end(), v->begin(), v->end());
  }
  if (absl::Status s = Finish(round); !s.ok()) return s;
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
  std::vector<float>& sum = out[me];
  sum = (*parts)[me][0];
  for (size_t i = 1; i < p; ++i) {
    const std::vector<float>& part = (*parts)[me][i];
    if (part.size() != sum.size())
      return absl::DataLossError(
          absl::StrCat("reduce_scatter: member ", i, " sent ", part.size(), " elements, not ", sum.size()));
    for (size_t e = 0; e < sum.size(); ++e) sum[e] = numerics::AddRn(sum[e], part[e]);
  }
  return out;
}

absl::StatusOr<MemberBuffers<float>> StoreCollectives::AllReduce(GroupClass group_class, absl::Span<const int> group,
                                                                 const MemberBuffers<float>& buffers, int64_t) {
  const size_t p = group.size();
  const int me = IndexOf(group, store_.rank());
  if (me < 0) return MemberBuffers<float>(p);
  if (buffers.size() != p)
    return absl::InvalidArgumentError(absl::StrCat("all_reduce: ", buffers.size(), " buffers for ", p, " members"));
  // Every member's whole buffer to every member, each adding them in group order.
  ExchangeBuffers<float> send(p, std::vector<std::vector<float>>(p, buffers[me]));
  absl::StatusOr<ExchangeBuffers<float>> parts = Exchange(group_class, group, send, 4);
  if (!parts.ok()) return parts.status();
  MemberBuffers<float> out(p);
  std::vector<float>& sum = out[me];
  sum = (*parts)[me][0];
  for (size_t i = 1; i < p; ++i) {
    const std::vector<float>& part = (*parts)[me][i];
    if (part.size() != sum.size())
      return absl::DataLossError(
          absl::StrCat("all_reduce: member ", i, " has ", part.size(), " elements, member 0 ", sum.size()));
    for (size_t e = 0; e < sum.size(); ++e) sum[e] = numerics::AddRn(sum[e], part[e]);
  }
  return out;
}

}  // namespace gemtb::reference::dist
