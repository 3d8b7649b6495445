// Output folders are written as a set: a failed write (a full disk, injected) leaves the previous set
// as it was, --force replaces a set as a whole, and concurrent writers never leave a mix of two sets.
#include "tools/gemtb/output_set.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gemtb::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class OutputSetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "gemtb-output-set-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    target_ = (root_ / "out").string();
  }
  void TearDown() override { fs::remove_all(root_); }

  // Writes `files` (name -> text) as one set into the target.
  absl::Status Write(const std::map<std::string, std::string>& files, OutputSetOptions options = {}) {
    absl::StatusOr<OutputSet> set = OutputSet::Prepare("--out-dir", target_, options);
    if (!set.ok()) return set.status();
    for (const auto& [name, text] : files) set->AddText(name, text);
    return set->Commit();
  }

  std::map<std::string, std::string> Contents() const {
    std::map<std::string, std::string> out;
    for (const fs::directory_entry& e : fs::directory_iterator(target_)) {
      std::ifstream in(e.path());
      out[e.path().filename().string()] = std::string(std::istreambuf_iterator<char>(in), {});
    }
    return out;
  }

  // Everything in the parent folder: the target and any temporary folder left beside it.
  std::set<std::string> Beside() const {
    std::set<std::string> out;
    for (const fs::directory_entry& e : fs::directory_iterator(root_)) out.insert(e.path().filename().string());
    return out;
  }

  fs::path root_;
  std::string target_;
};

const std::map<std::string, std::string> kOld = {{"o.npy", "old o"}, {"lse.npy", "old lse"}};
const std::map<std::string, std::string> kNew = {
    {"o.npy", "new o"}, {"lse.npy", "new lse"}, {"dq.npy", "new dq"}, {"dk.npy", "new dk"}, {"dv.npy", "new dv"}};

TEST_F(OutputSetTest, WritesANewFolder) {
  ASSERT_TRUE(Write(kNew).ok());
  EXPECT_EQ(Contents(), kNew);
  EXPECT_EQ(Beside(), std::set<std::string>{"out"});
}

// An array's file is its header then its data, written in one gathered write: the bytes are
// SerializeNpy's, and reading it back gives the same values (float64 read straight into fp64).
TEST_F(OutputSetTest, NpyFilesAreTheSerializedBytesAndReadBack) {
  const std::vector<double> values = {1.5, -0.0, 3e-310, 1e300, -7.25, 0.1};
  const io::NpyArray f64 = io::EncodeFloat(values, {2, 3}, io::NpyDType::kFloat64);
  const io::NpyArray f32 = io::EncodeFloat(values, {6}, io::NpyDType::kFloat32);
  absl::StatusOr<OutputSet> set = OutputSet::Prepare("--out-dir", target_);
  ASSERT_TRUE(set.ok());
  set->AddNpy("a.npy", f64);
  set->AddNpy("b.npy", f32);
  ASSERT_TRUE(set->Commit().ok());
  std::map<std::string, std::string> files = Contents();
  const std::vector<uint8_t> a = io::SerializeNpy(f64), b = io::SerializeNpy(f32);
  EXPECT_EQ(files["a.npy"], std::string(a.begin(), a.end()));
  EXPECT_EQ(files["b.npy"], std::string(b.begin(), b.end()));

  absl::StatusOr<io::NpyFile> file = io::NpyFile::Open((fs::path(target_) / "a.npy").string());
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->header().shape, (std::vector<int64_t>{2, 3}));
  absl::StatusOr<std::vector<double>> read = file->ReadFloat("a");
  ASSERT_TRUE(read.ok());
  ASSERT_EQ(read->size(), values.size());
  EXPECT_EQ(std::memcmp(read->data(), values.data(), values.size() * sizeof(double)), 0);
  absl::StatusOr<io::NpyFile> narrow = io::NpyFile::Open((fs::path(target_) / "b.npy").string());
  ASSERT_TRUE(narrow.ok());
  absl::StatusOr<std::vector<double>> widened = narrow->ReadFloat("b");
  ASSERT_TRUE(widened.ok());
  EXPECT_EQ(*widened, *io::DecodeFloat(f32, "b"));

  const io::NpyArray ints = io::EncodeInt64(std::vector<int64_t>{1, 2}, {2});
  ASSERT_TRUE(fs::remove_all(target_) > 0);
  absl::StatusOr<OutputSet> again = OutputSet::Prepare("--out-dir", target_);
  ASSERT_TRUE(again.ok());
  again->AddNpy("i.npy", ints);
  ASSERT_TRUE(again->Commit().ok());
  absl::StatusOr<io::NpyFile> int_file = io::NpyFile::Open((fs::path(target_) / "i.npy").string());
  ASSERT_TRUE(int_file.ok());
  absl::StatusOr<std::vector<double>> not_float = int_file->ReadFloat("offsets");
  ASSERT_FALSE(not_float.ok());
  EXPECT_THAT(not_float.status().message(), HasSubstr("offsets: dtype int64 is not floating"));
}

