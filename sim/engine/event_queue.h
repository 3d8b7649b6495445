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
// Storage: a bucket k >= 1 keeps its first event in one array over all buckets (first_) and the
// rest in a vector of its own. Most buckets hold one event when they pop (a refill at the bottom
// levels spreads a bucket over 256 digits), so the moves of a refill and the pops that follow write
// and read a 48 KiB array that stays in cache, not the cold heap blocks of 2,048 vectors: at 16,384
// ranks those writes were a third of a refill's time.
//
// A push earlier than the last popped time (never made by the engine: durations are >= 0) is
// taken as at that time, so the queue stays ordered whatever it is given.
class EventQueue {
 public:
  void Push(double time, EventType type, int32_t a, int32_t b, uint32_t version = 0, int32_t step = 0) {
    const uint64_t bits = std::max(TimeBits(time), last_);
    Append(BucketOf(bits), bits, Event{std::bit_cast<double>(bits), a, b, version, static_cast<int16_t>(step), type});
    ++size_;
  }
  bool Empty() const { return size_ == 0; }
  size_t Size() const { return size_; }
  // The next event to pop (the queue must not be empty), valid until the next push or pop. Does not
  // move events: pushes after it may still come before it.
  const Event& Top() const {
    if (head0_ < bucket0_.size()) return bucket0_[head0_];
    const int k = LowestBucket();
    return At(k, min_index_[k]);
  }
  Event Pop() {
    if (head0_ == bucket0_.size()) {
      const int from = LowestBucket();
      if (count_[from] == 1) {
        // A lone event (most refills at the bottom levels): it pops from where it is, and last_
        // moves to its time as a refill would.
        const Event top = first_[from];
        last_ = StoredBits(top.time);
        count_[from] = 0;
        Emptied(from);
        --size_;
        return top;
      }
      Refill(from);
    }
    const Event top = bucket0_[head0_];
    ++head0_;
    --size_;
    if (head0_ == bucket0_.size()) {
      bucket0_.clear();
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
  // Event j of bucket k >= 1, in push order.
  const Event& At(int k, uint32_t j) const { return j == 0 ? first_[k] : rest_[k][j - 1]; }
  // Appends e (time bits `bits`) to bucket k.
  void Append(int k, uint64_t bits, const Event& e) {
    if (k == 0) {
      bucket0_.push_back(e);
      return;
    }
    const uint32_t j = count_[k]++;
    if (j == 0) {
      first_[k] = e;
    } else {
      rest_[k].push_back(e);
    }
    Noted(k, bits, j);
  }
  // The lowest non-empty bucket >= 1 (one must exist).
  int LowestBucket() const {
    const int w = std::countr_zero(nonempty_words_);
    if (w >= kMaskWords) __builtin_unreachable();  // callers hold a non-empty queue
    return 1 + w * 64 + std::countr_zero(nonempty_[w]);
  }
  // Event j of bucket k >= 1 was appended: it is the bucket's least-time event if it is its first or
  // strictly earlier than the least so far (a tie keeps the earlier push).
  void Noted(int k, uint64_t bits, uint32_t j) {
    if (j == 0) {
      min_bits_[k] = bits;
      min_index_[k] = 0;
      nonempty_[(k - 1) / 64] |= uint64_t{1} << ((k - 1) % 64);
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
    count_[from] = 0;
    Emptied(from);
    const Event first = first_[from];
    Append(BucketOf(StoredBits(first.time)), StoredBits(first.time), first);
    std::vector<Event>& rest = rest_[from];
    for (const Event& e : rest) {
      const uint64_t bits = StoredBits(e.time);
      Append(BucketOf(bits), bits, e);
    }
    rest.clear();
  }
  // Bucket k >= 1 no longer counts as non-empty.
  void Emptied(int k) {
    uint64_t& word = nonempty_[(k - 1) / 64];
    word &= ~(uint64_t{1} << ((k - 1) % 64));
    if (word == 0) nonempty_words_ &= ~(uint64_t{1} << ((k - 1) / 64));
  }
  std::vector<Event> bucket0_;                   // the events at last_, in push order
  size_t head0_ = 0;                             // bucket 0 pops from here (it is cleared when drained)
  std::array<Event, kBuckets> first_{};          // per bucket >= 1: its first event
  std::array<std::vector<Event>, kBuckets> rest_;  // and the others, in push order
  std::array<uint32_t, kBuckets> count_{};       // its events
  std::array<uint32_t, kBuckets> min_index_{};   // the first of its events of least time
  std::array<uint64_t, kBuckets> min_bits_{};    // while non-empty: that least time's bits
  uint64_t last_ = 0;        // the time bits of bucket 0 (the last popped time once popping starts)
  std::array<uint64_t, kMaskWords> nonempty_{};  // bit k - 1: bucket k >= 1 is non-empty
  uint64_t nonempty_words_ = 0;                  // bit w: nonempty_[w] != 0
  size_t size_ = 0;
};

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_ENGINE_EVENT_QUEUE_H_
