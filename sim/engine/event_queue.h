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

// The queue stores events as they are (24 bytes): a pop copies a stored record whole, so the
// engine's reads of its fields come from one store each (an event assembled field by field and then
// copied out in 16-byte halves stalled every pop on a failed store-to-load forward).
struct Event {
  double time = 0;
  int32_t a = 0, b = 0;
  uint32_t version = 0;
  int16_t step = 0;  // kTaskEnd of a compute task: its step (lets the loop prefetch what it touches); < 32000
  EventType type = EventType::kTaskEnd;
};
static_assert(sizeof(Event) == 24);

// A radix heap (Ahuja, Mehlhorn, Orlin, Tarjan) over the bits of the event time, with radix 256. A
// discrete-event simulation never schedules before the present (every push is at or after the last
// popped time), which is the one thing a radix heap needs. Bucket 0 holds the events at exactly the
// last popped time `last_`. The others are indexed by (L, d): the highest 8-bit digit L at which an
// event's time bits differ from last_'s, and the event's own digit d there. Every event is at or
// after last_, so bucket (L, d) holds only times above those of every bucket (L', d') with L' < L,
// or L' = L and d' < d: index order is time order. When bucket 0 runs dry, the lowest non-empty
// bucket's minimum becomes last_ and that bucket moves to the (empty) buckets below it, each event
// to a lower digit level. Events microseconds to milliseconds apart at a simulated second differ
// from bit ~30 to ~45, so the digit size sets how often an event moves on its way to bucket 0:
// gem-default at 4,096 ranks moved each event 3.6 times with 4-bit digits and 2.4 times with 8-bit
// ones (and more with single bits, the textbook radix heap). A summary word over the 32 words of
// non-empty flags finds the lowest bucket in two bit scans. (The 4-ary heap before the radix heap,
// ~13,000 entries at 16,384 ranks, missed the cache at every level of a sift.)
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
    std::vector<Event>& v = buckets_[k];
    v.push_back(Event{std::bit_cast<double>(bits), a, b, version, static_cast<int16_t>(step), type});
    ++size_;
    if (k > 0) Noted(k, bits, v.size() - 1);
  }
  bool Empty() const { return size_ == 0; }
  size_t Size() const { return size_; }
  // The next event to pop (the queue must not be empty), valid until the next push or pop. Does not
  // move events: pushes after it may still come before it.
  const Event& Top() const {
    if (head0_ < buckets_[0].size()) return buckets_[0][head0_];
    const int k = LowestBucket();
    return buckets_[k][min_index_[k]];
  }
  Event Pop() {
    if (head0_ == buckets_[0].size()) {
      const int from = LowestBucket();
      std::vector<Event>& v = buckets_[from];
      if (v.size() == 1) {
        // A lone event (most refills at the bottom levels): it pops from where it is, and last_
        // moves to its time as a refill would.
        last_ = StoredBits(v[0].time);
        const Event top = v[0];
        v.clear();
        Emptied(from);
        --size_;
        return top;
      }
      Refill(from);
    }
    const Event top = buckets_[0][head0_];
    ++head0_;
    --size_;
    if (head0_ == buckets_[0].size()) {
      buckets_[0].clear();
      head0_ = 0;
    }
    return top;
  }

 private:
  static constexpr int kDigitBits = 8;
  static constexpr int kDigits = 1 << kDigitBits;
  static constexpr int kLevels = 64 / kDigitBits;
  static constexpr int kBuckets = 1 + kLevels * kDigits;  // bucket 0, then (L, d) at 1 + L * 256 + d
  static constexpr int kMaskWords = (kBuckets - 1 + 63) / 64;
  static_assert(kMaskWords <= 64, "one summary word");
  // No sequence number: push order is each bucket's order (above), so a stored event is 24 bytes
  // and a redistribution moves a quarter less than with one.
  // A non-negative double's bits order as the double does (event times are never negative; adding
  // 0.0 turns a -0.0 into +0.0).
  static uint64_t TimeBits(double t) { return std::bit_cast<uint64_t>(t + 0.0); }
  // A stored time is never -0.0 (it was pushed through TimeBits).
  static uint64_t StoredBits(double t) { return std::bit_cast<uint64_t>(t); }
  int BucketOf(uint64_t bits) const {
    const uint64_t diff = bits ^ last_;
    if (diff == 0) return 0;
    const int level = (63 - std::countl_zero(diff)) / kDigitBits;
    const int digit = static_cast<int>((bits >> (level * kDigitBits)) & (kDigits - 1));
    return 1 + level * kDigits + digit;
  }
  // The lowest non-empty bucket >= 1 (one must exist).
  int LowestBucket() const {
    const int w = std::countr_zero(nonempty_words_);
    if (w >= kMaskWords) __builtin_unreachable();  // callers hold a non-empty queue
    return 1 + w * 64 + std::countr_zero(nonempty_[w]);
  }
  // Event j of bucket k >= 1 was appended: it is the bucket's least-time event if it is its first or
  // strictly earlier than the least so far (a tie keeps the earlier push).
  void Noted(int k, uint64_t bits, size_t j) {
    uint64_t& word = nonempty_[(k - 1) / 64];
    const uint64_t bit = uint64_t{1} << ((k - 1) % 64);
    if (!(word & bit)) {
      min_bits_[k] = bits;
      min_index_[k] = j;
      word |= bit;
      nonempty_words_ |= uint64_t{1} << ((k - 1) / 64);
    } else if (bits < min_bits_[k]) {
      min_bits_[k] = bits;
      min_index_[k] = j;
    }
  }
  // Bucket 0 is empty and `from`, the lowest non-empty bucket, holds more than one event: its
  // minimum becomes last_, and its events move, in order, to the (empty) buckets below it. Each
  // bucket's minimum is kept as events are appended, so no pass searches for it.
  void Refill(int from) {
    last_ = min_bits_[from];
    std::vector<Event>& v = buckets_[from];
    Emptied(from);
    for (const Event& e : v) {
      const uint64_t bits = StoredBits(e.time);
      const int k = BucketOf(bits);
      std::vector<Event>& to = buckets_[k];
      to.push_back(e);
      if (k > 0) Noted(k, bits, to.size() - 1);
    }
    v.clear();
  }
  // Bucket k >= 1 no longer counts as non-empty.
  void Emptied(int k) {
    uint64_t& word = nonempty_[(k - 1) / 64];
    word &= ~(uint64_t{1} << ((k - 1) % 64));
    if (word == 0) nonempty_words_ &= ~(uint64_t{1} << ((k - 1) / 64));
  }
  std::array<std::vector<Event>, kBuckets> buckets_;
  std::array<uint64_t, kBuckets> min_bits_{};  // per bucket >= 1 while non-empty: its least time bits
  std::array<size_t, kBuckets> min_index_{};   // and the first entry with them
  size_t head0_ = 0;         // bucket 0 pops from here (it is cleared when drained)
  uint64_t last_ = 0;        // the time bits of bucket 0 (the last popped time once popping starts)
  std::array<uint64_t, kMaskWords> nonempty_{};  // bit k - 1: bucket k >= 1 is non-empty
  uint64_t nonempty_words_ = 0;                  // bit w: nonempty_[w] != 0
  size_t size_ = 0;
};

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_ENGINE_EVENT_QUEUE_H_
