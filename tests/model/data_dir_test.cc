// model/description/data_dir.h: a named folder wins as given; without one, a program of the build
// tree reads the source tree (there is no share/gemtb beside the test binaries).
#include "model/description/data_dir.h"

#include <filesystem>
#include <optional>

#include "gtest/gtest.h"

namespace gemtb::model {
namespace {

namespace fs = std::filesystem;

TEST(FindDataDir, NamedFolderIsUsedAsGivenEvenWhenItDoesNotExist) {
  const DataDirLocation at = FindDataDir(fs::path("/nonexistent/gemtb-data"));
  EXPECT_EQ(at.path, "/nonexistent/gemtb-data");
  EXPECT_EQ(at.origin, DataDirOrigin::kNamed);
}

TEST(FindDataDir, BuildTreeProgramWithoutNameReadsTheSourceTree) {
  const DataDirLocation at = FindDataDir(std::nullopt);
  EXPECT_EQ(at.origin, DataDirOrigin::kSourceTree);
  EXPECT_TRUE(fs::is_regular_file(fs::path(at.path) / "model" / "configs" / "tiny.json")) << at.path;
}

TEST(FindDataDir, EmptyNameCountsAsNone) {
  const DataDirLocation unnamed = FindDataDir(std::nullopt);
  const DataDirLocation empty = FindDataDir(fs::path());
  EXPECT_EQ(empty.path, unnamed.path);
  EXPECT_EQ(empty.origin, unnamed.origin);
}

}  // namespace
}  // namespace gemtb::model
