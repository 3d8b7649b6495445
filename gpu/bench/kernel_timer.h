// Device time of the kernels and memsets that a stretch of host code launches, from CUPTI activity
// records (the timestamps torch.profiler and Nsight Systems read), so that `gemtb bench attention`
// can report, beside its CUDA-event time, the same "summed kernel time" measure that profiler-based
// peer rows report (tools/bench/meta_gdpa_peer.py's `_kernels` rows). Kernels are not serialised:
// CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL records each launch as it ran in the stream.
//
// One KernelTimer at a time per process (CUPTI's activity buffers are process-wide).
#ifndef GEMTB_GPU_BENCH_KERNEL_TIMER_H_
#define GEMTB_GPU_BENCH_KERNEL_TIMER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gemtb::gpu::bench {

// One kernel, copy or memset as the GPU ran it, or (when asked for) one CUDA runtime call as the host
// made it: nanoseconds on CUPTI's clock, the same for both.
struct DeviceActivity {
  enum class Kind { kKernel, kMemset, kMemcpy, kHostCall } kind = Kind::kKernel;
  uint64_t start_ns = 0, end_ns = 0;
  std::string name;  // kernels' (mangled) and host calls' names ("cudaMemcpy_v3020")
};

class KernelTimer {
 public:
  // Whether this build has CUPTI (false: Start returns Unimplemented).
  static bool Available();
  // Starts recording; FailedPrecondition if another timer records, Internal if CUPTI refuses. With
  // `host_calls`, the host's CUDA runtime calls are recorded too (kHostCall), e.g. to tell a wait in
  // cudaMemcpy from host work between calls.
  static absl::StatusOr<std::unique_ptr<KernelTimer>> Start(bool host_calls = false);
  // Waits for the device, stops recording and returns the activities in start order.
  absl::StatusOr<std::vector<DeviceActivity>> Stop();
  // CUPTI's clock now (the activities' timestamps' clock), e.g. at the start and end of a window.
  static uint64_t NowNs();
  ~KernelTimer();
  KernelTimer(const KernelTimer&) = delete;
  KernelTimer& operator=(const KernelTimer&) = delete;

 private:
  KernelTimer() = default;
  bool running_ = false;
};

}  // namespace gemtb::gpu::bench

#endif  // GEMTB_GPU_BENCH_KERNEL_TIMER_H_
