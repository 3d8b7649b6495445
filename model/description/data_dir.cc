#include "model/description/data_dir.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
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

std::string*& NamedDataDir() {
  static std::string* named = nullptr;
  return named;
}

}  // namespace

DataDirLocation FindDataDir() {
  if (const char* env = std::getenv("GEMTB_DATA_DIR"); env != nullptr && env[0] != '\0') {
    return {env, "GEMTB_DATA_DIR"};
  }
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  const fs::path installed =
      ec ? fs::path("share/gemtb") : (exe.parent_path().parent_path() / "share" / "gemtb").lexically_normal();
  if (fs::is_directory(installed / "model" / "configs", ec)) return {installed.string(), "installed"};
  // The compiled-in source path serves only programs of this build tree: an installed or copied
  // program never reads the checkout it was built from.
  if (!exe.empty() && IsWithin(exe, GEMTB_BUILD_DIR)) return {GEMTB_SOURCE_DIR, "source tree"};
  return {installed.string(), "installed"};
}

void UseDataDir(const std::string& path) {
  NamedDataDir() = new std::string(path);
}

const std::string& DataDir() {
  if (const std::string* named = NamedDataDir()) return *named;
  static const std::string* dir = new std::string(FindDataDir().path);
  return *dir;
}

}  // namespace gemtb::model
