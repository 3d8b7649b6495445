// Device time of a pass's regions, from CUDA events recorded on the pass's stream at region
// boundaries. Regions are named as the model description names them (model.json's "region": "E.dense",
// "L1.cross", "L1.wukong", "L1.seq0", ..., "F.cross", "head"), so measured and simulated steps line
// up by name. Timing adds only event records to the stream; reading the times waits for it.
#ifndef GEMTB_GPU_TRAIN_REGION_TIMER_H_
#define GEMTB_GPU_TRAIN_REGION_TIMER_H_

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gemtb::gpu::train {

// One region of one pass: start and end in ms after the pass's first event.
struct RegionTime {
  std::string region;
  bool backward = false;
  double start_ms = 0, end_ms = 0;
  double ms() const { return end_ms - start_ms; }
};

class RegionTimer {
 public:
  explicit RegionTimer(cudaStream_t stream) : stream_(stream) {}
  ~RegionTimer();
  RegionTimer(const RegionTimer&) = delete;
  RegionTimer& operator=(const RegionTimer&) = delete;

  // Ends the open region (if any) and opens `region`; End closes the last one.
  absl::Status Begin(std::string region, bool backward);
  absl::Status End();
  // Waits for the stream's last recorded event and returns every closed region in order.
  absl::StatusOr<std::vector<RegionTime>> Times() const;
  // Ms from the pass's first event to `event` (recorded on any stream of the device, done),
  // negative when `event` came first.
  absl::StatusOr<double> Since(cudaEvent_t event) const;

 private:
  struct Mark {
    std::string region;
    bool backward = false;
    cudaEvent_t start = nullptr, end = nullptr;
  };
  absl::StatusOr<cudaEvent_t> Record();
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
  std::vector<Mark> marks_;
  bool open_ = false;
};

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_REGION_TIMER_H_
