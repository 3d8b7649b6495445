// The engine's one priority queue (spec/simulator.md §2.1): events ordered by (time, push sequence),
// so ties resolve in push order and runs are deterministic. Rescheduled events are not removed; the
// engine drops stale ones on pop by their version (lazy deletion).
#ifndef GEMTB_SIM_ENGINE_EVENT_QUEUE_H_
#define GEMTB_SIM_ENGINE_EVENT_QUEUE_H_

#include <cstdint>
#include <algorithm>
#include <vector>

namespace gemtb::sim {

enum class EventType : uint8_t {
  kTaskEnd,     // a compute task ends (a = rank, version checked); or a zero-time task completes
  kCollEnd,     // a collective ends for all members (a = task, b = group)
  kSmRelease,   // ideal network: an SM-based collective stops holding SMs (a = task, b = group)
};

struct Event {
  double time = 0;
  uint64_t seq = 0;
  EventType type = EventType::kTaskEnd;
  int32_t a = 0, b = 0;
  uint32_t version = 0;
};

// A 4-ary min-heap: shallower than a binary heap and its children share cache lines, which matters
// at thousands of ranks (the queue then holds one pending event per rank and more).
class EventQueue {
 public:
  void Push(double time, EventType type, int32_t a, int32_t b, uint32_t version = 0) {
    heap_.push_back(Event{time, next_seq_++, type, a, b, version});
    SiftUp(heap_.size() - 1);
  }
  bool Empty() const { return heap_.empty(); }
  size_t Size() const { return heap_.size(); }
  const Event& Top() const { return heap_.front(); }
  Event Pop() {
    const Event top = heap_.front();
    const Event last = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) SiftDown(last);
    return top;
  }

 private:
  static bool Before(const Event& x, const Event& y) {
    return x.time != y.time ? x.time < y.time : x.seq < y.seq;
  }
  void SiftUp(size_t i) {
    const Event e = heap_[i];
    while (i > 0) {
      const size_t parent = (i - 1) / 4;
      if (!Before(e, heap_[parent])) break;
      heap_[i] = heap_[parent];
      i = parent;
    }
    heap_[i] = e;
  }
  // Places `e` (the former last element) starting from the root.
  void SiftDown(const Event& e) {
    const size_t n = heap_.size();
    size_t i = 0;
    while (true) {
      const size_t first = 4 * i + 1;
      if (first >= n) break;
      size_t best = first;
      const size_t end = std::min(first + 4, n);
      for (size_t c = first + 1; c < end; ++c) if (Before(heap_[c], heap_[best])) best = c;
      if (!Before(heap_[best], e)) break;
      heap_[i] = heap_[best];
      i = best;
    }
    heap_[i] = e;
  }
  std::vector<Event> heap_;
  uint64_t next_seq_ = 0;
};

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_ENGINE_EVENT_QUEUE_H_
