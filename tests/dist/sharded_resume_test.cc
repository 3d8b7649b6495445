// Sharded checkpoints with real processes: a toy job of R ranks (forked processes, rank 0 holding
// the store) whose state is sharded over the ranks and coupled through the store every step. A rank
// killed with SIGKILL in the middle of a checkpoint write ends every other rank with a named error
// well inside the store's timeout, leaves the previous checkpoint loadable, and resuming from it
// reproduces the uninterrupted run's bytes; resuming with another world size fails on every rank.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "reference/dist/sharded_checkpoint.h"
#include "tests/dist/dist_test_util.h"

namespace gemtb::reference::dist {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr int kShard = 16;
constexpr launch::Millis kStoreTimeout{30000};

struct Job {
  int world = 3;
  int port = 0;
  std::string checkpoint_dir, out_dir;
  int64_t steps = 6;
  int64_t checkpoint_every = 2;
  bool resume = false;
  int crash_rank = -1;  // this rank is killed (SIGKILL) mid-write of the checkpoint of crash_step
  int64_t crash_step = -1;
  bool crash_in_manifest = false;  // rank 0's manifest instead of crash_rank's shard
};

std::vector<float> Floats(const io::NpyArray& a) {
  std::vector<float> v(a.data.size() / sizeof(float));
  std::memcpy(v.data(), a.data.data(), a.data.size());
  return v;
}

io::NpyArray Array(const std::vector<float>& v) {
  io::NpyArray a;
  a.dtype = io::NpyDType::kFloat32;
  a.shape = {static_cast<int64_t>(v.size())};
  a.data.resize(v.size() * sizeof(float));
  std::memcpy(a.data.data(), v.data(), a.data.size());
  return a;
}

// One rank: its shard of w, stepped with the rank-ordered sum of every rank's shard total. A rank's
// own error is reported to the store (Fail) before it closes.
absl::Status RunRankSteps(const Job& job, int rank, std::unique_ptr<launch::TcpStoreClient>& store);

absl::Status RunRank(const Job& job, int rank) {
  std::unique_ptr<launch::TcpStoreServer> server;
  if (rank == 0) {
    auto s = launch::TcpStoreServer::Start(job.port, job.world);
    if (!s.ok()) return s.status();
    server = *std::move(s);
  }
  auto connected = launch::TcpStoreClient::Connect({"127.0.0.1", job.port}, rank, job.world, kStoreTimeout);
  if (!connected.ok()) return connected.status();
  std::unique_ptr<launch::TcpStoreClient> store = *std::move(connected);
  absl::Status s = RunRankSteps(job, rank, store);
  if (!s.ok()) {
    (void)store->Fail(std::string(s.message()));
    (void)store->Close();
    if (server) (void)server->Shutdown(kStoreTimeout);
    return s;
  }
  if (s = store->Close(); !s.ok()) return s;
  return server ? server->Shutdown(kStoreTimeout) : absl::OkStatus();
}

absl::Status RunRankSteps(const Job& job, int rank, std::unique_ptr<launch::TcpStoreClient>& store) {
  const CheckpointIdentity identity{job.world, "toy-config", "toy-plan"};
  std::vector<float> w(kShard);
  for (int i = 0; i < kShard; ++i) w[i] = static_cast<float>(rank * kShard + i) * 0.125f;
  int64_t step = 0;
  if (job.resume) {
    auto loaded = LoadShardedCheckpoint(job.checkpoint_dir, identity, *store);
    if (!loaded.ok()) return loaded.status();
    step = loaded->step;
    w = Floats(loaded->arrays.at(0).second);
  }
  for (; step < job.steps;) {
    float total = 0.0f;
    for (float x : w) total += x;
    auto all = launch::StoreAllGather(*store, absl::StrCat("step/", step), std::string(reinterpret_cast<char*>(&total), sizeof(total)));
    if (!all.ok()) return all.status();
    float sum = 0.0f;
    for (const std::string& t : *all) {  // in rank order: the same bits on every rank, every run
      float x;
      std::memcpy(&x, t.data(), sizeof(x));
      sum += x;
    }
    for (int i = 0; i < kShard; ++i) w[i] = w[i] * 0.75f + sum * 1e-3f + static_cast<float>(step * job.world + rank + i) * 1e-2f;
    ++step;
    if (job.checkpoint_every > 0 && step % job.checkpoint_every == 0) {
      ShardedWriteOptions options;
      if (step == job.crash_step && rank == job.crash_rank) {
        model::CheckpointWriteOptions& crash = job.crash_in_manifest ? options.manifest : options.shard;
        crash.fail_after_bytes = 50;
        crash.kill_at_failure = true;
      }
      if (absl::Status s = WriteShardedCheckpoint(job.checkpoint_dir, step, identity, {{"w", Array(w)}}, *store, options); !s.ok())
        return s;
    }
  }
  std::ofstream(absl::StrCat(job.out_dir, "/final-", rank, ".bin"), std::ios::binary)
      .write(reinterpret_cast<const char*>(w.data()), static_cast<std::streamsize>(w.size() * sizeof(float)));
  return launch::StoreAllGather(*store, "done", "").status();
}

struct RankOutcome {
  bool killed = false;
  int exit_code = 0;
  std::string message;  // the rank's error, empty when OK
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Forks one process per rank and waits for all; each writes its error (if any) to out_dir.
std::vector<RankOutcome> RunJob(const Job& job) {
  std::vector<pid_t> pids;
  for (int r = 0; r < job.world; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const absl::Status s = RunRank(job, r);
      std::ofstream(absl::StrCat(job.out_dir, "/error-", r, ".txt")) << (s.ok() ? "" : s.ToString());
      ::_exit(s.ok() ? 0 : 1);
    }
    pids.push_back(pid);
  }
  std::vector<RankOutcome> out;
  for (int r = 0; r < job.world; ++r) {
    int status = 0;
    ::waitpid(pids[r], &status, 0);
    RankOutcome o;
    o.killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    o.message = ReadAll(absl::StrCat(job.out_dir, "/error-", r, ".txt"));
    out.push_back(o);
  }
  return out;
}

std::vector<std::string> Finals(const Job& job) {
  std::vector<std::string> f;
  for (int r = 0; r < job.world; ++r) f.push_back(ReadAll(absl::StrCat(job.out_dir, "/final-", r, ".bin")));
  return f;
}

int FreePort() {
  auto probe = launch::TcpStoreServer::Start(0, 1);
  const int port = probe.ok() ? (*probe)->port() : 0;
  if (probe.ok()) (void)(*probe)->Shutdown(launch::Millis(0));
  return port;
}

Job NewJob(const std::string& name) {
  Job job;
  job.port = FreePort();
  job.checkpoint_dir = testutil::FreshDir(absl::StrCat(name, "_ckpt"));
  job.out_dir = testutil::FreshDir(absl::StrCat(name, "_out"));
  return job;
}

void ExpectAllOk(const std::vector<RankOutcome>& ranks) {
  for (size_t r = 0; r < ranks.size(); ++r) EXPECT_EQ(ranks[r].exit_code, 0) << "rank " << r << ": " << ranks[r].message;
}

std::vector<std::string> UninterruptedFinals() {
  Job straight = NewJob("straight");
  ExpectAllOk(RunJob(straight));
  return Finals(straight);
}

// Runs `crash` (its crash_rank killed mid-write): that rank dies by SIGKILL and every other rank exits
// 1 with `message`, well inside the store's timeout; resuming from the checkpoint folder then ends
// with `expected`, the final shards of an uninterrupted run.
void ExpectEveryRankFailsAndResumeReproducesTheRun(const Job& crash, const std::string& message,
                                                   const std::vector<std::string>& expected) {
  ASSERT_EQ(expected[0].size(), kShard * sizeof(float));
  const auto t0 = Clock::now();
  std::vector<RankOutcome> ranks = RunJob(crash);
  EXPECT_LT(Clock::now() - t0, kStoreTimeout / 3) << "a dead peer is noticed at once, not at the timeout";
  for (int r = 0; r < crash.world; ++r) {
    if (r == crash.crash_rank) {
      EXPECT_TRUE(ranks[r].killed) << "rank " << r;
      continue;
    }
    EXPECT_EQ(ranks[r].exit_code, 1) << "rank " << r;
    EXPECT_THAT(ranks[r].message, HasSubstr(message)) << "rank " << r;
  }
  Job resume = crash;
  resume.port = FreePort();
  resume.resume = true;
  resume.crash_rank = -1;
  ExpectAllOk(RunJob(resume));
  EXPECT_EQ(Finals(resume), expected);
}

TEST(ShardedResume, AShardWriterKilledMidWriteFailsEveryRankAndResumeReproducesTheRun) {
  const std::vector<std::string> expected = UninterruptedFinals();
  Job crash = NewJob("crash_shard");
  crash.crash_rank = 1;
  crash.crash_step = 4;
  ExpectEveryRankFailsAndResumeReproducesTheRun(crash, "rank 1: its connection to the store closed without a goodbye",
                                                expected);
}

TEST(ShardedResume, RankZeroKilledMidManifestFailsEveryRankAndResumeReproducesTheRun) {
  const std::vector<std::string> expected = UninterruptedFinals();
  Job crash = NewJob("crash_manifest");
  crash.crash_rank = 0;
  crash.crash_step = 4;
  crash.crash_in_manifest = true;
  ExpectEveryRankFailsAndResumeReproducesTheRun(crash, "lost the store", expected);
}

TEST(ShardedResume, ResumingWithAnotherWorldSizeFailsOnEveryRank) {
  Job first = NewJob("world_size");
  first.steps = 2;
  ExpectAllOk(RunJob(first));
  Job resume = first;
  resume.port = FreePort();
  resume.world = 2;
  resume.steps = 4;
  resume.resume = true;
  std::vector<RankOutcome> ranks = RunJob(resume);
  for (const RankOutcome& o : ranks) {
    EXPECT_EQ(o.exit_code, 1);
    EXPECT_THAT(o.message, HasSubstr("world_size 3, this job's is 2"));
  }
}

}  // namespace
}  // namespace gemtb::reference::dist
