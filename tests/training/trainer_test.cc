// The trainer's determinism and checkpoints: same bits for any
// thread count, resume == uninterrupted, a failed checkpoint write leaves the previous one loadable.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "oneapi/tbb/global_control.h"
#include "model/description/model_config.h"
#include "reference/model/checkpoint.h"
#include "reference/model/trainer.h"

namespace gemtb::reference::model {
namespace {

namespace fs = std::filesystem;

gemtb::model::ModelConfig Tiny() {
  absl::StatusOr<gemtb::model::ModelConfig> c = gemtb::model::LoadModelConfig("tiny");
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

// A small, fast setting: batch 8 keeps each step around tens of milliseconds.
TrainOptions Small(int threads) {
  TrainOptions o;
  o.batch = 8;
  o.threads = threads;
  o.seed = 3;
  o.data_seed = 5;
  return o;
}

std::vector<uint8_t> CheckpointBytes(const Trainer& t) { return SerializeCheckpoint(t.StateArrays()); }

std::vector<uint8_t> TrainFor(const TrainOptions& o, int steps) {
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(Tiny(), o);
  EXPECT_TRUE(t.ok()) << t.status();
  for (int s = 0; s < steps; ++s) {
    absl::StatusOr<StepResult> r = (*t)->Step();
    EXPECT_TRUE(r.ok()) << r.status();
  }
  return CheckpointBytes(**t);
}

fs::path TempDir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / absl::StrCat("gemtb_training_", name, "_", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(Trainer, CheckpointBitIdenticalForAnyThreadCount) {
  // Let oneTBB really run 16 threads even on a 2-core machine (it caps workers at the core count).
  tbb::global_control allow(tbb::global_control::max_allowed_parallelism, 16);
  const std::vector<uint8_t> one = TrainFor(Small(1), 6);
  for (int threads : {2, 7, 16}) EXPECT_TRUE(TrainFor(Small(threads), 6) == one) << threads << " threads";
}

TEST(Trainer, TwoRunsGiveIdenticalCheckpoints) { EXPECT_TRUE(TrainFor(Small(2), 5) == TrainFor(Small(2), 5)); }

TEST(Trainer, TrainingChangesParametersAndTables) {
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(Tiny(), Small(2));
  ASSERT_TRUE(t.ok()) << t.status();
  const TrainState before = (*t)->state();
  ASSERT_TRUE((*t)->Step().ok());
  EXPECT_NE((*t)->state().params, before.params);
  EXPECT_NE((*t)->state().tables.tables[0].weights, before.tables.tables[0].weights);
  EXPECT_EQ((*t)->state().step, 1);
}

TEST(Trainer, ResumeContinuesBitExactly) {
  const fs::path dir = TempDir("resume");
  const std::string path = (dir / "ckpt.bin").string();
  const std::vector<uint8_t> straight = TrainFor(Small(2), 8);
  {
    absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(Tiny(), Small(2));
    ASSERT_TRUE(t.ok());
    for (int s = 0; s < 4; ++s) ASSERT_TRUE((*t)->Step().ok());
    ASSERT_TRUE(WriteCheckpoint(path, (*t)->StateArrays()).ok());
  }
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(Tiny(), Small(1));
  ASSERT_TRUE(t.ok());
  absl::StatusOr<NamedArrays> arrays = ReadCheckpoint(path);
  ASSERT_TRUE(arrays.ok()) << arrays.status();
  ASSERT_TRUE((*t)->LoadStateArrays(*arrays).ok());
  EXPECT_EQ((*t)->state().step, 4);
  for (int s = 0; s < 4; ++s) ASSERT_TRUE((*t)->Step().ok());
  EXPECT_TRUE(CheckpointBytes(**t) == straight);
  fs::remove_all(dir);
}

TEST(Trainer, TrainStepsArraysEqualsSteppingATrainer) {
  absl::StatusOr<NamedArrays> a = TrainStepsArrays(Tiny(), Small(2), 3);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(SerializeCheckpoint(*a) == TrainFor(Small(1), 3));
  absl::StatusOr<TrainState> s = TrainSteps(Tiny(), Small(2), 3);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->step, 3);
}

TEST(Trainer, ResumeRejectsOtherOptions) {
  absl::StatusOr<std::unique_ptr<Trainer>> a = Trainer::Create(Tiny(), Small(1));
  TrainOptions other = Small(1);
  other.batch = 16;
  absl::StatusOr<std::unique_ptr<Trainer>> b = Trainer::Create(Tiny(), other);
  ASSERT_TRUE(a.ok() && b.ok());
  const absl::Status s = (*b)->LoadStateArrays((*a)->StateArrays());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
}

TEST(Checkpoint, FailedWriteLeavesThePreviousCheckpointLoadable) {
  const fs::path dir = TempDir("fail");
  const std::string path = (dir / "ckpt.bin").string();
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(Tiny(), Small(1));
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE((*t)->Step().ok());
  const NamedArrays first = (*t)->StateArrays();
  ASSERT_TRUE(WriteCheckpoint(path, first).ok());
  ASSERT_TRUE((*t)->Step().ok());
  const std::vector<uint8_t> second = SerializeCheckpoint((*t)->StateArrays());
  for (int64_t cut : {int64_t{0}, int64_t{7}, static_cast<int64_t>(second.size() / 2), static_cast<int64_t>(second.size() - 1)}) {
    CheckpointWriteOptions o;
    o.fail_after_bytes = cut;
    const absl::Status s = WriteCheckpoint(path, (*t)->StateArrays(), o);
    EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
    absl::StatusOr<NamedArrays> back = ReadCheckpoint(path);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(SerializeCheckpoint(*back) == SerializeCheckpoint(first)) << "cut " << cut;
    absl::StatusOr<std::unique_ptr<Trainer>> fresh = Trainer::Create(Tiny(), Small(1));
    ASSERT_TRUE(fresh.ok());
    EXPECT_TRUE((*fresh)->LoadStateArrays(*back).ok());
    EXPECT_EQ((*fresh)->state().step, 1);
  }
  // The torn temp file (what a crash leaves) is not a checkpoint.
  bool saw_temp = false;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().string() == path) continue;
    saw_temp = true;
    EXPECT_FALSE(ReadCheckpoint(entry.path().string()).ok()) << entry.path();
  }
  EXPECT_TRUE(saw_temp);
  fs::remove_all(dir);
}

// What kill -9 during a write leaves, "<path>.tmp.<pid>" of a dead process, goes at the next
// successful write of that path; a live process's temp file, other checkpoints' and names that are
// not "<pid>" stay.
TEST(Checkpoint, SuccessfulWriteRemovesStaleTempFilesOfThatCheckpointOnly) {
  const fs::path dir = TempDir("stale");
  const std::string path = (dir / "ckpt.bin").string();
  const pid_t dead = ::fork();  // a pid whose process has exited and been reaped
  ASSERT_GE(dead, 0);
  if (dead == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);
  const std::string stale = absl::StrCat(path, ".tmp.", dead);
  const std::string live = absl::StrCat(path, ".tmp.", ::getppid());
  const std::string other = (dir / absl::StrCat("other.bin.tmp.", dead)).string();
  const std::string not_pid = absl::StrCat(path, ".tmp.", dead, "x");
  for (const std::string& p : {stale, live, other, not_pid}) std::ofstream(p) << "torn";
  NamedArrays arrays;
  arrays.emplace_back("w", io::EncodeFloat(std::vector<double>{1.0, -2.5}, {2}, io::NpyDType::kFloat32));
  ASSERT_TRUE(WriteCheckpoint(path, arrays).ok());
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(other));
  EXPECT_TRUE(fs::exists(not_pid));
  absl::StatusOr<NamedArrays> back = ReadCheckpoint(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(SerializeCheckpoint(*back) == SerializeCheckpoint(arrays));
  fs::remove_all(dir);
}

TEST(Checkpoint, CorruptedOrTruncatedFilesAreRejected) {
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(Tiny(), Small(1));
  ASSERT_TRUE(t.ok());
  const std::vector<uint8_t> bytes = SerializeCheckpoint((*t)->StateArrays());
  std::vector<uint8_t> flipped = bytes;
  flipped[bytes.size() / 2] ^= 1;
  EXPECT_EQ(ParseCheckpoint(flipped, "x").status().code(), absl::StatusCode::kDataLoss);
  const std::vector<uint8_t> cut(bytes.begin(), bytes.end() - 9);
  EXPECT_EQ(ParseCheckpoint(cut, "x").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ParseCheckpoint({}, "x").status().code(), absl::StatusCode::kDataLoss);
  absl::StatusOr<NamedArrays> ok = ParseCheckpoint(bytes, "x");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(SerializeCheckpoint(*ok) == bytes);
}

}  // namespace
}  // namespace gemtb::reference::model
