// The check's watchdog: a guarded call that outlasts the limit is reported once with its label; one
// that returns in time is not; the watchdog can be armed again after a report.
#include "tools/check/gpu_watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gemtb::check {
namespace {

using std::chrono::milliseconds;

struct Reports {
  std::mutex mu;
  std::vector<std::string> labels;
  std::vector<std::string> Get() {
    std::lock_guard<std::mutex> lock(mu);
    return labels;
  }
};

TEST(GpuWatchdog, ReportsACallThatOutlastsTheLimitOnceWithItsLabel) {
  Reports reports;
  GpuWatchdog dog(milliseconds(50), [&](const std::string& label, milliseconds limit) {
    EXPECT_EQ(limit, milliseconds(50));
    std::lock_guard<std::mutex> lock(reports.mu);
    reports.labels.push_back(label);
  });
  {
    const GpuWatchdog::Guard guard = dog.Arm("softmax/none case 7");
    std::this_thread::sleep_for(milliseconds(400));
  }
  EXPECT_EQ(reports.Get(), std::vector<std::string>{"softmax/none case 7"});
}

TEST(GpuWatchdog, StaysQuietForCallsThatReturnInTime) {
  std::atomic<int> hangs{0};
  GpuWatchdog dog(milliseconds(300), [&](const std::string&, milliseconds) { ++hangs; });
  for (int i = 0; i < 20; ++i) {
    const GpuWatchdog::Guard guard = dog.Arm("quick");
    std::this_thread::sleep_for(milliseconds(5));
  }
  std::this_thread::sleep_for(milliseconds(500));  // past the limit of the last call, now disarmed
  EXPECT_EQ(hangs.load(), 0);
}

TEST(GpuWatchdog, EachArmingHasItsOwnDeadline) {
  Reports reports;
  GpuWatchdog dog(milliseconds(100), [&](const std::string& label, milliseconds) {
    std::lock_guard<std::mutex> lock(reports.mu);
    reports.labels.push_back(label);
  });
  for (int i = 0; i < 5; ++i) {  // 5 x 60 ms: each call is in time although together they are not
    const GpuWatchdog::Guard guard = dog.Arm("in time");
    std::this_thread::sleep_for(milliseconds(60));
  }
  {
    const GpuWatchdog::Guard guard = dog.Arm("slow");
    std::this_thread::sleep_for(milliseconds(400));
  }
  EXPECT_EQ(reports.Get(), std::vector<std::string>{"slow"});
}

}  // namespace
}  // namespace gemtb::check
