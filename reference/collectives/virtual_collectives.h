// In-process collectives over virtual ranks.
//
// The oracle holds R rank objects; these functions move the bytes a real collective would move
// between them and reduce exactly as documented here, so that a sharded run is a fixed sequence of
// fp32 operations. A group is an ordered list of distinct global ranks; every buffer argument holds
// one entry per member, in group order.
//
// Reduction order (reduce-scatter, all-reduce): element by element, the seqsum of the members'
// values in group order, the first term taken as is: ((x_0 + x_1) + x_2) + ..., one correctly
// rounded fp32 addition each (an empty sum, impossible here, would be +0). A member that has nothing
// to contribute passes +0. Ring or tree orders of real libraries differ; a GPU run is bit-exact with
// the oracle only with deterministic collectives (A2A/AG, then this seqsum locally).
//
// Every call appends one record to the CommReport (if any) with the current step and phase and the
// bytes each member sends to / receives from the others as a direct exchange:
//   all-to-all(v)   member i sends sum_{j != i} |send[i][j]|, receives sum_{j != i} |send[j][i]|;
//   all-gather(v)   member i sends (p-1)*|chunk_i|, receives sum_{j != i} |chunk_j|;
//   reduce-scatter  buffer of n elements, member i keeps chunk c_i: sends n - c_i, receives (p-1)*c_i
//                   (= (p-1)/p of the buffer for equal chunks);
//   all-reduce      a reduce-scatter into EvenChunks(n, p) followed by an all-gather of them:
//                   sends = receives = (n - c_i) + (p-1)*c_i (= 2(p-1)/p of the buffer when p | n);
//   broadcast       the root sends (p-1)*S, every other member receives S.
// Sizes are elements times `element_bytes` (4 for fp32 activations in the oracle, the storage size
// e_w for weights, 1 for serialised bytes). A group of one member moves nothing and is not recorded.
// Calls are not thread-safe: one thread drives the collectives, the per-rank work between them may
// run in parallel.
#ifndef GEMTB_REFERENCE_COLLECTIVES_VIRTUAL_COLLECTIVES_H_
#define GEMTB_REFERENCE_COLLECTIVES_VIRTUAL_COLLECTIVES_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "reference/collectives/collectives.h"
#include "reference/collectives/comm_report.h"

namespace gemtb::reference {

// n elements split over p members as evenly as possible, the first n mod p chunks one larger.
std::vector<int64_t> EvenChunks(int64_t n, int p);

// The in-process implementation of Collectives: this process holds every rank.
class VirtualCollectives : public Collectives {
 public:
  explicit VirtualCollectives(CommReport* report = nullptr) : report_(report) {}

  bool Holds(int /*rank*/) const override { return true; }
  void SetStep(int64_t step) override { step_ = step; }
  void SetPhase(CommPhase phase) override { phase_ = phase; }
  int64_t step() const { return step_; }
  CommPhase phase() const { return phase_; }

  // send[i][j]: from member i to member j. Returns recv[j][i] = send[i][j] (a member's message to
  // itself is delivered but not counted).
  template <typename T>
  absl::StatusOr<ExchangeBuffers<T>> AllToAll(GroupClass group_class, absl::Span<const int> group,
                                              const ExchangeBuffers<T>& send, int64_t element_bytes);

  // Every member receives the concatenation of all chunks in group order (chunks may differ in size).
  template <typename T>
  absl::StatusOr<MemberBuffers<T>> AllGather(GroupClass group_class, absl::Span<const int> group,
                                             const MemberBuffers<T>& chunks, int64_t element_bytes);

  // Every member contributes a buffer of n = sum(chunk_elements) floats; member i receives elements
  // [c_0 + ... + c_{i-1}, + c_i) reduced over the members in group order.
  absl::StatusOr<MemberBuffers<float>> ReduceScatter(GroupClass group_class, absl::Span<const int> group,
                                                     const MemberBuffers<float>& buffers,
                                                     absl::Span<const int64_t> chunk_elements,
                                                     int64_t element_bytes) override;

  // Every member receives the whole buffer reduced over the members in group order.
  absl::StatusOr<MemberBuffers<float>> AllReduce(GroupClass group_class, absl::Span<const int> group,
                                                 const MemberBuffers<float>& buffers, int64_t element_bytes) override;

  // Every member receives member `root`'s buffer (root indexes the group).
  template <typename T>
  absl::StatusOr<MemberBuffers<T>> Broadcast(GroupClass group_class, absl::Span<const int> group, int root,
                                             const std::vector<T>& buffer, int64_t element_bytes);

 protected:
  absl::StatusOr<ExchangeBuffers<float>> Exchange(GroupClass c, absl::Span<const int> g,
                                                  const ExchangeBuffers<float>& s, int64_t e) override {
    return AllToAll<float>(c, g, s, e);
  }
  absl::StatusOr<ExchangeBuffers<uint8_t>> Exchange(GroupClass c, absl::Span<const int> g,
                                                    const ExchangeBuffers<uint8_t>& s, int64_t e) override {
    return AllToAll<uint8_t>(c, g, s, e);
  }
  absl::StatusOr<MemberBuffers<float>> Gather(GroupClass c, absl::Span<const int> g, const MemberBuffers<float>& s,
                                              int64_t e) override {
    return AllGather<float>(c, g, s, e);
  }
  absl::StatusOr<MemberBuffers<uint8_t>> Gather(GroupClass c, absl::Span<const int> g, const MemberBuffers<uint8_t>& s,
                                                int64_t e) override {
    return AllGather<uint8_t>(c, g, s, e);
  }

 private:
  void Record(CollectiveOp op, GroupClass group_class, absl::Span<const int> group, std::vector<int64_t> send,
              std::vector<int64_t> recv);

  CommReport* report_;
  int64_t step_ = 0;
  CommPhase phase_ = CommPhase::kForward;
};

extern template absl::StatusOr<ExchangeBuffers<float>> VirtualCollectives::AllToAll<float>(
    GroupClass, absl::Span<const int>, const ExchangeBuffers<float>&, int64_t);
extern template absl::StatusOr<ExchangeBuffers<uint8_t>> VirtualCollectives::AllToAll<uint8_t>(
    GroupClass, absl::Span<const int>, const ExchangeBuffers<uint8_t>&, int64_t);
extern template absl::StatusOr<MemberBuffers<float>> VirtualCollectives::AllGather<float>(GroupClass,
                                                                                          absl::Span<const int>,
                                                                                          const MemberBuffers<float>&,
                                                                                          int64_t);
extern template absl::StatusOr<MemberBuffers<uint8_t>> VirtualCollectives::AllGather<uint8_t>(
    GroupClass, absl::Span<const int>, const MemberBuffers<uint8_t>&, int64_t);
extern template absl::StatusOr<MemberBuffers<float>> VirtualCollectives::Broadcast<float>(GroupClass,
                                                                                          absl::Span<const int>, int,
                                                                                          const std::vector<float>&,
                                                                                          int64_t);
extern template absl::StatusOr<MemberBuffers<uint8_t>> VirtualCollectives::Broadcast<uint8_t>(
    GroupClass, absl::Span<const int>, int, const std::vector<uint8_t>&, int64_t);

}  // namespace gemtb::reference

#endif  // GEMTB_REFERENCE_COLLECTIVES_VIRTUAL_COLLECTIVES_H_
