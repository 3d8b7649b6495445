// The engine's one priority queue: events ordered by (time, push sequence),
// so ties resolve in push order and runs are deterministic. Rescheduled events are not removed; the
// engine drops stale ones on pop by their version (lazy deletion).
#ifndef GEMTB_SIM_ENGINE_EVENT_QUEUE_H_
#define GEMTB_SIM_ENGINE_EVENT_QUEUE_H_

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <vector>

namespace gemtb::sim {

enum class EventType : uint8_t {
  kTaskEnd,     // a compute task ends (a = rank, version checked); or a zero-time task completes
  kCollEnd,     // a collective ends for all members (a = task, b = group; version: its rate's)
  kSmRelease,   // ideal network: an SM-based collective stops holding SMs (a = task, b = group)
  kMemberEnd,   // a2av_end per_rank: one member's part of an all-to-allv ends (a = task, b = rank)
  kMemberSmRelease,  // ideal network, per_rank: that member stops holding SMs (a = rank)
};

struct Event {
  double time = 0;
  EventType type = EventType::kTaskEnd;
  int32_t a = 0, b = 0;
  uint32_t version = 0;
  int32_t step = 0;  // kTaskEnd of a compute task: its step (lets the loop prefetch what it touches)
};

// A radix heap (Ahuja, Mehlhorn, Orlin, Tarjan) over the bits of the event time. A discrete-event
// simulation never schedules before the present (every push is at or after the last popped time),
// which is the one thing a radix heap needs. Bucket 0 holds the events at exactly the last popped
// time `last_`; bucket b >= 1 those whose time's bits first differ from last_'s at bit b - 1. When
// bucket 0 runs dry, the lowest non-empty bucket is redistributed around its minimum, and each
// event moves only to lower buckets, so an event is moved a few times in its life, by sequential
// passes over short arrays. (The 4-ary heap it replaces, ~13,000 entries at 16,384 ranks, missed
// the cache at every level of a sift: the largest single cost of the event loop.)
//
// Order: every bucket keeps its events in push order (a push appends the newest; a redistribution
// moves a bucket, in order, into buckets that are empty, being below the lowest non-empty one), so
// bucket 0, all at one time, pops in push order, and the minimum of a bucket by (time, sequence)
// is its first event of least time: exactly the (time, push sequence) order of a comparison heap.
//
// A push earlier than the last popped time (never made by the engine: durations are >= 0) is
// taken as at that time, so the queue stays ordered whatever it is given.
class EventQueue {
 public:
  void Push(double time, EventType type, int32_t a, int32_t b, uint32_t version = 0, int32_t step = 0) {
    const uint64_t bits = std::max(TimeBits(time), last_);
    const int k = BucketOf(bits);
    std::vector<Entry>& v = buckets_[k];
    v.push_back(Entry{bits, a, b, version, static_cast<int16_t>(step), type});
    ++size_;
    if (k > 0) Noted(k, bits, v.size() - 1);
  }
  bool Empty() const { return size_ == 0; }
  size_t Size() const { return size_; }
  // The next event to pop (the queue must not be empty). Does not move events: pushes after it may
  // still come before it.
  Event Top() const {
    if (head0_ < buckets_[0].size()) return ToEvent(buckets_[0][head0_]);
    const int k = LowestBucket();
    return ToEvent(buckets_[k][min_index_[k]]);
  }
  Event Pop() {
    if (head0_ == buckets_[0].size()) Refill();
    const Event top = ToEvent(buckets_[0][head0_]);
    ++head0_;
    --size_;
    if (head0_ == buckets_[0].size()) {
      buckets_[0].clear();
      head0_ = 0;
    }
    return top;
  }

 private:
  // No sequence number: push order is each bucket's order (above), so an entry is 24 bytes and a
  // redistribution moves a quarter less than with one.
  struct Entry {
    uint64_t time_bits;
    int32_t a, b;
    uint32_t version;
    int16_t step;  // steps are < 32000 (the engine checks)
    EventType type;
  };
  static_assert(sizeof(Entry) == 24);
  static Event ToEvent(const Entry& e) {
    return Event{std::bit_cast<double>(e.time_bits), e.type, e.a, e.b, e.version, e.step};
  }
  // A non-negative double's bits order as the double does (event times are never negative; adding
  // 0.0 turns a -0.0 into +0.0).
  static uint64_t TimeBits(double t) { return std::bit_cast<uint64_t>(t + 0.0); }
  int BucketOf(uint64_t bits) const {
    const uint64_t diff = bits ^ last_;
    return diff == 0 ? 0 : 64 - std::countl_zero(diff);
  }
  int LowestBucket() const { return std::countr_zero(nonempty_) + 1; }
  // Entry j of bucket k >= 1 was appended: it is the bucket's least-time event if it is its first or
  // strictly earlier than the least so far (a tie keeps the earlier push).
  void Noted(int k, uint64_t bits, size_t j) {
    const uint64_t bit = uint64_t{1} << (k - 1);
    if (!(nonempty_ & bit) || bits < min_bits_[k]) {
      min_bits_[k] = bits;
      min_index_[k] = j;
    }
    nonempty_ |= bit;
  }
  // Bucket 0 is empty: the lowest non-empty bucket's minimum becomes last_, and that bucket's events
  // move, in order, to the (empty) buckets below it. Each bucket's minimum is kept as events are
  // appended, so no pass searches for it.
  void Refill() {
    const int from = LowestBucket();
    last_ = min_bits_[from];
    std::vector<Entry>& v = buckets_[from];
    nonempty_ &= ~(uint64_t{1} << (from - 1));
    for (const Entry& e : v) {
      const int k = BucketOf(e.time_bits);
      std::vector<Entry>& to = buckets_[k];
      to.push_back(e);
      if (k > 0) Noted(k, e.time_bits, to.size() - 1);
    }
    v.clear();
  }
  std::array<std::vector<Entry>, 65> buckets_;
  std::array<uint64_t, 65> min_bits_{};  // per bucket >= 1 while non-empty: its least time bits
  std::array<size_t, 65> min_index_{};   // and the first entry with them
  size_t head0_ = 0;         // bucket 0 pops from here (it is cleared when drained)
  uint64_t last_ = 0;        // the time bits of bucket 0 (the last popped time once popping starts)
  uint64_t nonempty_ = 0;    // bit b - 1: bucket b >= 1 is non-empty
  size_t size_ = 0;
};

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_ENGINE_EVENT_QUEUE_H_
