// Files a scenario names (cluster, plan, batches, noise, and the cluster's calibration) resolve
// against the folder of the file that names them, whatever the working directory; a missing one is
// reported by its resolved absolute path.
#include <unistd.h>

#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/scenario/scenario_json.h"
#include "tests/testing/status_matchers.h"

namespace gemtb::sim {
namespace {

namespace fs = std::filesystem;
using ::gemtb::testing::StatusIs;
using ::testing::HasSubstr;

const fs::path kSource = GEMTB_SOURCE_DIR;

// A temporary folder that is also the working directory while it lives.
class ScratchDir {
 public:
  ScratchDir() {
    root_ = fs::temp_directory_path() / ("gemtb_include_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "elsewhere");
    old_cwd_ = fs::current_path();
    fs::current_path(root_ / "elsewhere");
  }
  ~ScratchDir() {
    fs::current_path(old_cwd_);
    fs::remove_all(root_);
  }
  const fs::path& root() const { return root_; }

 private:
  fs::path root_, old_cwd_;
};

TEST(ScenarioIncludes, ResolveAgainstTheIncludingFileNotTheWorkingDirectory) {
  ScratchDir dir;
  // The layout of sim/: scenarios/x.json names ../network/default_cluster.json, which names
  // ../calibration/h200.json.
  fs::create_directories(dir.root() / "copy" / "scenarios");
  fs::create_directories(dir.root() / "copy" / "network");
  fs::create_directories(dir.root() / "copy" / "calibration");
  fs::copy_file(kSource / "sim/scenarios/gem-default.json", dir.root() / "copy/scenarios/gem-default.json");
  fs::copy_file(kSource / "sim/network/default_cluster.json", dir.root() / "copy/network/default_cluster.json");
  fs::copy_file(kSource / "sim/calibration/h200.json", dir.root() / "copy/calibration/h200.json");
  absl::StatusOr<ScenarioDocument> doc = LoadScenarioDocument("../copy/scenarios/gem-default.json");
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_TRUE(BuildScenario(*doc).ok());
}

TEST(ScenarioIncludes, MissingIncludeNamesItsResolvedAbsolutePath) {
  ScratchDir dir;
  fs::create_directories(dir.root() / "alone");
  fs::copy_file(kSource / "sim/scenarios/gem-default.json", dir.root() / "alone/gem-default.json");
  const std::string expected = (dir.root() / "network/default_cluster.json").string();
  EXPECT_THAT(LoadScenarioDocument("../alone/gem-default.json").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cannot read '" + expected + "'")));
}

}  // namespace
}  // namespace gemtb::sim
