#include "tools/check/gpu_watchdog.h"

#include <utility>

namespace gemtb::check {

GpuWatchdog::GpuWatchdog(std::chrono::milliseconds limit, HangHandler on_hang)
    : limit_(limit), on_hang_(std::move(on_hang)), thread_([this] { Watch(); }) {}

GpuWatchdog::~GpuWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

GpuWatchdog::Guard GpuWatchdog::Arm(std::string label) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    label_ = std::move(label);
    deadline_ = std::chrono::steady_clock::now() + limit_;
    ++generation_;
  }
  cv_.notify_all();
  return Guard(*this);
}

void GpuWatchdog::Disarm() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    label_.reset();
  }
  cv_.notify_all();
}

void GpuWatchdog::Watch() {
  std::unique_lock<std::mutex> lock(mu_);
  uint64_t handled = 0;
  while (!stop_) {
    if (!label_ || generation_ == handled) {
      cv_.wait(lock);
      continue;
    }
    const uint64_t generation = generation_;
    if (cv_.wait_until(lock, deadline_, [&] { return stop_ || generation_ != generation || !label_; })) continue;
    handled = generation;
    const std::string label = *label_;
    lock.unlock();
    on_hang_(label, limit_);
    lock.lock();
  }
}

}  // namespace gemtb::check
