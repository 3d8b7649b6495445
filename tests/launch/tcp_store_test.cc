// The rendezvous TCP store: values move between ranks, every wait ends within its timeout, and a
// dead rank, a wrong world size or a rank's own error end every rank's waits with a named error (and
// show in JobStatus, which answers at once).
// Ranks are threads here, except where a process must die (fork, then SIGKILL).
#include "model/launch/tcp_store.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/testing/status_matchers.h"

namespace gemtb::launch {
namespace {

using ::gemtb::testing::IsOk;
using ::gemtb::testing::StatusIs;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr Millis kTimeout{3000};

std::unique_ptr<TcpStoreClient> MustConnect(int port, int rank, int world, Millis timeout = kTimeout) {
  auto c = TcpStoreClient::Connect({"127.0.0.1", port}, rank, world, timeout);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

// A port no one listens on now (bound, read, released).
int FreePort() {
  auto probe = TcpStoreServer::Start(0, 1);
  EXPECT_TRUE(probe.ok());
  const int port = (*probe)->port();
  EXPECT_THAT((*probe)->Shutdown(Millis(0)), StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("rank 0 has not connected")));
  return port;
}

TEST(TcpStore, EveryRankSeesEveryRanksValueInRankOrder) {
  constexpr int kWorld = 4;
  auto server = TcpStoreServer::Start(0, kWorld);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  std::vector<std::future<absl::StatusOr<std::vector<std::string>>>> ranks;
  for (int r = kWorld - 1; r >= 0; --r) {  // the last rank first: gets wait for later sets
    ranks.push_back(std::async(std::launch::async, [=]() -> absl::StatusOr<std::vector<std::string>> {
      auto c = MustConnect(port, r, kWorld);
      if (c == nullptr) return absl::InternalError("no connection");
      auto all = StoreAllGather(*c, "blob", std::string(static_cast<size_t>(r + 1) * 1000, static_cast<char>('a' + r)));
      if (absl::Status s = c->Close(); !s.ok()) return s;
      return all;
    }));
  }
  for (auto& f : ranks) {
    auto all = f.get();
    ASSERT_TRUE(all.ok()) << all.status();
    ASSERT_EQ(all->size(), 4u);
    for (int r = 0; r < kWorld; ++r)
      EXPECT_EQ((*all)[r], std::string(static_cast<size_t>(r + 1) * 1000, static_cast<char>('a' + r)));
  }
  EXPECT_THAT((*server)->Shutdown(kTimeout), IsOk());
}

TEST(TcpStore, AnErasedKeyIsWaitedForAgain) {
  auto server = TcpStoreServer::Start(0, 1);
  ASSERT_TRUE(server.ok());
  auto c = MustConnect((*server)->port(), 0, 1, Millis(200));
  ASSERT_THAT(c->Set("k", "v1"), IsOk());
  ASSERT_THAT(c->Erase("k"), IsOk());
  EXPECT_THAT(c->Get("k"), StatusIs(absl::StatusCode::kDeadlineExceeded));
  ASSERT_THAT(c->Set("k", "v2"), IsOk());
  auto v = c->Get("k");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, "v2");
  EXPECT_THAT(c->Close(), IsOk());
  EXPECT_THAT((*server)->Shutdown(kTimeout), IsOk());
}

TEST(TcpStore, GetOfAKeyNoOneSetsEndsAtTheTimeoutNamingRanksNotConnected) {
  auto server = TcpStoreServer::Start(0, 3);
  ASSERT_TRUE(server.ok());
  auto c = MustConnect((*server)->port(), 0, 3, Millis(300));
  ASSERT_NE(c, nullptr);
  const auto t0 = Clock::now();
  EXPECT_THAT(c->Get("never"), StatusIs(absl::StatusCode::kDeadlineExceeded,
                                        HasSubstr("\"never\" not set within 300 ms (ranks 1, 2 have not connected)")));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
  EXPECT_THAT(c->Close(), IsOk());
  EXPECT_THAT((*server)->Shutdown(Millis(100)), StatusIs(absl::StatusCode::kDeadlineExceeded));
}

TEST(TcpStore, NoStoreToConnectToEndsAtTheTimeout) {
  const int port = FreePort();
  const auto t0 = Clock::now();
  EXPECT_THAT(TcpStoreClient::Connect({"127.0.0.1", port}, 1, 2, Millis(300)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("cannot reach the store of rank 0")));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
}

TEST(TcpStore, AWrongWorldSizeFailsEveryRank) {
  auto server = TcpStoreServer::Start(0, 2);
  ASSERT_TRUE(server.ok());
  auto good = MustConnect((*server)->port(), 0, 2);
  ASSERT_NE(good, nullptr);
  auto waiting = std::async(std::launch::async, [&] { return good->Get("from rank 1"); });
  EXPECT_THAT(TcpStoreClient::Connect({"127.0.0.1", (*server)->port()}, 1, 3, kTimeout),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("world size: rank 1 runs with world size 3, rank 0 (the store) with 2")));
  EXPECT_THAT(waiting.get(), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("world size: rank 1")));
  EXPECT_THAT(good->Close(), IsOk());
}

