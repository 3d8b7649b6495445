// The engine's event queue: events pop in (time, push sequence) order,
// checked against an ordered set on random schedules that, like the engine, never push before the
// last popped time, with many exact ties (zero delays, repeated delays) and times spanning many
// binary exponents.
#include "sim/engine/event_queue.h"

#include <cstdint>
#include <set>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace gemtb::sim {
namespace {

// A small counter-based generator for the schedule (the test's own, independent of the queue).
struct Rng {
  uint64_t state;
  uint64_t Next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  double Unit() { return static_cast<double>(Next() >> 11) * (1.0 / 9007199254740992.0); }
};

TEST(EventQueueTest, PopsInTimeThenPushOrderLikeAnOrderedSet) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Rng rng{seed};
    EventQueue q;
    std::set<std::tuple<double, uint64_t, int32_t>> ref;  // (time, push sequence, payload)
    uint64_t seq = 0;
    double now = 0;
    auto push = [&](double t) {
      const int32_t payload = static_cast<int32_t>(seq % 100000);
      q.Push(t, EventType::kCollEnd, payload, -payload, static_cast<uint32_t>(seq), static_cast<int32_t>(seq % 7));
      ref.emplace(t, seq, payload);
      ++seq;
    };
    const double delays[] = {0.0, 1e-6, 0.25, 3.0};  // repeated delays make exact ties
    for (int j = 0; j < 50; ++j) push(rng.Unit() * 10);
    for (int iter = 0; iter < 20000; ++iter) {
      const int pushes = static_cast<int>(rng.Next() % 4);
      for (int j = 0; j < pushes; ++j) {
        const uint64_t kind = rng.Next() % 4;
        const double delay = kind == 0 ? delays[rng.Next() % 4] : kind == 1 ? rng.Unit() * 1e-3 : rng.Unit() * 100;
        push(now + delay);
      }
      if (q.Empty()) {
        ASSERT_TRUE(ref.empty());
        continue;
      }
      const Event top = q.Top();
      const Event e = q.Pop();
      ASSERT_FALSE(ref.empty());
      const auto [t, s, payload] = *ref.begin();
      ref.erase(ref.begin());
      // The version carries the push sequence (the queue keeps none of its own).
      ASSERT_EQ(top.version, e.version) << "seed " << seed << " iter " << iter;
      ASSERT_EQ(e.time, t) << "seed " << seed << " iter " << iter;
      ASSERT_EQ(e.a, payload);
      ASSERT_EQ(e.b, -payload);
      ASSERT_EQ(e.version, static_cast<uint32_t>(s));
      ASSERT_EQ(e.step, static_cast<int32_t>(s % 7));
      ASSERT_EQ(e.type, EventType::kCollEnd);
      now = e.time;
    }
    while (!q.Empty()) {
      const Event e = q.Pop();
      ASSERT_EQ(e.version, static_cast<uint32_t>(std::get<1>(*ref.begin())));
      ref.erase(ref.begin());
    }
    EXPECT_TRUE(ref.empty());
  }
}

// Top() is a look, not a commitment: an event pushed after it, earlier than it (but not before the
// last popped time), pops first.
TEST(EventQueueTest, PushAfterTopCanComeFirst) {
  EventQueue q;
  q.Push(1.0, EventType::kTaskEnd, 1, 0);
  q.Push(5.0, EventType::kTaskEnd, 2, 0);
  EXPECT_EQ(q.Pop().a, 1);
  EXPECT_EQ(q.Top().a, 2);
  q.Push(3.0, EventType::kTaskEnd, 3, 0);
  q.Push(1.0, EventType::kTaskEnd, 4, 0);  // at the last popped time
  EXPECT_EQ(q.Top().a, 4);
  EXPECT_EQ(q.Pop().a, 4);
  EXPECT_EQ(q.Pop().a, 3);
  EXPECT_EQ(q.Pop().a, 2);
  EXPECT_TRUE(q.Empty());
}

// Ties pop in push order, including events pushed at the current time while others wait there.
TEST(EventQueueTest, TiesPopInPushOrder) {
  EventQueue q;
  for (int j = 0; j < 5; ++j) q.Push(2.0, EventType::kTaskEnd, j, 0);
  q.Push(0.5, EventType::kTaskEnd, 100, 0);
  EXPECT_EQ(q.Pop().a, 100);
  EXPECT_EQ(q.Pop().a, 0);
  q.Push(2.0, EventType::kTaskEnd, 5, 0);
  q.Push(0.0 + 2.0, EventType::kTaskEnd, 6, 0);
  for (int j = 1; j <= 6; ++j) EXPECT_EQ(q.Pop().a, j);
  EXPECT_TRUE(q.Empty());
}

// Zero and negative zero are one time; a push before the last popped time (never made by the
// engine) is taken as at that time rather than breaking the order.
TEST(EventQueueTest, SignedZeroAndLatePushes) {
  EventQueue q;
  q.Push(-0.0, EventType::kTaskEnd, 1, 0);
  q.Push(0.0, EventType::kTaskEnd, 2, 0);
  EXPECT_EQ(q.Pop().a, 1);
  EXPECT_EQ(q.Pop().a, 2);
  q.Push(4.0, EventType::kTaskEnd, 3, 0);
  q.Push(7.0, EventType::kTaskEnd, 4, 0);
  EXPECT_EQ(q.Pop().a, 3);
  q.Push(1.0, EventType::kTaskEnd, 5, 0);
  const Event late = q.Pop();
  EXPECT_EQ(late.a, 5);
  EXPECT_EQ(late.time, 4.0);
  EXPECT_EQ(q.Pop().a, 4);
  EXPECT_TRUE(q.Empty());
}

}  // namespace
}  // namespace gemtb::sim
