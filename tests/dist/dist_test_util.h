// What the tests of reference/dist share: fresh folders and the arrays a rank checkpoints.
#ifndef GEMTB_TESTS_DIST_DIST_TEST_UTIL_H_
#define GEMTB_TESTS_DIST_DIST_TEST_UTIL_H_

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "reference/io/npy.h"
#include "reference/model/checkpoint.h"

namespace gemtb::reference::dist::testutil {

// An empty folder under the temp dir, unique to this process and name.
inline std::string FreshDir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / absl::StrCat("gemtb_", name, "_", ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// Arrays that differ by rank and step.
inline model::NamedArrays RankArrays(int rank, int64_t step) {
  io::NpyArray a;
  a.dtype = io::NpyDType::kFloat32;
  a.shape = {3, 5};
  a.data.resize(15 * sizeof(float));
  for (int i = 0; i < 15; ++i) {
    const float v = static_cast<float>(rank * 1000 + step * 10 + i) * 0.25f;
    std::memcpy(a.data.data() + i * sizeof(float), &v, sizeof(float));
  }
  return {{absl::StrCat("w_rank", rank), a}};
}

inline bool SameArrays(const model::NamedArrays& a, const model::NamedArrays& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].first != b[i].first || a[i].second.dtype != b[i].second.dtype || a[i].second.shape != b[i].second.shape ||
        a[i].second.data != b[i].second.data)
      return false;
  return true;
}

}  // namespace gemtb::reference::dist::testutil

#endif  // GEMTB_TESTS_DIST_DIST_TEST_UTIL_H_