TEST(TcpStore, TwoProcessesWithOneRankFailTheJob) {
  auto server = TcpStoreServer::Start(0, 2);
  ASSERT_TRUE(server.ok());
  auto first = MustConnect((*server)->port(), 1, 2);
  EXPECT_THAT(TcpStoreClient::Connect({"127.0.0.1", (*server)->port()}, 1, 2, kTimeout),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("rank 1: connected twice")));
  EXPECT_THAT(first->Get("x"), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("connected twice")));
}

TEST(TcpStore, ARanksReportedErrorEndsEveryRanksWait) {
  auto server = TcpStoreServer::Start(0, 3);
  ASSERT_TRUE(server.ok());
  const int port = (*server)->port();
  auto r0 = MustConnect(port, 0, 3);
  auto r1 = MustConnect(port, 1, 3);
  auto r2 = MustConnect(port, 2, 3);
  auto w0 = std::async(std::launch::async, [&] { return r0->Get("k"); });
  auto w1 = std::async(std::launch::async, [&] { return r1->Get("k"); });
  EXPECT_THAT(r2->Fail("checkpoint step 7: config hash differs"), IsOk());
  EXPECT_THAT(w0.get(), StatusIs(absl::StatusCode::kAborted, HasSubstr("rank 2: checkpoint step 7")));
  EXPECT_THAT(w1.get(), StatusIs(absl::StatusCode::kAborted, HasSubstr("rank 2: checkpoint step 7")));
  EXPECT_THAT(r1->JobStatus(), StatusIs(absl::StatusCode::kAborted, HasSubstr("rank 2: checkpoint step 7")));
  EXPECT_THAT(r0->Set("k", "v"), StatusIs(absl::StatusCode::kAborted));
  for (auto* c : {r0.get(), r1.get(), r2.get()}) EXPECT_THAT(c->Close(), IsOk());
  EXPECT_THAT((*server)->Shutdown(kTimeout), StatusIs(absl::StatusCode::kAborted, HasSubstr("rank 2")));
}

// A child process connects as rank 1 and is killed with SIGKILL; rank 0's wait ends at once (well
// inside the timeout) naming rank 1.
TEST(TcpStore, AKilledRankEndsEveryOtherRanksWaitWithinTheTimeout) {
  const int port = FreePort();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto c = TcpStoreClient::Connect({"127.0.0.1", port}, 1, 3, Millis(10000));
    if (!c.ok()) ::_exit(3);
    if (!(*c)->Set("rank 1 up", "").ok()) ::_exit(4);
    ::pause();  // until killed
    ::_exit(5);
  }
  auto server = TcpStoreServer::Start(port, 3);
  ASSERT_TRUE(server.ok()) << server.status();
  auto r0 = MustConnect(port, 0, 3, Millis(20000));
  auto r2 = MustConnect(port, 2, 3, Millis(20000));
  ASSERT_THAT(r0->Get("rank 1 up"), IsOk());
  EXPECT_THAT(r0->JobStatus(), IsOk());  // a healthy job: OK, at once
  auto w2 = std::async(std::launch::async, [&] { return r2->Get("never"); });
  const auto t0 = Clock::now();
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_THAT(r0->Get("never"), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rank 1: its connection to the store closed without a goodbye")));
  EXPECT_THAT(w2.get(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rank 1")));
  EXPECT_THAT(r0->JobStatus(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rank 1")));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  r0->Close().IgnoreError();
  r2->Close().IgnoreError();
  EXPECT_THAT((*server)->Shutdown(kTimeout), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rank 1")));
}

// Rank 0 (the store) is a child process killed while rank 1 waits: rank 1 learns it at once.
TEST(TcpStore, AKilledRankZeroEndsTheOtherRanksWait) {
  const int port = FreePort();
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto server = TcpStoreServer::Start(port, 2);
    if (!server.ok()) ::_exit(3);
    const char byte = 1;
    if (::write(ready[1], &byte, 1) != 1) ::_exit(4);
    ::pause();
    ::_exit(5);
  }
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  auto r1 = MustConnect(port, 1, 2, Millis(20000));
  ASSERT_NE(r1, nullptr);
  auto w1 = std::async(std::launch::async, [&] { return r1->Get("never"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto t0 = Clock::now();
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_THAT(w1.get(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("lost the store")));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  ::close(ready[0]);
  ::close(ready[1]);
}

}  // namespace
}  // namespace gemtb::launch
