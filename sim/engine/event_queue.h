// The engine's one priority queue (spec/simulator.md §2.1): events ordered by (time, push sequence),
// so ties resolve in push order and runs are deterministic. Rescheduled events are not removed; the
// engine drops stale ones on pop by their version (lazy deletion).
#ifndef GEMTB_SIM_ENGINE_EVENT_QUEUE_H_
#define GEMTB_SIM_ENGINE_EVENT_QUEUE_H_

#include <cstdint>
#include <queue>
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

class EventQueue {
 public:
  void Push(double time, EventType type, int32_t a, int32_t b, uint32_t version = 0) {
    heap_.push(Event{time, next_seq_++, type, a, b, version});
  }
  bool Empty() const { return heap_.empty(); }
  Event Pop() {
    Event e = heap_.top();
    heap_.pop();
    return e;
  }

 private:
  struct Later {
    bool operator()(const Event& x, const Event& y) const {
      return x.time != y.time ? x.time > y.time : x.seq > y.seq;
    }
  };
  std::priority_queue<Event, std::vector<Event>, Later> heap_;
  uint64_t next_seq_ = 0;
};

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_ENGINE_EVENT_QUEUE_H_
