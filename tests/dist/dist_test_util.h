// What the tests of reference/dist share: fresh folders, the arrays a rank checkpoints, and ranks
// run as threads through one store.
#ifndef GEMTB_TESTS_DIST_DIST_TEST_UTIL_H_
#define GEMTB_TESTS_DIST_DIST_TEST_UTIL_H_

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <future>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "model/launch/tcp_store.h"
#include "reference/io/npy.h"
#include "reference/model/checkpoint.h"
#include "gtest/gtest.h"

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

// Runs body(store, rank) for ranks 0..world-1, each on its own thread with its own connection to a
// store served here (rank 0's role), closes each connection after its body and returns each rank's
// result in rank order.
template <typename Result, typename Body>
std::vector<absl::StatusOr<Result>> RunOnRanks(int world, Body body) {
  auto server = launch::TcpStoreServer::Start(0, world);
  if (!server.ok()) return std::vector<absl::StatusOr<Result>>(static_cast<size_t>(world), server.status());
  const int port = (*server)->port();
  std::vector<std::future<absl::StatusOr<Result>>> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.push_back(std::async(std::launch::async, [&, r]() -> absl::StatusOr<Result> {
      auto store = launch::TcpStoreClient::Connect({"127.0.0.1", port}, r, world, launch::Millis(60000));
      if (!store.ok()) return store.status();
      absl::StatusOr<Result> result = body(**store, r);
      if (!result.ok()) return result;
      if (absl::Status s = (*store)->Close(); !s.ok()) return s;
      return result;
    }));
  }
  std::vector<absl::StatusOr<Result>> out;
  for (auto& f : ranks) out.push_back(f.get());
  if (absl::Status s = (*server)->Shutdown(launch::Millis(5000)); !s.ok()) {
    for (auto& r : out) if (r.ok()) r = s;
  }
  return out;
}

// Each rank's arrays (empty for a rank that failed, which is reported).
inline std::vector<model::NamedArrays> ArraysOrEmpty(std::vector<absl::StatusOr<model::NamedArrays>> ranks) {
  std::vector<model::NamedArrays> out;
  for (auto& a : ranks) {
    EXPECT_TRUE(a.ok()) << a.status();
    out.push_back(a.ok() ? *std::move(a) : model::NamedArrays{});
  }
  return out;
}

}  // namespace gemtb::reference::dist::testutil

#endif  // GEMTB_TESTS_DIST_DIST_TEST_UTIL_H_
