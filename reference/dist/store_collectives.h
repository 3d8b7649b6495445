// The sharded embedding executor's collectives (reference/collectives/collectives.h) across
// processes, one rank per process, through the job's TCP store. A call on a group is a numbered round
// of that group (every member calls the group's collectives in the same order), its keys
// "sc/<group ranks>/<round>/<source>[/<destination>]"; a member erases its keys of round n-1 once it
// has finished round n (every member has then set its round-n keys, so has read round n-1).
// Reductions add the members' values in group order where the result lands, as VirtualCollectives
// does, so a run across processes has the in-process run's bits. Records no communication report;
// counts the seconds spent inside its calls (sending, and waiting for the other members).
#ifndef GEMTB_REFERENCE_DIST_STORE_COLLECTIVES_H_
#define GEMTB_REFERENCE_DIST_STORE_COLLECTIVES_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/launch/tcp_store.h"
#include "reference/collectives/collectives.h"

namespace gemtb::reference::dist {

class StoreCollectives : public Collectives {
 public:
  explicit StoreCollectives(launch::TcpStoreClient& store) : store_(store) {}

  bool Holds(int rank) const override { return rank == store_.rank(); }
  void SetStep(int64_t /*step*/) override {}
  void SetPhase(CommPhase /*phase*/) override {}

  absl::StatusOr<MemberBuffers<float>> ReduceScatter(GroupClass group_class, absl::Span<const int> group,
                                                     const MemberBuffers<float>& buffers,
                                                     absl::Span<const int64_t> chunk_elements,
                                                     int64_t element_bytes) override;
  absl::StatusOr<MemberBuffers<float>> AllReduce(GroupClass group_class, absl::Span<const int> group,
                                                 const MemberBuffers<float>& buffers, int64_t element_bytes) override;

  // Seconds spent inside the collectives so far.
  double seconds() const { return seconds_; }

 protected:
  absl::StatusOr<ExchangeBuffers<float>> Exchange(GroupClass group_class, absl::Span<const int> group,
                                                  const ExchangeBuffers<float>& send, int64_t element_bytes) override;
  absl::StatusOr<ExchangeBuffers<uint8_t>> Exchange(GroupClass group_class, absl::Span<const int> group,
                                                    const ExchangeBuffers<uint8_t>& send,
                                                    int64_t element_bytes) override;
  absl::StatusOr<MemberBuffers<float>> Gather(GroupClass group_class, absl::Span<const int> group,
                                              const MemberBuffers<float>& chunks, int64_t element_bytes) override;
  absl::StatusOr<MemberBuffers<uint8_t>> Gather(GroupClass group_class, absl::Span<const int> group,
                                                const MemberBuffers<uint8_t>& chunks, int64_t element_bytes) override;

 private:
  struct Round;
  template <typename T>
  absl::StatusOr<ExchangeBuffers<T>> AllToAllOf(absl::Span<const int> group, const ExchangeBuffers<T>& send);
  template <typename T>
  absl::StatusOr<MemberBuffers<T>> AllGatherOf(absl::Span<const int> group, const MemberBuffers<T>& chunks);
  // Every member's `mine` (member `me` of `group`), by member: each member sets its own once.
  template <typename T>
  absl::StatusOr<MemberBuffers<T>> PartsOf(absl::Span<const int> group, int me, const std::vector<T>& mine);
  // The group's next round (its key prefix).
  Round Begin(absl::Span<const int> group);
  // Sets `key` to `value` for this round (erased after the group's next round).
  absl::Status Put(Round& round, const std::string& key, const std::string& value);
  template <typename T>
  absl::StatusOr<std::vector<T>> GetValues(const std::string& key);
  absl::Status Finish(Round& round);

  launch::TcpStoreClient& store_;
  std::map<std::string, int64_t> rounds_;                 // per group: rounds so far
  std::map<std::string, std::vector<std::string>> keys_;  // per group: this rank's keys of its last round
  double seconds_ = 0;
};

}  // namespace gemtb::reference::dist

#endif  // GEMTB_REFERENCE_DIST_STORE_COLLECTIVES_H_
