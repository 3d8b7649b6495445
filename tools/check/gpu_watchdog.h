// A watchdog for GPU calls that may never return. A kernel that hangs (a ring slot waited on that is
// never filled) cannot be cancelled from the host, so the check cannot report it as a mismatch; the
// watchdog turns "no result after N seconds" into a reported failure instead of a silent hang.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace gemtb::check {

class GpuWatchdog {
 public:
  // `on_hang(label, limit)` runs on the watchdog's thread when a guarded call has not finished
  // within `limit`; the check's handler reports the case and ends the process, since the stuck call
  // never returns. It runs at most once per guarded call.
  using HangHandler = std::function<void(const std::string& label, std::chrono::milliseconds limit)>;
  GpuWatchdog(std::chrono::milliseconds limit, HangHandler on_hang);
  ~GpuWatchdog();
  GpuWatchdog(const GpuWatchdog&) = delete;
  GpuWatchdog& operator=(const GpuWatchdog&) = delete;

  // Arms the watchdog for one call; the guard disarms it when it goes out of scope. Guards do not
  // nest (one GPU call at a time).
  class Guard {
   public:
    ~Guard() { dog_.Disarm(); }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    friend class GpuWatchdog;
    explicit Guard(GpuWatchdog& dog) : dog_(dog) {}
    GpuWatchdog& dog_;
  };
  [[nodiscard]] Guard Arm(std::string label);

 private:
  void Disarm();
  void Watch();

  const std::chrono::milliseconds limit_;
  const HangHandler on_hang_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<std::string> label_;  // set while a call is guarded
  std::chrono::steady_clock::time_point deadline_;
  uint64_t generation_ = 0;  // bumps on each Arm, so a handled hang is not handled again
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace gemtb::check
