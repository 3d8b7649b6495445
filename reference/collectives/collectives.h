// The collectives the sharded embedding executor (reference/sharding) runs on, as an interface with
// two implementations: VirtualCollectives moves every rank's buffers inside one process, and
// reference/dist's StoreCollectives moves one process's buffers through the job's TCP store. Both
// return the same bits: the reductions are seqsums in group order, done where the result lands.
//
// A process holds some of the ranks' data (Holds). Buffer arguments have one entry per group member
// in group order; entries of members this process does not hold are ignored, and the results of such
// members come back empty. A process that holds no member of a group may call a collective on it: it
// moves nothing and returns empty buffers. Every process calls the collectives of the groups it is in
// in the same order as the other members do.
#ifndef GEMTB_REFERENCE_COLLECTIVES_COLLECTIVES_H_
#define GEMTB_REFERENCE_COLLECTIVES_COLLECTIVES_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "reference/collectives/comm_report.h"

namespace gemtb::reference {

// One buffer per group member, in group order.
template <typename T>
using MemberBuffers = std::vector<std::vector<T>>;
// All-to-all payloads: [source member][destination member].
template <typename T>
using ExchangeBuffers = std::vector<std::vector<std::vector<T>>>;

class Collectives {
 public:
  virtual ~Collectives() = default;

  // Whether this process holds global rank `rank`'s data.
  virtual bool Holds(int rank) const = 0;
  // The step and phase that the communication report's records carry.
  virtual void SetStep(int64_t step) = 0;
  virtual void SetPhase(CommPhase phase) = 0;

  // recv[j][i] = send[i][j].
  template <typename T>
  absl::StatusOr<ExchangeBuffers<T>> AllToAll(GroupClass group_class, absl::Span<const int> group,
                                              const ExchangeBuffers<T>& send, int64_t element_bytes) {
    return Exchange(group_class, group, send, element_bytes);
  }
  // Every member receives the concatenation of all chunks in group order.
  template <typename T>
  absl::StatusOr<MemberBuffers<T>> AllGather(GroupClass group_class, absl::Span<const int> group,
                                             const MemberBuffers<T>& chunks, int64_t element_bytes) {
    return Gather(group_class, group, chunks, element_bytes);
  }
  // Member i receives elements [c_0 + ... + c_{i-1}, + c_i) of the buffers, summed in group order.
  virtual absl::StatusOr<MemberBuffers<float>> ReduceScatter(GroupClass group_class, absl::Span<const int> group,
                                                             const MemberBuffers<float>& buffers,
                                                             absl::Span<const int64_t> chunk_elements,
                                                             int64_t element_bytes) = 0;
  // Every member receives the whole buffer summed in group order.
  virtual absl::StatusOr<MemberBuffers<float>> AllReduce(GroupClass group_class, absl::Span<const int> group,
                                                         const MemberBuffers<float>& buffers,
                                                         int64_t element_bytes) = 0;

 protected:
  virtual absl::StatusOr<ExchangeBuffers<float>> Exchange(GroupClass group_class, absl::Span<const int> group,
                                                          const ExchangeBuffers<float>& send,
                                                          int64_t element_bytes) = 0;
  virtual absl::StatusOr<ExchangeBuffers<uint8_t>> Exchange(GroupClass group_class, absl::Span<const int> group,
                                                            const ExchangeBuffers<uint8_t>& send,
                                                            int64_t element_bytes) = 0;
  virtual absl::StatusOr<MemberBuffers<float>> Gather(GroupClass group_class, absl::Span<const int> group,
                                                      const MemberBuffers<float>& chunks, int64_t element_bytes) = 0;
  virtual absl::StatusOr<MemberBuffers<uint8_t>> Gather(GroupClass group_class, absl::Span<const int> group,
                                                        const MemberBuffers<uint8_t>& chunks,
                                                        int64_t element_bytes) = 0;
};

}  // namespace gemtb::reference

#endif  // GEMTB_REFERENCE_COLLECTIVES_COLLECTIVES_H_
