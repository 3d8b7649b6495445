#include "reference/dist/store_group.h"

#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace gemtb::reference::dist {
namespace {

std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// Adds the seconds of its lifetime to `total`.
class Timer {
 public:
  explicit Timer(double& total) : total_(total) {}
  ~Timer() { total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  double& total_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace

absl::Status StoreDataParallelGroup::Finish(std::string key) {
  if (!previous_key_.empty())
    if (absl::Status s = store_.Erase(previous_key_); !s.ok()) return s;
  previous_key_ = std::move(key);
  ++round_;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> StoreDataParallelGroup::AllGather(const std::string& bytes) {
  const Timer timer(seconds_);
  const std::string name = absl::StrCat("dp/", round_, "/gather");
  auto all = launch::StoreAllGather(store_, name, bytes);
  if (!all.ok()) return all.status();
  if (absl::Status s = Finish(absl::StrCat(name, "/", rank())); !s.ok()) return s;
  return all;
}

absl::StatusOr<std::vector<float>> StoreDataParallelGroup::ChainSum(const std::vector<std::vector<float>>& blocks) {
  const Timer timer(seconds_);
  const std::string name = absl::StrCat("dp/", round_, "/chain/");
  if (blocks.empty()) return absl::InvalidArgumentError(absl::StrCat("data parallel: rank ", rank(), " has no block"));
  std::vector<float> acc;
  size_t next = 0;
  if (rank() == 0) {
    acc = blocks[0];
    next = 1;
  } else {
    auto below = store_.Get(absl::StrCat(name, rank() - 1));
    if (!below.ok()) return below.status();
    if (below->size() != blocks[0].size() * sizeof(float))
      return absl::DataLossError(absl::StrCat("data parallel: rank ", rank() - 1, " handed on ", below->size(),
                                              " bytes, this rank's blocks hold ", blocks[0].size(), " floats"));
    acc.resize(blocks[0].size());
    std::memcpy(acc.data(), below->data(), below->size());
  }
  for (; next < blocks.size(); ++next)
    for (size_t e = 0; e < acc.size(); ++e) acc[e] += blocks[next][e];
  const std::string key = absl::StrCat(name, rank());
  if (absl::Status s = store_.Set(key, Bytes(acc)); !s.ok()) return s;
  if (rank() != world_size() - 1) {
    auto total = store_.Get(absl::StrCat(name, world_size() - 1));
    if (!total.ok()) return total.status();
    if (total->size() != acc.size() * sizeof(float))
      return absl::DataLossError(absl::StrCat("data parallel: rank ", world_size() - 1, "'s sum has ", total->size(),
                                              " bytes, not ", acc.size(), " floats"));
    std::memcpy(acc.data(), total->data(), total->size());
  }
  if (absl::Status s = Finish(key); !s.ok()) return s;
  return acc;
}

}  // namespace gemtb::reference::dist
