// The data-parallel group of the CPU trainer (reference/model/data_parallel.h) over the rendezvous
// TCP store: each collective is a numbered round of keys "dp/<round>/...". A rank erases its key
// of round n-1 once it has finished round n: by then every rank has set its round-n key, so every
// rank has finished reading round n-1.
#ifndef GEMTB_REFERENCE_DIST_STORE_GROUP_H_
#define GEMTB_REFERENCE_DIST_STORE_GROUP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "model/launch/tcp_store.h"
#include "reference/model/data_parallel.h"

namespace gemtb::reference::dist {

class StoreDataParallelGroup : public model::DataParallelGroup {
 public:
  explicit StoreDataParallelGroup(launch::TcpStoreClient& store) : store_(store) {}

  int rank() const override { return store_.rank(); }
  int world_size() const override { return store_.world_size(); }
  absl::StatusOr<std::vector<std::string>> AllGather(const std::string& bytes) override;
  absl::StatusOr<std::vector<float>> ChainSum(const std::vector<std::vector<float>>& blocks) override;

  // Seconds spent inside AllGather and ChainSum so far (sending, and waiting for the other ranks).
  double seconds() const { return seconds_; }

 private:
  // Erases this rank's key of the previous round; remembers this round's.
  absl::Status Finish(std::string key);

  launch::TcpStoreClient& store_;
  int64_t round_ = 0;
  std::string previous_key_;
  double seconds_ = 0;
};

}  // namespace gemtb::reference::dist

#endif  // GEMTB_REFERENCE_DIST_STORE_GROUP_H_