TEST_F(OutputSetTest, AnEmptyFolderIsFilled) {
  fs::create_directory(target_);
  ASSERT_TRUE(Write(kNew).ok());
  EXPECT_EQ(Contents(), kNew);
}

TEST_F(OutputSetTest, AFolderWithOutputsIsRefusedWithoutForce) {
  ASSERT_TRUE(Write(kOld).ok());
  const absl::Status s = Write(kNew);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("already holds outputs"));
  EXPECT_THAT(s.message(), HasSubstr("--force"));
  EXPECT_EQ(Contents(), kOld);
}

TEST_F(OutputSetTest, ForceReplacesTheWholeSet) {
  ASSERT_TRUE(Write(kNew).ok());
  ASSERT_TRUE(Write(kOld, {.force = true, .fail_write_at = {}}).ok());
  EXPECT_EQ(Contents(), kOld);  // no dq/dk/dv of the earlier run beside the new o/lse
  EXPECT_EQ(Beside(), std::set<std::string>{"out"});
}

TEST_F(OutputSetTest, ForceDoesNotReplaceAFolderHoldingFolders) {
  fs::create_directories(fs::path(target_) / "keep");
  const absl::Status s = Write(kNew, {.force = true, .fail_write_at = {}});
  EXPECT_THAT(s.message(), HasSubstr("'keep'"));
  EXPECT_TRUE(fs::is_directory(fs::path(target_) / "keep"));
}

TEST_F(OutputSetTest, PathsAreCheckedBeforeAnyWork) {
  EXPECT_THAT(OutputSet::Prepare("--out-dir", (root_ / "missing" / "out").string()).status().message(),
              HasSubstr("does not exist"));
  std::ofstream(root_ / "file") << "x";
  EXPECT_THAT(OutputSet::Prepare("--out-dir", (root_ / "file").string()).status().message(),
              HasSubstr("not a folder"));
  EXPECT_EQ(OutputSet::Prepare("--out-dir", "").status().code(), absl::StatusCode::kInvalidArgument);
}

// A full disk in the middle of the set: the error names it, the previous set is untouched and no
// temporary folder is left behind.
TEST_F(OutputSetTest, AFailedWriteLeavesThePreviousSetIntact) {
  ASSERT_TRUE(Write(kOld).ok());
  for (size_t fail_at = 0; fail_at < kNew.size(); ++fail_at) {
    const absl::Status s = Write(kNew, {.force = true, .fail_write_at = fail_at});
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << fail_at;
    EXPECT_THAT(s.message(), HasSubstr("No space left on device"));
    EXPECT_EQ(Contents(), kOld) << fail_at;
    EXPECT_EQ(Beside(), std::set<std::string>{"out"}) << fail_at;
  }
}

TEST_F(OutputSetTest, AFailedWriteIntoANewFolderLeavesNothing) {
  EXPECT_FALSE(Write(kNew, {.force = false, .fail_write_at = 2}).ok());
  EXPECT_EQ(Beside(), std::set<std::string>{});
}

