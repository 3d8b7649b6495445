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
  int32_t step = 0;  // kTaskEnd of a compute task: its step (lets the loop prefetch what it touches)
};

// A 4-ary min-heap of 16-byte keys (time, then push sequence) with the payload kept aside in a
// slab: four children share a cache line, which matters at thousands of ranks (the queue then holds
// an event per rank and more). The key's low 24 bits name the payload slot, its high 40 bits the
// push sequence, so keys order by sequence alone.
class EventQueue {
 public:
  void Push(double time, EventType type, int32_t a, int32_t b, uint32_t version = 0, int32_t step = 0) {
    uint32_t slot;
    if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
    } else {
      slot = static_cast<uint32_t>(payload_.size());
      payload_.emplace_back();
    }
    payload_[slot] = Event{time, next_seq_, type, a, b, version, step};
    heap_.push_back(Key{time, (next_seq_ << kSlotBits) | slot});
    ++next_seq_;
    SiftUp(heap_.size() - 1);
  }
  bool Empty() const { return heap_.empty(); }
  size_t Size() const { return heap_.size(); }
  // More pending events than the key's slot bits can name (the engine then reports an error).
  bool Overflowed() const { return payload_.size() > kSlotMask + 1; }
  const Event& Top() const { return payload_[heap_.front().key & kSlotMask]; }
  Event Pop() {
    const uint32_t slot = static_cast<uint32_t>(heap_.front().key & kSlotMask);
    const Key last = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) {
      SiftDown(last);
      __builtin_prefetch(&payload_[heap_.front().key & kSlotMask]);  // the caller peeks at it next
    }
    free_.push_back(slot);
    return payload_[slot];
  }
  // Pending events fit the slot bits (2^24); the engine never holds more than ranks + groups.
  static constexpr int kSlotBits = 24;

 private:
  static constexpr uint64_t kSlotMask = (uint64_t{1} << kSlotBits) - 1;
  struct Key {
    double time;
    uint64_t key;
  };
  static bool Before(const Key& x, const Key& y) { return x.time != y.time ? x.time < y.time : x.key < y.key; }
  void SiftUp(size_t i) {
    const Key e = heap_[i];
    while (i > 0) {
      const size_t parent = (i - 1) / 4;
      if (!Before(e, heap_[parent])) break;
      heap_[i] = heap_[parent];
      i = parent;
    }
    heap_[i] = e;
  }
  // Places `e` (the former last element) starting from the root.
  void SiftDown(const Key& e) {
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
  std::vector<Key> heap_;
  std::vector<Event> payload_;
  std::vector<uint32_t> free_;
  uint64_t next_seq_ = 0;
};

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_ENGINE_EVENT_QUEUE_H_
