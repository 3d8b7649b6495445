#include "gpu/train/region_timer.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace gemtb::gpu::train {
namespace {

absl::Status Cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("region timer: ", what, ": ", cudaGetErrorString(e)));
}

}  // namespace

RegionTimer::~RegionTimer() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

absl::StatusOr<cudaEvent_t> RegionTimer::Record() {
  cudaEvent_t e = nullptr;
  if (absl::Status s = Cuda(cudaEventCreate(&e), "cudaEventCreate"); !s.ok()) return s;
  events_.push_back(e);
  if (absl::Status s = Cuda(cudaEventRecord(e, stream_), "cudaEventRecord"); !s.ok()) return s;
  return e;
}

absl::Status RegionTimer::Begin(std::string region, bool backward) {
  absl::StatusOr<cudaEvent_t> e = Record();
  if (!e.ok()) return e.status();
  if (open_) marks_.back().end = *e;  // one event ends a region and starts the next
  marks_.push_back(Mark{std::move(region), backward, *e, nullptr});
  open_ = true;
  return absl::OkStatus();
}

absl::Status RegionTimer::End() {
  if (!open_) return absl::OkStatus();
  absl::StatusOr<cudaEvent_t> e = Record();
  if (!e.ok()) return e.status();
  marks_.back().end = *e;
  open_ = false;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<RegionTime>> RegionTimer::Times() const {
  std::vector<RegionTime> out;
  if (events_.empty()) return out;
  if (absl::Status s = Cuda(cudaEventSynchronize(events_.back()), "cudaEventSynchronize"); !s.ok()) return s;
  for (const Mark& m : marks_) {
    if (m.end == nullptr) continue;
    float start = 0, end = 0;
    if (absl::Status s = Cuda(cudaEventElapsedTime(&start, events_.front(), m.start), "cudaEventElapsedTime"); !s.ok())
      return s;
    if (absl::Status s = Cuda(cudaEventElapsedTime(&end, events_.front(), m.end), "cudaEventElapsedTime"); !s.ok())
      return s;
    out.push_back(RegionTime{m.region, m.backward, start, end});
  }
  return out;
}

absl::StatusOr<double> RegionTimer::Since(cudaEvent_t event) const {
  if (events_.empty()) return absl::FailedPreconditionError("region timer: Since before any region");
  // Measured from the earlier of the two, so that the elapsed time is never asked backwards.
  float after = 0, before = 0;
  if (absl::Status s = Cuda(cudaEventElapsedTime(&after, events_.front(), event), "cudaEventElapsedTime"); !s.ok())
    return s;
  if (after >= 0) return static_cast<double>(after);
  if (absl::Status s = Cuda(cudaEventElapsedTime(&before, event, events_.front()), "cudaEventElapsedTime"); !s.ok())
    return s;
  return -static_cast<double>(before);
}

}  // namespace gemtb::gpu::train