// Writer w writes "id" = w and "w<w>" = w. A reader sees one writer's set or another's, never a
// mix: it reads through one descriptor of the folder, so all it reads is one folder's contents.
std::map<std::string, std::string> SetOf(int writer) {
  return {{"id", std::to_string(writer)}, {"w" + std::to_string(writer), std::to_string(writer)}};
}

bool ReadConsistent(const std::string& dir, bool* mixed) {
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd < 0) return false;
  DIR* d = ::fdopendir(::dup(dfd));
  std::map<std::string, std::string> seen;
  bool complete = d != nullptr;
  while (d != nullptr) {
    const dirent* e = ::readdir(d);
    if (e == nullptr) break;
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const int fd = ::openat(dfd, name.c_str(), O_RDONLY);
    if (fd < 0) {
      complete = false;  // the folder was swapped out and removed while being read
      break;
    }
    char buf[32];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    ::close(fd);
    seen[name] = std::string(buf, n > 0 ? static_cast<size_t>(n) : 0);
  }
  if (d != nullptr) ::closedir(d);
  // A folder leaves the target only once (swapped out, then removed), so one still at the target
  // after the read was the live set during all of it; a swapped-out one is being removed: no sample.
  struct stat now, read_from;
  const bool live = ::stat(dir.c_str(), &now) == 0 && ::fstat(dfd, &read_from) == 0 &&
                    now.st_ino == read_from.st_ino && now.st_dev == read_from.st_dev;
  ::close(dfd);
  if (!complete || !live) return false;
  *mixed = !(seen.count("id") == 1 && seen == SetOf(std::stoi(seen["id"].empty() ? "-1" : seen["id"])));
  return true;
}

TEST_F(OutputSetTest, ConcurrentForcedWritersNeverMix) {
  ASSERT_TRUE(Write(SetOf(0)).ok());
  std::atomic<bool> done{false};
  std::atomic<int> mixed{0}, reads{0}, failures{0};
  std::thread reader([&] {
    while (!done) {
      bool m = false;
      if (ReadConsistent(target_, &m)) {
        ++reads;
        if (m) ++mixed;
      }
    }
  });
  std::vector<std::thread> writers;
  for (int w = 1; w <= 4; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < 25; ++i) {
        if (!Write(SetOf(w), {.force = true, .fail_write_at = {}}).ok()) ++failures;
      }
    });
  }
  for (std::thread& t : writers) t.join();
  done = true;
  reader.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(mixed, 0) << "of " << reads << " reads";
  EXPECT_GT(reads, 0);
  bool m = true;
  ASSERT_TRUE(ReadConsistent(target_, &m));
  EXPECT_FALSE(m);
  EXPECT_EQ(Beside(), std::set<std::string>{"out"});
}

// Without --force, of two runs that both found the folder absent, one wins and the other is refused;
// the winner's set stays whole.
TEST_F(OutputSetTest, ConcurrentWritersWithoutForceKeepTheWinner) {
  for (int round = 0; round < 20; ++round) {
    fs::remove_all(target_);
    std::vector<absl::StatusOr<OutputSet>> sets;
    for (int w = 1; w <= 2; ++w) {
      sets.push_back(OutputSet::Prepare("--out-dir", target_));
      ASSERT_TRUE(sets.back().ok());
      for (const auto& [name, text] : SetOf(w)) sets.back()->AddText(name, text);
    }
    absl::Status results[2];
    std::thread a([&] { results[0] = sets[0]->Commit(); });
    std::thread b([&] { results[1] = sets[1]->Commit(); });
    a.join();
    b.join();
    ASSERT_NE(results[0].ok(), results[1].ok()) << results[0] << " / " << results[1];
    const int winner = results[0].ok() ? 1 : 2;
    const absl::StatusCode loser = (results[0].ok() ? results[1] : results[0]).code();
    EXPECT_TRUE(loser == absl::StatusCode::kInvalidArgument || loser == absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(Contents(), SetOf(winner));
    EXPECT_EQ(Beside(), std::set<std::string>{"out"});
  }
}

}  // namespace
}  // namespace gemtb::cli
