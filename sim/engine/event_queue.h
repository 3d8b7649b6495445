// The engine's one priority queue (spec/simulator.md §2.1): events ordered by (time, push sequence),
// so ties resolve in push order and runs are deterministic. Rescheduled events are not removed; the
// engine drops stale ones on pop by their version (lazy deletion).
#ifndef GEMTB_SIM_ENGINE_EVENT_QUEUE_H_
#define GEMTB_SIM_ENGINE_EVENT_QUEUE_H_

#include <algorithm>
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
  uint64_t seq = 0;
  EventType type = EventType::kTaskEnd;
  int32_t a = 0, b = 0;
  uint32_t version = 0;
  int32_t step = 0;  // kTaskEnd of a compute task: its step (lets the loop prefetch what it touches)
};

// A 4-ary min-heap ordered by (time, push sequence), each 32-byte entry holding its event: two
// entries per cache line, so the four children of a node span two lines and popping the top touches
// no other memory (a payload kept aside was a cache miss per event at thousands of ranks, where the
// queue holds an event per rank and more).
class EventQueue {
 public:
  void Push(double time, EventType type, int32_t a, int32_t b, uint32_t version = 0, int32_t step = 0) {
    heap_.push_back(Entry{TimeBits(time), next_seq_, a, b, version, static_cast<int16_t>(step), type});
    ++next_seq_;
    SiftUp(heap_.size() - 1);
  }
  bool Empty() const { return heap_.empty(); }
  size_t Size() const { return heap_.size(); }
  Event Top() const { return ToEvent(heap_.front()); }
  Event Pop() {
    const Event top = ToEvent(heap_.front());
    const Entry last = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) SiftDown(last);
    return top;
  }

 private:
  struct Entry {
    uint64_t time_bits;
    uint64_t seq;
    int32_t a, b;
    uint32_t version;
    int16_t step;  // steps are < 32000 (the engine checks)
    EventType type;
  };
  static_assert(sizeof(Entry) == 32);
  static Event ToEvent(const Entry& e) {
    return Event{std::bit_cast<double>(e.time_bits), e.seq, e.type, e.a, e.b, e.version, e.step};
  }
  // A non-negative double's bits order as the double does (event times are never negative; adding
  // 0.0 turns a -0.0 into +0.0), so (time, sequence) compares as a pair of unsigned integers
  // without a data-dependent branch: sifting dominated the event loop.
  static uint64_t TimeBits(double t) { return std::bit_cast<uint64_t>(t + 0.0); }
  static bool Before(const Entry& x, const Entry& y) {
    return (x.time_bits < y.time_bits) | ((x.time_bits == y.time_bits) & (x.seq < y.seq));
  }
  void SiftUp(size_t i) {
    const Entry e = heap_[i];
    while (i > 0) {
      const size_t parent = (i - 1) / 4;
      if (!Before(e, heap_[parent])) break;
      heap_[i] = heap_[parent];
      i = parent;
    }
    heap_[i] = e;
  }
  // Places `e` (the former last element) starting from the root: the hole left by the root moves
  // down to a leaf along the smallest children (chosen without branches), then `e` sifts up from
  // there (it came from the bottom, so it rarely climbs far).
  void SiftDown(const Entry& e) {
    const size_t n = heap_.size();
    size_t i = 0;
    while (true) {
      const size_t first = 4 * i + 1;
      if (first + 4 <= n) {
        const size_t b01 = Before(heap_[first + 1], heap_[first]) ? first + 1 : first;
        const size_t b23 = Before(heap_[first + 3], heap_[first + 2]) ? first + 3 : first + 2;
        const size_t best = Before(heap_[b23], heap_[b01]) ? b23 : b01;
        heap_[i] = heap_[best];
        i = best;
        continue;
      }
      if (first < n) {
        size_t best = first;
        for (size_t c = first + 1; c < n; ++c) best = Before(heap_[c], heap_[best]) ? c : best;
        heap_[i] = heap_[best];
        i = best;
      }
      break;
    }
    while (i > 0) {
      const size_t parent = (i - 1) / 4;
      if (!Before(e, heap_[parent])) break;
      heap_[i] = heap_[parent];
      i = parent;
    }
    heap_[i] = e;
  }
  std::vector<Entry> heap_;
  uint64_t next_seq_ = 0;
};

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_ENGINE_EVENT_QUEUE_H_
