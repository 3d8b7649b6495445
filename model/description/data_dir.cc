#include "model/description/data_dir.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <utility>
#include <system_error>

#ifndef GEMTB_SOURCE_DIR
#error "GEMTB_SOURCE_DIR must name the source tree (set by model/description/CMakeLists.txt)"
#endif
#ifndef GEMTB_BUILD_DIR
#error "GEMTB_BUILD_DIR must name the build tree (set by model/description/CMakeLists.txt)"
#endif

namespace gemtb::model {
namespace {

namespace fs = std::filesystem;

// True when `path` is `dir` or lies below it (both made canonical as far as they exist).
bool IsWithin(const fs::path& path, const fs::path& dir) {
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(path, ec);
  if (ec) return false;
  const fs::path d = fs::weakly_canonical(dir, ec);
  if (ec) return false;
  auto [d_end, p_it] = std::mismatch(d.begin(), d.end(), p.begin(), p.end());
  return d_end == d.end();
}

// What NameDataDir set; read once, by the first DataDirInUse().
std::optional<fs::path>& NamedDataDir() {
  static std::optional<fs::path>* named = new std::optional<fs::path>();
  return *named;
}

}  // namespace

DataDirLocation FindDataDir(const std::optional<fs::path>& named) {
  if (named.has_value() && !named->empty()) return {named->string(), DataDirOrigin::kNamed};
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  const fs::path installed =
      ec ? fs::path("share/gemtb") : (exe.parent_path().parent_path() / "share" / "gemtb").lexically_normal();
  if (fs::is_directory(installed / "model" / "configs", ec)) return {installed.string(), DataDirOrigin::kInstalled};
  // The compiled-in source path serves only programs of this build tree: an installed or copied
  // program never reads the checkout it was built from.
  if (!exe.empty() && IsWithin(exe, GEMTB_BUILD_DIR)) return {GEMTB_SOURCE_DIR, DataDirOrigin::kSourceTree};
  return {installed.string(), DataDirOrigin::kInstalled};
}

void NameDataDir(std::optional<fs::path> named) { NamedDataDir() = std::move(named); }

const DataDirLocation& DataDirInUse() {
  static const DataDirLocation* location = new DataDirLocation(FindDataDir(NamedDataDir()));
  return *location;
}

const std::string& DataDir() { return DataDirInUse().path; }

}  // namespace gemtb::model
